"""spec/cursor.tla beyond its manifest models: what each property catches, on variants of the ci
models run through the real TLC.

- AtLeastOnce is not vacuous: with a mark-delete persisted at delivery and NoSkip left out, TLC finds
  a takeover that resumes delivery past a message the consumer never acknowledged.
- The no-recovery and blind-write counterexamples move the mark-delete back through a new owner's
  node write (not through the old owner's appends).
- A blind node write loses persisted progress but skips nothing: without MarkDeleteNeverMovesBack the
  model passes, so that property is the one that catches it.
- A node write whose answer is lost (issue 24 item 3): the handling before the fix (delete the new
  ledger, write on to the old one) loses an acknowledgement that completed, after a write that applied.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.tla_values import ModelValue, Record
from conformance.tlc import SPEC_DIR, Outcome, TLCResult, run_tlc

pytestmark = pytest.mark.tlc

SPEC = SPEC_DIR / "cursor.tla"


def _variant(tmp_path: Path, base: str, name: str, *dropped: str) -> Path:
    text = (SPEC_DIR / base).read_text()
    for line in dropped:
        assert f"\n    {line}\n" in text, line
        text = text.replace(f"\n    {line}\n", "\n")
    config = tmp_path / f"{name}.cfg"
    config.write_text(text)
    return config


def _params(result: TLCResult, index: int) -> Record:
    last = result.trace[index].values()["lastAction"]
    assert isinstance(last, Record)
    params = last["params"]
    assert isinstance(params, Record)
    return params


def test_at_least_once_catches_a_takeover_past_an_unacknowledged_message(tmp_path: Path) -> None:
    config = _variant(tmp_path, "cursor_mutation_persistondelivery_ci.cfg", "alo", "NoSkip")
    result = run_tlc(SPEC, config, workers=1)
    assert result.outcome is Outcome.VIOLATION and result.violated == "AtLeastOnce"
    actions = [s.action for s in result.trace]
    assert actions[-1] == "WriteCursorNode"  # the new owner's open: delivery resumes there
    assert "Acknowledge" not in actions  # nothing was ever acknowledged
    opener = _params(result, -1)["broker"]
    first_owner = _params(result, 1)["broker"]
    assert isinstance(opener, ModelValue) and opener != first_owner
    final = result.trace[-1].values()
    assert final["acked"] == 0
    read_pos = final["readPos"]
    assert read_pos[opener] >= 1  # type: ignore[index]


MOVING_BACK = ["cursor_mutation_norecovery_ci.cfg", "cursor_mutation_blindnodewrite_ci.cfg"]


@pytest.mark.parametrize("config", MOVING_BACK, ids=["norecovery", "blind"])
def test_the_mark_delete_moves_back_through_a_new_owners_node_write(config: str) -> None:
    result = run_tlc(SPEC, SPEC_DIR / config, workers=1)
    assert result.outcome is Outcome.VIOLATION and result.violated == "MarkDeleteNeverMovesBack"
    assert result.trace[-1].action == "WriteCursorNode"
    mover = _params(result, -1)["broker"]
    before, after = result.trace[-2].values(), result.trace[-1].values()
    assert after["owner"] == mover  # the new owner, opening
    status_before = before["status"]
    assert status_before[mover] == "opening"  # type: ignore[index]
    node_before, node_after = before["node"], after["node"]
    assert isinstance(node_before, Record) and isinstance(node_after, Record)
    if config.startswith("cursor_mutation_blind"):
        # a stale read: the node changed since the new owner read it, and the write went through anyway
        assert before["version"][mover] != node_before["version"]  # type: ignore[index]
        recovered = [i for i, s in enumerate(result.trace) if s.action == "RecoverCursorLedger"]
        assert _params(result, recovered[-1])["gone"] is True  # it recovered a ledger already switched away


def test_a_blind_node_write_moves_back_but_skips_nothing(tmp_path: Path) -> None:
    config = _variant(tmp_path, "cursor_mutation_blindnodewrite_ci.cfg", "blind", "MarkDeleteNeverMovesBack")
    result = run_tlc(SPEC, config, workers=1)
    assert result.outcome is Outcome.PASS, result.violated
    assert result.distinct_states > 2381  # more than the unmutated model: the blind writes add behaviours


def test_a_lost_answer_after_an_applied_write_loses_a_completed_ack_without_the_fix() -> None:
    result = run_tlc(SPEC, SPEC_DIR / "cursor_mutation_deleteafterlost_ci.cfg", workers=1)
    assert result.outcome is Outcome.VIOLATION and result.violated == "CompletedAcksRecoverable"
    writes = [i for i, s in enumerate(result.trace) if s.action == "WriteCursorNode"]
    lost = [i for i in writes if _params(result, i)["lost"] is True]
    assert lost and _params(result, lost[-1])["applied"] is True  # the write applied, its answer lost
    assert result.trace[-1].action == "AppendCursorState"  # the completed write went to the old ledger
    last = _params(result, len(result.trace) - 1)
    final = result.trace[-1].values()
    node = final["node"]
    assert isinstance(node, Record) and node["ledger"] != last["ledger"]  # the node names another ledger
