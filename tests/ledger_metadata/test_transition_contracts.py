"""CrossHair checks the PEP 316 contracts of the transitions (see crosshair_targets.py for why the targets exist).

A check passes when CrossHair reports nothing; the negative control shows that a
false contract is reported, so a silent run is not a vacuous one.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TARGETS = "tests.ledger_metadata.crosshair_targets"


def crosshair(targets: list[str], per_condition_s: float, iterations: int) -> subprocess.CompletedProcess[str]:
    command = [
        sys.executable, "-m", "crosshair", "check", "--analysis_kind=PEP316",
        f"--per_condition_timeout={per_condition_s}", f"--max_uninteresting_iterations={iterations}", *targets,
    ]  # fmt: skip
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_writer_close_and_ensemble_change_contracts_hold() -> None:
    run = crosshair([f"{TARGETS}.writer_close_symbolic", f"{TARGETS}.ensemble_change_symbolic"], 3, 40)
    assert run.returncode == 0 and run.stdout.strip() == "", run.stdout + run.stderr


def test_a_false_contract_is_reported() -> None:
    run = crosshair(["tests.ledger_metadata.crosshair_mutant"], 3, 40)
    assert run.returncode != 0
    assert "writer_close_claimed_to_keep_the_last_entry" in run.stdout and "false" in run.stdout


@pytest.mark.deep
def test_all_transition_contracts_hold_deep() -> None:
    run = crosshair([TARGETS], 6, 100)
    assert run.returncode == 0 and run.stdout.strip() == "", run.stdout + run.stderr
