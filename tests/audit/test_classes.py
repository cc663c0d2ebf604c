"""The class archive of spark/classes.py: recorded by a real JVM, checked, used by a real audit, never half-written."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from spark import classes, jvm
from spark.generate import generate, write_jsonl

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture()
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("PULSAR_REF_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_no_archive_means_no_options(cache: Path) -> None:
    path = jvm.archive_path()
    assert path is not None and path.parent == cache
    assert jvm.java_options() == []


@pytest.mark.deep  # 45-85 s: records a second 143 MB archive; `make test` records the real one first
def test_record_check_and_audit_with_it(cache: Path, tmp_path: Path) -> None:
    path = classes.record()
    assert path.is_file() and path.stat().st_size > 0
    assert [p.name for p in cache.iterdir()] == [path.name], "no half-written recording is left behind"
    assert jvm.java_options()[0] == f"-XX:SharedArchiveFile={path}"
    assert classes.record() == path  # recorded once: the second call finds it

    # An audit in a fresh process on the archive decides as without it.
    history = tmp_path / "h.jsonl"
    write_jsonl(generate(seed=3, ops=300), str(history))
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    run = subprocess.run(
        [sys.executable, "-m", "pulsar_ref.cli", "audit", str(history), "--json", str(tmp_path / "r.json")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert json.loads((tmp_path / "r.json").read_text())["valid"] is True

    # A truncated archive crashes a JVM: the check that guards the rename refuses it.
    broken = tmp_path / "broken.jsa"
    broken.write_bytes(path.read_bytes()[: path.stat().st_size // 3])
    with pytest.raises(classes.ArchiveError, match="exited with status"):
        classes._check(broken)
