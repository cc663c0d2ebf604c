"""The mutation score: deliberately broken variants of the pure cores, which the conformance suite must kill.

A mutant is a named, documented, small runtime patch of one core (a method or a module-level
function replaced in-process by `applied(mutant)`, undone on exit; no source is edited). The
patch is on the class or module itself, so every core the harness builds while it is applied
(including copies the replay makes by pickling) runs the broken code.

A mutant is *killed* when one of its checks fails with the patch applied, and that check
passes without it (otherwise the check says nothing about the mutant). A check is the
conformance machinery itself, never an assertion about the mutant:

  - a model of spec/models.toml: its state graph replayed (killed = a mismatch), or its
    counterexample (killed = a ledger.tla/fencing.tla regression trace the mutant *follows*
    to the end, or a metadata.tla counterexample it no longer follows);
  - `traces:<config>:<runs>`: trace validation of seeded runs of the cores (killed = TLC
    refuses a trace: the spec has no behaviour for what the mutant did).

Each mutant lists its checks in the order tried (the cheapest first); the run stops at the
first kill. A mutant none of its checks kills *survives*: `pulsar-ref conform` names it and
exits non-zero. The catalogue is documented in spec/conformance.md ("Mutation score").
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import time
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from conformance.suite import Behaviours, ModelResult, replay_behaviours
from conformance.tlc import TLCError, load_manifest
from conformance.trace_validation import CONFIGS, validate_traces

# ---- patches -------------------------------------------------------------------------------------


class MutantError(Exception):
    """A mutant cannot be applied (the core it patches no longer has the named attribute) or names an unknown check."""


@dataclass(frozen=True)
class Patch:
    """Replace `owner.name` (owner: "module" or "module:Class") by `make(original)`."""

    owner: str
    name: str
    make: Callable[[Any], Any]

    def target(self) -> Any:
        module, _, cls = self.owner.partition(":")
        obj: Any = importlib.import_module(module)
        if cls:
            obj = getattr(obj, cls, None)
            if obj is None:
                raise MutantError(f"{self.owner}: no class {cls} in {module}")
        if self.name not in vars(obj):
            raise MutantError(f"{self.owner} has no attribute {self.name} any more: update the mutant")
        return obj


@dataclass(frozen=True)
class Mutant:
    name: str
    core: str  # the file of the core it breaks
    bug: str  # what is broken, in words (the catalogue's text)
    patches: tuple[Patch, ...]
    checks: tuple[str, ...]  # model names or "traces:<config>:<runs>", tried in this order

    @property
    def specs(self) -> frozenset[str]:
        """The specs its checks replay (trace validation is ledger.tla's)."""
        return frozenset(spec_of(c) for c in self.checks)


@functools.cache
def _manifest_specs() -> dict[str, str]:
    """Model name -> spec, read once (spec_of is asked for every check of every mutant)."""
    return {m.name: m.spec for m in load_manifest()}


def spec_of(check: str) -> str:
    """The spec a check belongs to (from spec/models.toml: a hand-kept table once skipped a new model)."""
    if check.startswith("traces:"):
        return "ledger.tla"
    specs = _manifest_specs()
    if check not in specs:
        raise MutantError(f"the check {check} is neither a model of spec/models.toml nor traces:<config>:<runs>")
    return specs[check]


@contextlib.contextmanager
def applied(mutant: Mutant) -> Iterator[None]:
    """The mutant's patches, in place for the duration of the block."""
    done: list[tuple[Any, str, Any]] = []
    try:
        for patch in mutant.patches:
            obj = patch.target()
            original = vars(obj)[patch.name]
            done.append((obj, patch.name, original))
            setattr(obj, patch.name, patch.make(original))
        yield
    finally:
        for obj, name, original in reversed(done):
            setattr(obj, name, original)


def _method(wrapper: Callable[..., Any]) -> Callable[[Any], Any]:
    """make() for a method: `wrapper(original, self, *args)` is the new method."""

    def make(original: Any) -> Any:
        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            return wrapper(original, self, *args, **kwargs)

        return method

    return make


def _function(wrapper: Callable[..., Any]) -> Callable[[Any], Any]:
    def make(original: Any) -> Any:
        def function(*args: Any, **kwargs: Any) -> Any:
            return wrapper(original, *args, **kwargs)

        return function

    return make


def _handler(event: str, wrapper: Callable[..., Any]) -> Callable[[Any], Any]:
    """make() for a core that dispatches its events through a module-level table (`_HANDLERS`, event
    type -> unbound method, bound at import, so patching the method itself would not reach `step`):
    the table with `event`'s handler replaced by `wrapper(original, self, event)`."""

    def make(table: Any) -> Any:
        (key,) = [k for k in table if k.__name__ == event]
        original = table[key]

        def handler(self: Any, *args: Any) -> Any:
            return wrapper(original, self, *args)

        return {**table, key: handler}

    return make


# ---- the broken variants ---------------------------------------------------------------------------


def _reads_without_fence(original: Any, op: Any, *args: Any) -> Any:
    from impl.bookie.client.writer import Send
    from impl.bookie.protocol import ReadRequest

    return [
        Send(o.bookie, dataclasses.replace(o.request, fence=False))
        if isinstance(o, Send) and isinstance(o.request, ReadRequest)
        else o
        for o in original(op, *args)
    ]


def _absent_after_qa_negatives(
    original: Any, answers: Any, entry_id: int, ensemble_size: int, write_quorum: int, ack_quorum: int
) -> bool:
    from impl.bookie.client.distribution import write_set

    negatives = sum(
        1 for i in write_set(entry_id, ensemble_size, write_quorum) if i in answers and answers[i].is_negative
    )
    return negatives >= ack_quorum  # the bug: Qa negatives instead of Qw - Qa + 1


def _complete_past_a_hole(original: Any, writer: Any) -> Any:
    from impl.bookie.client.writer import AddCompleted

    done = [e for e, p in writer._pending.items() if len(p.acked) >= writer.metadata.ack_quorum]
    if not done:
        return []
    top = max(done)  # the bug: the highest acknowledged entry, even with an earlier one pending
    writer.length = writer._pending[top].length
    for entry_id in [e for e in writer._pending if e <= top]:
        del writer._pending[entry_id]
    writer.last_add_confirmed = top
    return [AddCompleted(top)]


def _as_if_open(original: Any, current: Any, *args: Any) -> Any:
    """The writer's own view (OPEN) written over whatever is stored: a write without the CW's re-check."""
    from impl.metadata.ledger import LedgerState

    return original(dataclasses.replace(current, state=LedgerState.OPEN), *args)


def _close_over_closed(original: Any, current: Any, last_entry_id: int, length: int) -> Any:
    from impl.metadata.ledger import LedgerState

    if current.state is LedgerState.CLOSED:  # the bug: a conflicting CLOSED is overwritten
        current = dataclasses.replace(current, state=LedgerState.OPEN)
    return original(current, last_entry_id, length)


def _add_ignoring_fence(original: Any, core: Any, req: Any, request_id: int) -> Any:
    ledger = core.ledgers.get(req.ledger_id)
    if ledger is None or not ledger.fenced:
        return original(core, req, request_id)
    ledger.fenced = False
    try:
        return original(core, req, request_id)
    finally:
        ledger.fenced = True


def _add_to_deleted(original: Any, core: Any, req: Any, request_id: int) -> Any:
    if req.ledger_id not in core.deleted:
        return original(core, req, request_id)
    core.deleted.discard(req.ledger_id)  # the bug: the collected ledger is re-created by the add
    try:
        return original(core, req, request_id)
    finally:
        core.deleted.add(req.ledger_id)


def _replay_without_fence(original: Any, core: Any, e: Any) -> Any:
    from impl.bookie.core import RecordKind

    if e.record.kind is RecordKind.FENCE:
        return []  # the bug: a restarted bookie forgets it was fenced
    return original(core, e)


def _ack_before_durable(original: Any, core: Any, records: Any, reply: Any) -> Any:
    from impl.bookie.protocol import AddResponse

    outputs = original(core, records, reply)
    if isinstance(getattr(reply, "response", None), AddResponse):
        core.waiting.pop(outputs[0].token)  # the bug: the add's reply does not wait for its journal record
        return [*outputs, reply]
    return outputs


def _efenced_as_io_error(original: Any, writer: Any, bookie: Any, request: Any, response: Any) -> Any:
    from impl.bookie.protocol import AddResponse, ErrorCode

    if isinstance(response, AddResponse) and response.code is ErrorCode.EFENCED:
        response = dataclasses.replace(response, code=ErrorCode.EIO)  # the bug: replace the bookie, go on
    return original(writer, bookie, request, response)


def _coverage_after_one_answer(original: Any, answers: Any, *args: Any) -> bool:
    return any(a.is_known for a in answers.values())


def _expire_keeping_ephemerals(original: Any, server: Any, session_id: int, expired: bool) -> None:
    session = server.sessions.get(session_id)
    if session is not None:
        session.alive = False  # the bug: its ephemeral nodes stay


def _blind_set(original: Any, server: Any, session_id: int, ops: Sequence[Any]) -> Any:
    from impl.metadata.store import ANY_VERSION, SetData

    return original(
        server,
        session_id,
        [dataclasses.replace(op, version=ANY_VERSION) if isinstance(op, SetData) else op for op in ops],
    )


def _keep_writing_after_bad_version(original: Any, core: Any, e: Any) -> Any:
    from impl.broker.managed_ledger_core import ManagedLedgerState, Phase

    if core.state is ManagedLedgerState.OPEN and core.phase is Phase.WRITING_LIST and core.next_ledger is not None:
        # The bug (Pulsar issue 17736): the rollover's list write failed, the new ledger is used anyway.
        core.current, core.next_ledger = core.next_ledger, None
        core.pushed_entries = core.pushed_bytes = 0
        core.confirmed = -1
        core.phase = Phase.IDLE
        return core._send_queued()
    return original(core, e)


def _open_without_recovery(original: Any, core: Any, e: Any) -> Any:
    from impl.broker.managed_ledger_core import CreateLedger, ManagedLedgerState, Phase, RecoverLastLedger

    outputs = original(core, e)
    if any(isinstance(o, RecoverLastLedger) for o in outputs):  # the bug: the last ledger is not fenced
        core.state, core.phase = ManagedLedgerState.RECOVERED, Phase.CREATING
        return [CreateLedger()]
    return outputs


def _fenced_add_as_failure(original: Any, core: Any, e: Any) -> Any:
    return original(core, dataclasses.replace(e, fenced=False))  # the bug: roll over instead of stopping


def _trim_blindly(original: Any, core: Any, *args: Any, **kwargs: Any) -> Any:
    from impl.broker.managed_ledger_core import WriteLedgerList
    from impl.metadata.store import ANY_VERSION

    return [
        dataclasses.replace(o, expected_version=ANY_VERSION) if isinstance(o, WriteLedgerList) else o
        for o in original(core, *args, **kwargs)
    ]


def _send_queued_on_creation(original: Any, core: Any, e: Any) -> Any:
    from impl.broker.managed_ledger_core import ManagedLedgerState, Phase, SendAdd

    outputs = original(core, e)
    if core.state is ManagedLedgerState.OPEN and core.phase is Phase.WRITING_LIST and core.next_ledger == e.ledger_id:
        # the bug: the adds queued during the rollover go to its new ledger at once, before the list names it
        for entry_id in range(len(core.queued)):
            p = core.queued.popleft()
            p.ledger_id, p.entry_id = e.ledger_id, entry_id
            core.pending.append(p)
            outputs.append(SendAdd(p.ledger_id, p.entry_id, p.data))
    return outputs


def _ack_when_sent(original: Any, core: Any, entries: Any) -> Any:
    from impl.broker.replication.replicator import PublishToRemote, SendReceipt

    outputs = original(core, entries)
    for out in [o for o in outputs if isinstance(o, PublishToRemote)]:
        outputs += core.step(SendReceipt(out.position))  # the bug: acknowledged before the remote's receipt
    return outputs


def _replicate_replicated(original: Any, core: Any, entries: Any) -> Any:
    # the bug: the replicated_from check is gone, so what arrived by replication is sent on (a loop)
    return original(
        core, [dataclasses.replace(e, metadata=dataclasses.replace(e.metadata, replicated_from="")) for e in entries]
    )


def _dedup_never_drops(original: Any, dedup: Any, metadata: Any) -> Any:
    enabled, dedup.enabled = dedup.enabled, False  # the bug: duplicates are persisted
    try:
        return original(dedup, metadata)
    finally:
        dedup.enabled = enabled


def _ignore_recovered_entry(original: Any, core: Any, e: Any) -> Any:
    # the bug: the recovered cursor ledger's last entry is dropped, the node's (older) state is taken
    return original(core, dataclasses.replace(e, last_entry=None))


def _mark_past_the_ack(original: Any, state: Any, p: Any, view: Any) -> Any:
    after = view.next_position(p)  # the bug: the message after the acknowledged one is marked deleted too
    return original(state, after if after is not None else p, view)


def _blind_node_write(original: Any, core: Any, *args: Any) -> Any:
    from impl.broker.cursor_core import WriteCursorNode
    from impl.metadata.store import ANY_VERSION

    return [
        dataclasses.replace(o, expected_version=ANY_VERSION)
        if isinstance(o, WriteCursorNode) and o.expected_version is not None
        else o
        for o in original(core, *args)
    ]


def _switch_despite_bad_version(original: Any, core: Any, e: Any) -> Any:
    from impl.broker.cursor_core import CursorNodeWritten, NodeError, SwitchPurpose

    switch = core._switch
    if e.error is NodeError.BAD_VERSION and switch is not None and switch.purpose is SwitchPurpose.ROLLOVER:
        # the bug (the cursor's Pulsar 17736): the new cursor ledger is used although the node still names another
        return core._node_written(CursorNodeWritten(core.node_version + 1, e.now))
    return original(core, e)


def _delete_after_lost_answer(original: Any, core: Any, e: Any) -> Any:
    from impl.broker.cursor_core import NodeError, SwitchPurpose

    switch = core._switch
    if e.error is NodeError.OTHER and switch is not None and switch.purpose is SwitchPurpose.ROLLOVER:
        # the bug (the core before the fix): the write may have applied, yet its new ledger is deleted and
        # writing goes on in the old one, which the node may no longer name
        return core._switch_failed(f"cannot update its node ({e.reason})", e.now, switch.new_ledger)
    return original(core, e)


def _fenced_append_as_failure(original: Any, core: Any, e: Any) -> Any:
    return original(core, dataclasses.replace(e, fenced=False))  # the bug: retried, never FENCED


_CLIENT = "impl.bookie.client"
_ML = "impl.broker.managed_ledger_core"
_FENCING, _BAD_VERSION = "fencing-ci", "fencing-mutation5-badversion-ci"
_WITNESS_FENCED_ADD = "fencing-witness-fencedadd-ci"
_LIVENESS, _STRIPING, _TINY = "ledger-ci-liveness", "ledger-ci-striping", "ledger-ci-tiny-fragments"
_CRASH = "ledger-ci-crash"
_TRACES = "traces:e2-qw2-qa2:20"
_REPLICATOR = "impl.broker.replication.replicator:Replicator"
_CURSOR_MODULE = "impl.broker.cursor_core"
_CURSOR = f"{_CURSOR_MODULE}:ManagedCursorCore"

CATALOGUE: tuple[Mutant, ...] = (
    Mutant(
        "recovery-reads-without-fence",
        "impl/bookie/client/recovery.py",
        "recovery's entry reads go without the fence flag (BookKeeper issue 2614)",
        (Patch(f"{_CLIENT}.recovery:RecoveryOp", "_ask", _method(_reads_without_fence)),),
        ("ledger-mutation1-nofence-ci", _LIVENESS),
    ),
    Mutant(
        "negative-threshold-qa",
        "impl/bookie/client/recovery.py",
        "recovery ends at Qa negative answers for an entry instead of Qw-Qa+1",
        (Patch(f"{_CLIENT}.recovery", "entry_absent", _function(_absent_after_qa_negatives)),),
        ("ledger-mutation3-negqa-ci", _STRIPING),
    ),
    Mutant(
        "lac-past-a-hole",
        "impl/bookie/client/writer.py",
        "the writer's LAC jumps to the highest acknowledged entry while an earlier one is still pending",
        (Patch(f"{_CLIENT}.writer:LedgerWriter", "_deliver_completed", _method(_complete_past_a_hole)),),
        (_TINY, _TRACES),
    ),
    Mutant(
        "ensemble-change-without-cw",
        "impl/metadata/transitions.py",
        "an ensemble change writes the writer's view (OPEN) without re-checking the stored state: "
        "it reopens a ledger IN_RECOVERY or CLOSED",
        (Patch("impl.metadata.transitions", "ensemble_change", _function(_as_if_open)),),
        (_TINY, _TRACES),
    ),
    Mutant(
        "writer-close-over-closed",
        "impl/metadata/transitions.py",
        "a writer close overwrites a conflicting CLOSED (another end, written by a recovery)",
        (Patch("impl.metadata.transitions", "writer_close", _function(_close_over_closed)),),
        (_LIVENESS, _TRACES),
    ),
    Mutant(
        "bookie-ignores-fence",
        "impl/bookie/core.py",
        "a bookie stores a plain (non-recovery) add on a fenced ledger",
        (Patch("impl.bookie.core:BookieCore", "_add", _method(_add_ignoring_fence)),),
        (_LIVENESS,),
    ),
    Mutant(
        "bookie-accepts-deleted-ledger",
        "impl/bookie/core.py",
        "a bookie that garbage-collected a ledger re-creates it on a stale writer's add, its fence forgotten "
        "with it (fencing.tla's DeletedLedgerRefusesAdds = FALSE; BookKeeper issue 4462)",
        (Patch("impl.bookie.core:BookieCore", "_add", _method(_add_to_deleted)),),
        # fencing-ci's graph has the stale owner's add to the ledger the new owner trimmed (the switch's
        # counterexample stops before that add)
        (_FENCING,),
    ),
    Mutant(
        "bookie-forgets-fence-on-restart",
        "impl/bookie/core.py",
        "journal replay skips fence records: a restarted bookie accepts the old writer again",
        (Patch("impl.bookie.core", "_HANDLERS", _handler("Replay", _replay_without_fence)),),
        # ledger-ci-crash's graph has every fence-then-crash order; trace validation reaches one in seed 7
        (_CRASH, "traces:e3-qw3-qa2:20"),
    ),
    Mutant(
        "bookie-acks-before-durable",
        "impl/bookie/core.py",
        "a bookie replies to an add as soon as it hands the add's record to the journal, before the record is "
        "durable: a crash loses an acknowledged entry (BookKeeper's journalSyncData = false)",
        (Patch("impl.bookie.core:BookieCore", "_journal", _method(_ack_before_durable)),),
        # every other model syncs in the add's step, where replying first changes nothing
        ("ledger-switch-ackbeforesync-ci",),
    ),
    Mutant(
        "writer-ignores-efenced",
        "impl/bookie/client/writer.py",
        "the writer takes EFENCED for a failed bookie (ensemble change) instead of stopping",
        (Patch(f"{_CLIENT}.writer:LedgerWriter", "_receive", _method(_efenced_as_io_error)),),
        (_LIVENESS,),
    ),
    Mutant(
        "read-lac-without-coverage",
        "impl/bookie/client/read_lac.py",
        "the fencing read-LAC is done after one answer, before every write set is covered",
        (Patch(f"{_CLIENT}.read_lac", "lac_coverage_reached", _function(_coverage_after_one_answer)),),
        ("ledger-mutation4-readlacone-ci", _STRIPING),
    ),
    Mutant(
        "ml-writes-after-bad-version",
        "impl/broker/managed_ledger_core.py",
        "the managed ledger keeps writing to the rollover's new ledger after the list write got a bad "
        "version (Pulsar issue 17736)",
        (
            Patch(_ML, "_HANDLERS", _handler("LedgerListBadVersion", _keep_writing_after_bad_version)),
            Patch(_ML, "_HANDLERS", _handler("LedgerListWriteFailed", _keep_writing_after_bad_version)),
        ),
        (_BAD_VERSION, _FENCING),
    ),
    Mutant(
        "ml-open-without-recovery",
        "impl/broker/managed_ledger_core.py",
        "a takeover creates the next ledger without recovering (fencing and closing) the last one",
        (Patch(_ML, "_HANDLERS", _handler("LedgerListRead", _open_without_recovery)),),
        (_FENCING, _WITNESS_FENCED_ADD),
    ),
    Mutant(
        "ml-fenced-add-rolls-over",
        "impl/broker/managed_ledger_core.py",
        "an add that failed fenced is taken for a failed writer (roll over to a new ledger) instead of FENCED",
        (Patch(_ML, "_HANDLERS", _handler("AddFailed", _fenced_add_as_failure)),),
        (_FENCING, _WITNESS_FENCED_ADD),
    ),
    Mutant(
        "ml-trim-without-cw",
        "impl/broker/managed_ledger_core.py",
        "trimming writes the ledger list without the expected version (a blind write over a takeover's list)",
        (Patch(_ML, "_HANDLERS", _handler("Trim", _trim_blindly)),),
        (_FENCING,),
    ),
    Mutant(
        "ml-sends-queued-adds-before-list-write",
        "impl/broker/managed_ledger_core.py",
        "the adds queued during a rollover are sent to its new ledger once it is created, before the list write "
        "names it (fencing.tla's QueuedAddsAwaitListWrite = FALSE)",
        (Patch(_ML, "_HANDLERS", _handler("LedgerCreated", _send_queued_on_creation)),),
        # fencing-rollover-ci's harness holds every add a rollover sends until WriteQueuedAdd, which the protocol
        # takes only after the list write: the early send shows only when the switch's trace stores it
        ("fencing-rollover-queuedearly-ci",),
    ),
    Mutant(
        "expiry-keeps-ephemerals",
        "impl/metadata/memory.py",
        "an expired session's ephemeral nodes survive (a stale owner node blocks takeover)",
        (Patch("impl.metadata.memory:MemoryServer", "end_session", _method(_expire_keeping_ephemerals)),),
        ("metadata-nofencing-ci", "metadata-ci"),
    ),
    Mutant(
        "set-ignores-version",
        "impl/metadata/memory.py",
        "setData ignores the expected version: every write is blind",
        (Patch("impl.metadata.memory:MemoryServer", "transact", _method(_blind_set)),),
        (_FENCING, "metadata-ci"),  # the managed ledger's list writes are conditional sets
    ),
    Mutant(
        "replicator-acks-before-receipt",
        "impl/broker/replication/replicator.py",
        "the replicator acknowledges its cursor when it sends an entry, before the remote's receipt (a crash loses it)",
        (Patch(_REPLICATOR, "_entries_read", _method(_ack_when_sent)),),
        ("replication-mutation-ackbeforereceipt-ci", "replication-ci"),
    ),
    Mutant(
        "replicator-replicates-replicated",
        "impl/broker/replication/replicator.py",
        "entries that arrived by replication (replicated_from set) are replicated again (a loop)",
        (Patch(_REPLICATOR, "_entries_read", _method(_replicate_replicated)),),
        ("replication-mutation-loop-ci", "replication-ci"),
    ),
    Mutant(
        "dedup-never-drops",
        "impl/broker/replication/replicator.py",
        "the remote topic persists a message at or below its producer's highest sequence id (no de-duplication)",
        (Patch("impl.broker.replication.replicator:Deduplication", "step", _method(_dedup_never_drops)),),
        ("replication-ci",),
    ),
    Mutant(
        "cursor-ignores-recovered-entry",
        "impl/broker/cursor_core.py",
        "a new owner takes the cursor node's state instead of the recovered cursor ledger's last entry "
        "(the persisted mark-delete moves back)",
        (Patch(_CURSOR_MODULE, "_HANDLERS", _handler("CursorLedgerRecovered", _ignore_recovered_entry)),),
        ("cursor-ci",),  # the spec's NoRecovery does not fence, which the harness's recovery always does
    ),
    Mutant(
        "cursor-marks-past-the-ack",
        "impl/broker/cursor_core.py",
        "a cumulative acknowledgement marks the next message deleted too (a message skipped)",
        (Patch("impl.broker.cursor_core:CursorState", "mark_delete_to", _method(_mark_past_the_ack)),),
        ("cursor-ci",),  # the spec's PersistOnDelivery writes at delivery, where the core is not involved
    ),
    Mutant(
        "cursor-blind-node-write",
        "impl/broker/cursor_core.py",
        "the cursor node is written without the expected version (a stale new owner overwrites the switch "
        "of the cursor ledger)",
        (Patch(_CURSOR, "_first_entry_appended", _method(_blind_node_write)),),
        ("cursor-mutation-blindnodewrite-ci", "cursor-ci"),
    ),
    Mutant(
        "cursor-ignores-fenced-append",
        "impl/broker/cursor_core.py",
        "an append refused by a fenced cursor ledger is taken for a failed write (retried) instead of FENCED",
        (Patch(_CURSOR_MODULE, "_HANDLERS", _handler("CursorStateAppendFailed", _fenced_append_as_failure)),),
        ("cursor-witness-fencedappend-ci", "cursor-ci"),
    ),
    Mutant(
        "cursor-deletes-after-lost-answer",
        "impl/broker/cursor_core.py",
        "a switch whose node write has an unknown outcome (connection loss) deletes the new cursor ledger and "
        "writes on to the old one (the core before the fix)",
        (Patch(_CURSOR_MODULE, "_HANDLERS", _handler("CursorNodeWriteFailed", _delete_after_lost_answer)),),
        ("cursor-mutation-deleteafterlost-ci", "cursor-ci-lostanswers"),
    ),
    Mutant(
        "cursor-switches-despite-bad-version",
        "impl/broker/cursor_core.py",
        "a switch of cursor ledgers whose node write got a bad version goes on with the new ledger (the node "
        "names another broker's)",
        (Patch(_CURSOR_MODULE, "_HANDLERS", _handler("CursorNodeWriteFailed", _switch_despite_bad_version)),),
        ("cursor-ci",),
    ),
)


# ---- running them --------------------------------------------------------------------------------------


@dataclass
class Verdict:
    mutant: Mutant
    killed_by: str = ""  # the check that killed it ("" = survived)
    how: str = ""  # what the check reported (the mismatch's step and action, the refused trace)
    tried: list[str] = field(default_factory=list)  # checks run, with why they did not kill
    error: str = ""  # the mutant could not be applied
    seconds: float = 0.0

    @property
    def killed(self) -> bool:
        return bool(self.killed_by)


class Checks:
    """Runs the checks (with or without a mutant applied), TLC's behaviours fetched once per model."""

    def __init__(
        self,
        behaviours: Callable[[str], Behaviours],
        *,
        seed: int = 0,
        baseline: dict[str, bool] | None = None,
    ) -> None:
        self._behaviours = behaviours
        self.seed = seed
        self.baseline: dict[str, bool] = dict(baseline or {})  # check -> passes unmutated

    def run(self, check: str) -> tuple[bool, str]:
        """(passes, what it reported) with the code as it is now (a mutant applied or not)."""
        if check.startswith("traces:"):
            _, config_name, runs = check.split(":")
            configs = [c for c in CONFIGS if c.name == config_name]
            if not configs:
                raise MutantError(f"no trace validation configuration {config_name}")
            # Fixed seeds (0, 1, ...): the catalogue names runs that reach the bug; --seed only reorders walks.
            report = validate_traces(int(runs), seed=0, configs=configs)
            if report.rejected:
                return False, f"trace refused: {report.rejected[0].describe()}"
            return True, f"{report.accepted} traces accepted"
        result = replay_behaviours(self._behaviours(check), seed=self.seed)
        return result.ok, describe(result)

    def passes_unmutated(self, check: str) -> bool:
        if check not in self.baseline:
            self.baseline[check] = self.run(check)[0]
        return self.baseline[check]


def describe(result: ModelResult) -> str:
    """What a replay reported, in a line (for a kill: where the mutant was caught)."""
    if result.tlc_outcome:
        return result.tlc_outcome
    if result.graph is not None:
        m = result.graph.mismatch
        if m is None:
            return f"conforms ({result.graph.edges_covered}/{result.graph.edges} edges)"
        return f"mismatch at step {m.step} {m.action} ({', '.join(sorted(m.differing)) or 'the cores refused'})"
    assert result.trace is not None
    t, m = result.trace, result.trace.mismatch
    if result.follow:
        return f"counterexample followed ({t.steps} steps)" if m is None else f"counterexample refused at step {m.step}"
    if m is None:
        return f"the mutation's counterexample followed to the end ({t.steps} steps)"
    return f"regression trace refused at step {m.step} {m.action}"


def run_mutant(mutant: Mutant, checks: Checks, specs: Collection[str] | None = None) -> Verdict:
    """Try the mutant's checks in order (only those of `specs`, if given) until one kills it."""
    started = time.monotonic()
    verdict = Verdict(mutant)
    try:
        for check in mutant.checks:
            if specs is not None and spec_of(check) not in specs:
                continue
            if not checks.passes_unmutated(check):
                verdict.tried.append(f"{check}: fails without the mutant (no verdict)")
                continue
            with applied(mutant):
                passes, how = checks.run(check)
            if not passes:
                verdict.killed_by, verdict.how = check, how
                break
            verdict.tried.append(f"{check}: {how}")
    except (MutantError, TLCError) as exc:
        verdict.error = f"{type(exc).__name__}: {exc}"
    except Exception as exc:  # a core crashed outside the replay's steps: not a kill by the machinery
        verdict.error = f"the cores raised {type(exc).__name__}: {exc}"
    verdict.seconds = time.monotonic() - started
    return verdict


def run_mutants(
    checks: Checks,
    mutants: Sequence[Mutant] = CATALOGUE,
    on_verdict: Callable[[Verdict], None] | None = None,
    specs: Collection[str] | None = None,
) -> list[Verdict]:
    verdicts = []
    for mutant in mutants:
        verdict = run_mutant(mutant, checks, specs)
        if on_verdict is not None:
            on_verdict(verdict)
        verdicts.append(verdict)
    return verdicts


def score(verdicts: Sequence[Verdict]) -> str:
    killed = sum(v.killed for v in verdicts)
    survivors = [v.mutant.name for v in verdicts if not v.killed]
    text = f"mutants killed: {killed}/{len(verdicts)}"
    return text + (f" (SURVIVED: {', '.join(survivors)})" if survivors else "")


__all__ = ["CATALOGUE", "Checks", "Mutant", "MutantError", "Patch", "Verdict", "applied", "run_mutants", "score"]
