"""impl/heap.py: what a server process does to the cycle collector once started (in a child process, so
this test process keeps CPython's defaults)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from impl import heap

REPO = Path(__file__).resolve().parents[1]


def test_settle_after_startup_freezes_and_spaces_out_middle_and_full_collections() -> None:
    probe = (
        "import gc, json; from impl import heap; before = gc.get_threshold(); heap.settle_after_startup(); "
        "print(json.dumps([before, gc.get_threshold(), gc.get_freeze_count()]))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, check=True)
    before, after, frozen = json.loads(out.stdout)
    assert after == [before[0], heap.MIDDLE_EVERY, heap.FULL_EVERY]
    assert before[1] < heap.MIDDLE_EVERY and before[2] < heap.FULL_EVERY
    assert frozen > 1000  # the interpreter's and the imported modules' objects
