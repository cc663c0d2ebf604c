"""storage.tla's TLC behaviours replayed against the storage lifecycle core (conformance/storage_spec.py).

- every ci model of storage.tla, from the manifest: the passing model's whole state graph (every edge,
  every distinct state), and each mutation's counterexample (delete before recorded, trim on a bad
  version, a blind compaction swap, record before the upload), which the core must refuse;
- broken cores (`StorageLifecycle` subclasses), which the replay must catch.
"""

from __future__ import annotations

from typing import Any

import pytest

from conformance.replay import read_constants, replay_graph
from conformance.storage_spec import StorageMapping
from conformance.suite import Behaviours
from conformance.tlc import SPEC_DIR, Outcome, load_manifest
from impl.broker.storage_lifecycle import (
    BadVersion,
    CompactionRead,
    DeleteBookieCopy,
    DeleteBookieLedgers,
    DeleteCompactedLedger,
    LifecycleConfig,
    ListWritten,
    Output,
    Stage,
    StorageLifecycle,
    Uploaded,
    WriteUnknown,
)
from tests.conformance.shared import Conformance

pytestmark = pytest.mark.tlc

MODELS = {m.name: m for m in load_manifest()}
STORAGE = [m for m in MODELS.values() if m.spec == "storage.tla" and m.profile == "ci"]
EVERY_ACTION = {
    "Acquire",
    "Ack",
    "Trim",
    "OffloadStart",
    "OffloadUploaded",
    "OffloadRecord",
    "DeleteBookieCopy",
    "CompactStart",
    "CompactSwap",
}


@pytest.fixture(scope="module")
def behaviours(conformance: Conformance) -> dict[str, Behaviours]:
    return {m.name: conformance.behaviours(m.name) for m in STORAGE}


def test_the_manifest_has_the_models_the_issue_asks_for() -> None:
    violations = {m.violates for m in STORAGE if m.expect is Outcome.VIOLATION}
    assert violations == {"NeededReadable", "OffloadedReadsSame", "CompactedReadCorrect", "CompactedNoDeletedKey"}
    assert {m.name for m in STORAGE if m.expect is Outcome.VIOLATION} == {
        "storage-mutation-deletebeforerecorded-ci",
        "storage-mutation-trimonbadversion-ci",
        "storage-mutation-swapwithoutcas-ci",
        "storage-mutation-recordbeforeuploaded-ci",
        "storage-mutation-keepdeleted-ci",
    }
    assert any(m.expect is Outcome.PASS for m in STORAGE)


@pytest.mark.parametrize("name", [m.name for m in STORAGE])
def test_every_ci_model_is_replayed(behaviours: dict[str, Behaviours], conformance: Conformance, name: str) -> None:
    result = conformance.replay(name)
    assert result.ok, str(result.graph and result.graph.mismatch) + str(result.trace and result.trace.mismatch)
    if result.graph is not None:
        graph = behaviours[name].graph
        assert graph is not None
        assert result.graph.edges_covered == result.graph.edges == len(graph.edges) > 0
        assert result.graph.states_covered == result.graph.states == len(graph.labels)
        return
    # the mutations are bugs the core does not have: refused at the step where the bug shows
    assert result.trace is not None and result.trace.mismatch is not None
    expected = {
        "storage-mutation-deletebeforerecorded-ci": "DeleteBookieCopy",
        "storage-mutation-trimonbadversion-ci": "Trim",
        "storage-mutation-swapwithoutcas-ci": "CompactSwap",
        "storage-mutation-recordbeforeuploaded-ci": "OffloadRecord",
        "storage-mutation-keepdeleted-ci": "CompactStart",
    }
    assert result.trace.mismatch.action == expected[name], str(result.trace.mismatch)


def test_the_graph_has_every_action(behaviours: dict[str, Behaviours]) -> None:
    actions = {e.action for b in behaviours.values() if b.graph is not None for e in b.graph.edges}
    assert actions == EVERY_ACTION


class DeletingWhateverTheAnswer(StorageLifecycle):
    """Broken: a failed trim deletes its ledgers anyway (the trim_on_bad_version mutation)."""

    def _failed(self, e: BadVersion | WriteUnknown) -> list[Output]:
        op = self.op
        out = super()._failed(e)
        if op is not None and op.stage is Stage.TRIMMING:
            out.append(DeleteBookieLedgers(tuple(x.ledger_id for x in op.trimmed)))
        return out


class DeletingOnceUploaded(StorageLifecycle):
    """Broken: the bookie copy is deleted as soon as the upload completes, before the record."""

    def _uploaded(self, e: Uploaded) -> list[Output]:
        return [*super()._uploaded(e), DeleteBookieCopy(e.ledger_id)]


class CleaningUpAfterLostAnswers(StorageLifecycle):
    """Broken: a lost answer is taken for a failure: the new compacted ledger is deleted, though the
    swap may have applied."""

    def _failed(self, e: BadVersion | WriteUnknown) -> list[Output]:
        op = self.op
        out = super()._failed(e)
        if isinstance(e, WriteUnknown) and op is not None and op.stage is Stage.SWAPPING and op.ledger_id:
            out.append(DeleteCompactedLedger(op.ledger_id))
        return out


class IgnoringRetention(StorageLifecycle):
    """Broken: retention is not applied (every consumed ledger is trimmed)."""

    def __init__(self, name: str, config: LifecycleConfig, **kw: Any) -> None:
        super().__init__(name, LifecycleConfig(deletion_lag_s=config.deletion_lag_s), **kw)


class ForgettingTheRecord(StorageLifecycle):
    """Broken: the view is not updated after its own offload record (its next write has a stale list)."""

    def _list_written(self, e: ListWritten) -> list[Output]:
        before = self.ledgers
        out = super()._list_written(e)
        if self.op is not None and self.op.stage is Stage.RECORDED:
            self.ledgers = before
        return out


class KeepingDeletedValues(StorageLifecycle):
    """Broken: compaction drops the empty payloads first, keeping the values they deleted (keep_deleted)."""

    def _compaction_read(self, e: CompactionRead) -> list[Output]:
        return super()._compaction_read(CompactionRead(tuple(x for x in e.entries if x.value is not None)))


@pytest.mark.parametrize(
    ("core", "symptom"),
    [
        (DeletingWhateverTheAnswer, "bookies"),
        (DeletingOnceUploaded, "bookies"),
        (CleaningUpAfterLostAnswers, "cexists"),
        (IgnoringRetention, "ml"),
        (ForgettingTheRecord, "known"),
        (KeepingDeletedValues, "cdata"),
    ],
    ids=[
        "deletes-on-failed-trim",
        "deletes-before-record",
        "cleans-after-lost-answer",
        "no-retention",
        "stale-record",
        "keeps-deleted-values",
    ],
)
def test_a_broken_core_is_caught(behaviours: dict[str, Behaviours], core: type[StorageLifecycle], symptom: str) -> None:
    model = MODELS["storage-ci"]
    graph = behaviours[model.name].graph
    assert graph is not None
    mapping = StorageMapping(read_constants((SPEC_DIR / model.config).read_text()), cores=core)
    report = replay_graph(mapping, model.name, graph, symmetry=False)
    assert report.mismatch is not None, f"the replay did not catch {core.__name__}"
    assert symptom in report.mismatch.differing, str(report.mismatch)
