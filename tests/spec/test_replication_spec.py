"""spec/replication.tla beyond its manifest models: the liveness property can fail, and it is
fairness (not luck) that makes replication catch up."""

from __future__ import annotations

from pathlib import Path

import pytest

from conformance.tlc import SPEC_DIR, Outcome, run_tlc

pytestmark = pytest.mark.tlc


def _variant(tmp_path: Path, name: str, *replacements: tuple[str, str]) -> Path:
    text = (SPEC_DIR / "replication_ci.cfg").read_text()
    for old, new in replacements:
        assert old in text, old
        text = text.replace(old, new)
    config = tmp_path / f"{name}.cfg"
    config.write_text(text)
    return config


def test_without_fairness_replication_may_never_catch_up(tmp_path: Path) -> None:
    config = _variant(tmp_path, "unfair", ("SPECIFICATION FairSpec", "SPECIFICATION Spec"))
    result = run_tlc(SPEC_DIR / "replication.tla", config, workers=1)
    assert result.outcome is Outcome.VIOLATION
    assert result.violated == "temporal properties"  # TLC 2.15 does not name the liveness property
    assert any(s.action == "Publish" for s in result.trace)


def test_a_lost_message_breaks_liveness_too(tmp_path: Path) -> None:
    # The loss mutation under fairness: besides NoLoss, the message never reaches the remote.
    config = _variant(
        tmp_path,
        "loss",
        ("AckBeforeReceipt = FALSE", "AckBeforeReceipt = TRUE"),
        ("    NoLoss\n", ""),
    )
    result = run_tlc(SPEC_DIR / "replication.tla", config, workers=1)
    assert result.outcome is Outcome.VIOLATION and result.violated == "temporal properties"
    assert {"BrokerCrashes", "OwnershipChange"} & {s.action for s in result.trace}  # the crash that lost it
