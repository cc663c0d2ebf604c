"""spec/ledger.tla against the implementation: the action mapping and the abstraction function.

Mapping (spec action [lastAction params] -> what the harness feeds the cores, see
conformance/ledger_cluster.py):

  WriterSendsAdd [entry, lac]
      writer step Add(payload(entry)); its Sends go in flight
  WriterReceivesAddResponse [bookie, entry, ok, counted]
      the bookie core handles the AddRequest (journalled, durable), then
      writer step BookieAnswered(bookie, request, reply)
  WriterChangesEnsemble [failed, replacement, first, outcome]
      writer step BookieAnswered(failed, request, None) for its unanswered adds to `failed` (the timeout);
      its ChooseReplacement answered with `replacement`; the EnsembleChange CW applied
  WriterCloses [lac, outcome]
      writer step Close(); the WriterClose CW applied
  RecoveryStarts [client, outcome]
      a new RecoveryOp(metadata read now) step Start(); the StartRecovery CW applied
  RecoveryReceivesReadLacResponse [client, bookie, lac, stale]
      the bookie core handles the fenced ReadRequest(entry -1); op step BookieAnswered
  RecoveryReceivesReadResponse [client, bookie, entry, found, stale]
      the bookie core handles the fenced ReadRequest(entry); op step BookieAnswered
  RecoveryReceivesAddResponse [client, bookie, entry, counted]
      the bookie core handles the recovery AddRequest; op step BookieAnswered
  RecoveryChangesEnsemble [client, failed, replacement, first]
      op step BookieAnswered(failed, add, None) for its unanswered write-backs; replacement answered
      (a local change, kept until the close)
  RecoveryCloses [client, lastEntry, outcome]
      the held RecoveryClose CW applied; op step MetadataResult
  RecoveryReadTimedOut [client, entry]
      op step BookieAnswered(bookie, read, None) for its lost read of the entry being decided: it asks the
      next bookie of the write set (sequential reads)
  RecoveryAborts [client, phase]
      every unanswered request of the attempt gets None (reads first, then a write-back with
      no replacement left): the op must report RecoveryFailed
  MessageLost [kind, client, bookie, entry]
      the request leaves the network unhandled; the sender gets None at its timeout step
  ReplyLost [kind, client, bookie, entry]
      the bookie core handles it (journalled), the reply is dropped; None at the timeout step
  RequestToDownBookieLost [kind, client, bookie, entry]
      as MessageLost, not counted as a lost message
  (with SharedFate, ledger-deep's network) every step that sends
      its requests to a bookie that is down are its client's connection attempt's queue: a step
      that starts an attempt (nothing of the client in flight to that bookie) has a variant per
      outcome: the attempt fails (its requests are lost at once, not counted) or it connects at
      the bookie's restart (they stay in flight; a queued request is never lost alone)
  RecovererCrashes [client, phase]
      the recovery client's process dies: its RecoveryOp is dropped; its requests in flight still
      reach the bookies, their replies nobody; RecoveryStarts later builds a new op
  BookieCrashes [bookie]
      the bookie core is rebuilt from its journal (BookieCore.replay); queued requests are lost
  BookieRestarts [bookie] / BookieFailsPermanently [bookie]
      the bookie answers again / never again
  BookieSyncs [bookie]
      (JournalSyncData = FALSE only) the bookie's unsynced journal appends become durable

The journal-sync switch (ledger.tla's JournalSyncData, FALSE in ledger-switch-ackbeforesync-ci):
under it the bookies' journals hold their appends unsynced (`SimBookie.hold`), so an add is
answered only if the bookie core replies before its journal record is durable, which the
production core never does (its reply waits for `on_durable`): the switch's counterexample is a
regression trace the cores refuse at its first acknowledged add. A fenced read's record is synced
before its answer, with everything journalled before it (the spec's `Synced`). `durableState` is
{} while nothing is unsynced, else what the durable journal holds: its entries and the LAC header
of its last entry (what a crash would leave).

A message-choosing action can be any message of its kind in flight: `candidates` lists them
all, and the replay keeps the one whose result is the spec's next state (with a trace's
`lastAction` params, only those that agree with them).

Bookies: the spec's model values b1, b2, ... are bookie ids `bookie-1:3181`, ...; under the
model's SYMMETRY the correspondence is re-chosen along the way (conformance/replay.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import replace
from functools import partial
from itertools import combinations

from conformance.ledger_cluster import (
    LEDGER_ID,
    PAYLOAD_SIZE,
    CoreTypes,
    HarnessError,
    InFlight,
    LedgerCluster,
    pending_acks,
    pending_lacs,
)
from conformance.replay import Candidate, Names
from conformance.sim_bookie import SimBookie
from conformance.tla_values import Function, ModelValue, Record, Value
from impl.bookie.client.errors import LedgerFencedError
from impl.bookie.client.recovery import RecoveryPhase
from impl.bookie.client.writer import LedgerWriter, WriterState
from impl.bookie.core import RecordKind
from impl.bookie.entry_format import read_header
from impl.bookie.protocol import LAST_ENTRY, AddRequest, ReadRequest
from impl.metadata.ledger import NO_ENTRY, BookieId, LedgerMetadata

SPEC = "ledger.tla"


def _mv(value: Value) -> ModelValue:
    if not isinstance(value, ModelValue):
        raise TypeError(f"expected a model value, got {value!r}")
    return value


def _queued(cluster: LedgerCluster) -> set[tuple[str, BookieId]]:
    """(client, bookie) pairs with a connection attempt pending: requests in flight to a down bookie."""
    return {(m.client, m.bookie) for m in cluster.inflight if not cluster.bookies[m.bookie].up}


def _then_shared_fate(
    run: Callable[[LedgerCluster], None], failing: frozenset[BookieId], cluster: LedgerCluster
) -> None:
    """`run`, then ledger.tla's SharedFate for the connection attempts it started: the requests it sent
    to a down bookie to which their client had nothing queued start an attempt; those to a bookie in
    `failing` fail with it at once (not counted as a lost message; the sender sees a timeout), the others
    wait in flight for the bookie's restart. A `failing` bookie the step starts no attempt to is refused
    (that variant is another one's twin)."""
    before = _queued(cluster)
    run(cluster)
    started = [m for m in cluster.inflight if not cluster.bookies[m.bookie].up and (m.client, m.bookie) not in before]
    missing = failing - {m.bookie for m in started}
    if missing:
        raise HarnessError(f"this step starts no connection attempt to {sorted(missing)}")
    if failing:
        cluster.lose_requests([m for m in started if m.bookie in failing], counted=False)


class LedgerMapping:
    """Drives a LedgerCluster from ledger.tla's actions; abstracts it back to ledger.tla's variables."""

    spec = SPEC

    def __init__(self, constants: Mapping[str, Value], *, cores: CoreTypes | None = None) -> None:
        bookies = constants["Bookies"]
        recoverers = constants["Recoverers"]
        assert isinstance(bookies, frozenset) and isinstance(recoverers, frozenset)
        self.bookies = sorted((_mv(b) for b in bookies), key=str)
        self.symmetric = frozenset(self.bookies)  # the values a SYMMETRY may permute
        self.writer = _mv(constants["Writer"])
        self.recoverers = sorted((_mv(c) for c in recoverers), key=str)
        self.quorums = (int(constants["E"]), int(constants["Qw"]), int(constants["Qa"]))  # type: ignore[arg-type]
        self.entries = range(int(constants["NumEntries"]))  # type: ignore[arg-type]
        self.impl_id = {b: f"bookie-{i}:3181" for i, b in enumerate(self.bookies, start=1)}
        self.shared_fate = constants.get("SharedFate") is True  # ledger.tla's network switch, set by ledger-deep's cfg
        # ledger.tla's JournalSyncData (default TRUE); FALSE: journal appends wait for a sync (SimBookie.hold)
        self.journal_sync = constants.get("JournalSyncData") is not False
        # ledger.tla's LostKinds (default: every request kind): the requests that MessageLost and ReplyLost may
        # lose, narrowed by ledger_deep_large.cfg to the writer's adds
        lost_kinds = constants.get("LostKinds")
        self.lost_kinds = lost_kinds if isinstance(lost_kinds, frozenset) else None
        self.cores = cores or CoreTypes()  # tests swap in broken cores to prove that the replay can fail
        # A counterexample of an unmutated model is a reachability witness (a situation BookKeeper's
        # protocol reaches, e.g. a closed length that is not the length at the end), which the
        # implementation must follow; a mutation's (a known bug) is a regression trace it must refuse.
        # The journal-sync switch is a known unsafe configuration: its counterexample is refused too.
        self.counterexamples_are_followed = constants.get("Mutation", "none") == "none" and self.journal_sync

    # ---- Init -----------------------------------------------------------------------------------
    def initial(self, state: Mapping[str, Value]) -> tuple[LedgerCluster, Names]:
        meta = state["meta"]
        assert isinstance(meta, Record)
        fragments = meta["fragments"]
        assert isinstance(fragments, tuple)
        first = fragments[0]
        assert isinstance(first, Record) and isinstance(first["ens"], tuple)
        ensemble = tuple(self.impl_id[_mv(b)] for b in first["ens"])
        cluster = LedgerCluster(
            [self.impl_id[b] for b in self.bookies],
            ensemble,
            self.quorums,
            self.writer.name,
            [c.name for c in self.recoverers],
            self.cores,
        )
        for node in cluster.bookies.values():
            node.hold = not self.journal_sync  # appends durable only at a sync (JournalSyncData = FALSE)
        return cluster, {impl: spec for spec, impl in self.impl_id.items()}

    # ---- actions -> inputs ------------------------------------------------------------------------
    def candidates(self, cluster: LedgerCluster, names: Names, action: str) -> list[Candidate]:
        make = getattr(self, f"_do_{action}", None)
        if make is None:
            raise KeyError(f"ledger.tla action {action} has no mapping")
        result: list[Candidate] = make(cluster, names)
        if self.shared_fate:
            down = sorted(b for b, node in cluster.bookies.items() if not node.up)
            fates = [frozenset(s) for n in range(len(down) + 1) for s in combinations(down, n)]
            result = [
                replace(c, label=_fate_label(c.label, failing), run=partial(_then_shared_fate, c.run, failing))
                for c in result
                for failing in fates
            ]
        return result

    def _groups(
        self, cluster: LedgerCluster, names: Names, keep: Callable[[InFlight, Record], bool]
    ) -> list[tuple[Record, list[InFlight]]]:
        """In-flight requests grouped by their spec message (identical messages are one in the spec)."""
        groups: dict[Record, list[InFlight]] = {}
        for m in cluster.inflight:
            msg = self.message(m, names)
            if keep(m, msg):
                groups.setdefault(msg, []).append(m)
        return sorted(groups.items(), key=lambda kv: str(kv[0]))

    def _deliver(self, names: Names, msg: Record, cluster: LedgerCluster) -> None:
        chosen = self._find(cluster, names, msg)
        with self._fence_synced(cluster, chosen):
            cluster.deliver(chosen)

    def _lose(
        self, names: Names, msg: Record, lose: Callable[[LedgerCluster, list[InFlight]], None], cluster: LedgerCluster
    ) -> None:
        chosen = self._find(cluster, names, msg)
        with self._fence_synced(cluster, chosen):
            lose(cluster, chosen)

    @contextlib.contextmanager
    def _fence_synced(self, cluster: LedgerCluster, chosen: list[InFlight]) -> Iterator[None]:
        """Under JournalSyncData = FALSE, a fenced read's bookie syncs its journal (what it held unsynced
        first, then the fence record with the read): ledger.tla's `Synced` in the same step."""
        nodes = [
            cluster.bookies[m.bookie]
            for m in chosen
            if not self.journal_sync and isinstance(m.request, ReadRequest) and m.request.fence
        ]
        for node in nodes:
            if node.sync():
                raise HarnessError("a bookie held replies until its journal's sync, which this model's bookies do not")
            node.hold = False
        try:
            yield
        finally:
            for node in nodes:
                node.hold = True

    def _find(self, cluster: LedgerCluster, names: Names, msg: Record) -> list[InFlight]:
        """The requests in flight that are the spec message `msg` (candidates run on a clone)."""
        return [m for m in cluster.inflight if self.message(m, names) == msg]

    @staticmethod
    def _msg_params(msg: Record) -> dict[str, Value]:
        return {k: msg[k] for k in ("kind", "client", "bookie", "entry")}

    def _deliveries(self, cluster: LedgerCluster, names: Names, want: Callable[[Record], bool]) -> list[Candidate]:
        def keep(m: InFlight, msg: Record) -> bool:
            return cluster.bookies[m.bookie].up and want(msg)

        return [
            Candidate(f"deliver {_show(msg)}", self._msg_params(msg), partial(self._deliver, names, msg))
            for msg, _ in self._groups(cluster, names, keep)
        ]

    def _do_WriterReceivesAddResponse(self, cluster: LedgerCluster, names: Names) -> list[Candidate]:
        return self._deliveries(cluster, names, lambda m: m["kind"] == "add" and m["client"] == self.writer)

    def _do_RecoveryReceivesAddResponse(self, cluster: LedgerCluster, names: Names) -> list[Candidate]:
        return self._deliveries(cluster, names, lambda m: m["kind"] == "recoveryAdd" and m["client"] != self.writer)

    def _do_RecoveryReceivesReadLacResponse(self, cluster: LedgerCluster, names: Names) -> list[Candidate]:
        return self._deliveries(cluster, names, lambda m: m["kind"] == "readLac")

    def _do_RecoveryReceivesReadResponse(self, cluster: LedgerCluster, names: Names) -> list[Candidate]:
        return self._deliveries(cluster, names, lambda m: m["kind"] == "read")

    def _losses(
        self,
        cluster: LedgerCluster,
        names: Names,
        up: bool | None,
        lose: Callable[[LedgerCluster, list[InFlight]], None],
    ) -> list[Candidate]:
        def keep(m: InFlight, msg: Record) -> bool:
            return up is None or cluster.bookies[m.bookie].up == up

        return [
            Candidate(f"lose {_show(msg)}", self._msg_params(msg), partial(self._lose, names, msg, lose))
            for msg, _ in self._groups(cluster, names, keep)
        ]

    def _counted_losses(self, candidates: list[Candidate]) -> list[Candidate]:
        """MessageLost's and ReplyLost's candidates, of the kinds LostKinds lets a model lose."""
        if self.lost_kinds is None:
            return candidates
        return [c for c in candidates if c.params.get("kind") in self.lost_kinds]

    def _do_MessageLost(self, cluster: LedgerCluster, names: Names) -> list[Candidate]:
        # With SharedFate a request to a down bookie is queued on a connection attempt, not on the wire.
        up = True if self.shared_fate else None
        return self._counted_losses(self._losses(cluster, names, up, lambda c, ms: c.lose_requests(ms)))

    def _do_ReplyLost(self, cluster: LedgerCluster, names: Names) -> list[Candidate]:
        return self._counted_losses(self._losses(cluster, names, True, lambda c, ms: c.lose_replies(ms)))

    def _do_RequestToDownBookieLost(self, cluster: LedgerCluster, names: Names) -> list[Candidate]:
        return self._losses(cluster, names, False, lambda c, ms: c.lose_requests(ms, counted=False))

    def _do_WriterSendsAdd(self, cluster: LedgerCluster, names: Names) -> list[Candidate]:
        return [Candidate("writer.add", {}, lambda c: c.writer_add())]

    def _do_WriterCloses(self, cluster: LedgerCluster, names: Names) -> list[Candidate]:
        return [Candidate("writer.close", {}, lambda c: c.writer_close())]

    def _replacements(self, names: Names, failed: Iterable[BookieId]) -> list[tuple[BookieId, BookieId]]:
        impl = {spec: i for i, spec in names.items()}
        return [(b, impl[nb]) for b in sorted(set(failed)) for nb in self.bookies if impl[nb] != b]

    def _do_WriterChangesEnsemble(self, cluster: LedgerCluster, names: Names) -> list[Candidate]:
        timed_out = [m.bookie for m in cluster.timed_out if m.core is cluster.writer]
        return [
            Candidate(
                f"writer timeout on {b}, replacement {nb}",
                {"failed": names[b], "replacement": names[nb]},
                partial(LedgerCluster.timeout_writer, bookie=b, replacement=nb),
            )
            for b, nb in self._replacements(names, timed_out)
        ]

    def _per_client(self, label: str, run: Callable[[LedgerCluster, str], None]) -> list[Candidate]:
        def bind(name: str) -> Callable[[LedgerCluster], None]:
            return lambda cluster: run(cluster, name)

        return [Candidate(f"{label} {c}", {"client": c}, bind(c.name)) for c in self.recoverers]

    def _do_RecoveryStarts(self, cluster: LedgerCluster, names: Names) -> list[Candidate]:
        return self._per_client("start recovery", LedgerCluster.start_recovery)

    def _do_RecoveryCloses(self, cluster: LedgerCluster, names: Names) -> list[Candidate]:
        return self._per_client("recovery close", LedgerCluster.close_recovery)

    def _do_RecoveryReadTimedOut(self, cluster: LedgerCluster, names: Names) -> list[Candidate]:
        return self._per_client("recovery read timeout", LedgerCluster.timeout_recovery_read)

    def _do_RecoveryAborts(self, cluster: LedgerCluster, names: Names) -> list[Candidate]:
        return self._per_client("recovery timeouts (abort)", LedgerCluster.abort_recovery)

    def _do_RecovererCrashes(self, cluster: LedgerCluster, names: Names) -> list[Candidate]:
        return self._per_client("recovery client crashes", LedgerCluster.crash_recoverer)

    def _do_RecoveryChangesEnsemble(self, cluster: LedgerCluster, names: Names) -> list[Candidate]:
        out: list[Candidate] = []
        for c in self.recoverers:
            op = cluster.recoveries[c.name]
            timed_out = [m.bookie for m in cluster.timed_out if op is not None and m.core is op]
            out += [
                Candidate(
                    f"{c} write-back timeout on {b}, replacement {nb}",
                    {"client": c, "failed": names[b], "replacement": names[nb]},
                    partial(LedgerCluster.timeout_recovery_adds, name=c.name, bookie=b, replacement=nb),
                )
                for b, nb in self._replacements(names, timed_out)
            ]
        return out

    def _per_bookie(self, names: Names, label: str, run: Callable[[LedgerCluster, BookieId], None]) -> list[Candidate]:
        def bind(bookie: BookieId) -> Callable[[LedgerCluster], None]:
            return lambda cluster: run(cluster, bookie)

        return [Candidate(f"{label} {b}", {"bookie": names[b]}, bind(b)) for b in sorted(names)]

    def _do_BookieCrashes(self, cluster: LedgerCluster, names: Names) -> list[Candidate]:
        up = [b for b, node in cluster.bookies.items() if node.up]
        return [c for c in self._per_bookie(names, "crash", LedgerCluster.crash) if _impl(c, names) in up]

    def _do_BookieRestarts(self, cluster: LedgerCluster, names: Names) -> list[Candidate]:
        return self._per_bookie(names, "restart", LedgerCluster.restart)

    def _do_BookieFailsPermanently(self, cluster: LedgerCluster, names: Names) -> list[Candidate]:
        return self._per_bookie(names, "fail for good", LedgerCluster.fail_permanently)

    def _do_BookieSyncs(self, cluster: LedgerCluster, names: Names) -> list[Candidate]:
        return self._per_bookie(names, "journal sync", _sync_journal)

    # ---- the abstraction: implementation state -> ledger.tla's variables ----------------------
    def message(self, m: InFlight, names: Names) -> Record:
        req = m.request
        if isinstance(req, AddRequest):
            kind = "recoveryAdd" if req.recovery else "add"
            entry, val = req.entry_id, read_header(req.body)[2]  # the piggybacked LAC
        elif isinstance(req, ReadRequest) and req.entry_id == LAST_ENTRY:
            # The spec's read-LAC always fences: an unfenced one gets a kind the spec never has.
            kind, entry, val = ("readLac" if req.fence else "readLacWithoutFence"), NO_ENTRY, 0
        elif isinstance(req, ReadRequest):
            kind, entry, val = "read", req.entry_id, int(req.fence)
        else:
            raise TypeError(f"ledger.tla has no message for {type(req).__name__}")
        return Record.of(
            {"kind": kind, "client": ModelValue(m.client), "bookie": names[m.bookie], "entry": entry, "val": val}
        )

    def _fragments(self, metadata: LedgerMetadata | None, names: Names) -> tuple[Value, ...]:
        if metadata is None:
            return ()
        return tuple(
            Record.of({"first": f.first_entry_id, "ens": tuple(names[b] for b in f.ensemble)})
            for f in metadata.fragments
        )

    def _acks(self, acked: Mapping[int, frozenset[BookieId]], names: Names) -> Function:
        return Function.of({e: frozenset(names[b] for b in acked.get(e, frozenset())) for e in self.entries})

    def _lacs(self, sent: Mapping[int, int]) -> Function:
        """The LAC each pending add carries; NoEntry for the others (ledger.tla clears confirmed ones)."""
        return Function.of({e: sent.get(e, NO_ENTRY) for e in self.entries})

    def abstract(self, cluster: LedgerCluster, names: Names) -> dict[str, Value]:
        meta = cluster.metadata
        ledgers = {b: node.core.ledgers.get(LEDGER_ID) for b, node in cluster.bookies.items()}
        writer = cluster.writer
        writer_acks, writer_metadata = cluster.writer_view()
        writing = _writer_state(writer) == "WRITING"
        state: dict[str, Value] = {
            "meta": Record.of(
                {
                    "state": meta.state.value,
                    "lastEntry": meta.last_entry_id,
                    "length": length_units(meta.length),
                    "fragments": self._fragments(meta, names),
                }
            ),
            "entries": Function.of(
                {names[b]: frozenset(lg.entries) if lg else frozenset() for b, lg in ledgers.items()}
            ),
            "fenced": Function.of({names[b]: bool(lg and lg.fenced) for b, lg in ledgers.items()}),
            # the LAC in the header of each bookie's last entry (what its read-LAC answer carries)
            "bookieLac": Function.of({names[b]: cluster.last_entry_lac(b) for b in ledgers}),
            "durableState": Function.of({names[b]: _durable_state(node) for b, node in cluster.bookies.items()}),
            "up": Function.of({names[b]: node.up for b, node in cluster.bookies.items()}),
            "failed": frozenset(names[b] for b, node in cluster.bookies.items() if node.failed),
            "msgs": frozenset(self.message(m, names) for m in cluster.inflight),
            "wState": _writer_state(writer),
            "wPushed": writer.last_add_pushed,
            "wLac": writer.last_add_confirmed,
            # a stopped writer's acks and sent LACs are dead: ledger.tla resets them
            "wAcks": self._acks(writer_acks if writing else {}, names),
            "wSentLac": self._lacs(cluster.writer_sent_lacs() if writing else {}),
            "wFragments": self._fragments(writer_metadata, names),
            "lost": cluster.lost,
            "crashes": cluster.crashes,
        }
        per_client = {c: self._recovery(cluster, c.name, names) for c in self.recoverers}
        for var in _RECOVERY_VARS:
            state[var] = _function({c: values[var] for c, values in per_client.items()})
        return state

    def _recovery(self, cluster: LedgerCluster, name: str, names: Names) -> dict[str, Value]:
        """One recovery client's rPhase, rAnswered, ... from its current attempt (a RecoveryOp)."""
        op = cluster.recoveries[name]
        values: dict[str, Value] = {
            "rPhase": "idle",
            "rAnswered": frozenset(),
            "rMaxLac": NO_ENTRY,
            "rReadFragments": (),
            "rFragments": (),
            "rNext": 0,
            "rNegatives": frozenset(),
            "rTried": 0,
            "rWbAcks": self._acks({}, names),
            "rWbSentLac": self._lacs({}),
            "rWbLac": NO_ENTRY,
            "rEnd": NO_ENTRY,
            "rLength": 0,
        }
        if op is None:
            if name in cluster.crashed_clients:
                values["rPhase"] = "aborted"  # RecovererCrashes: the attempt's state is gone, as at an abort
            return values
        if op.phase is RecoveryPhase.FAILED:
            values["rPhase"] = "aborted"  # a failed attempt keeps nothing (RecoveryAborts resets it all)
            return values
        read_lac = op.read_lac
        if read_lac is None:  # no fencing: STARTING, or DONE because the ledger was already closed
            values["rPhase"] = "done" if op.phase is RecoveryPhase.DONE else op.phase.value
            if op.phase is RecoveryPhase.DONE:
                values["rEnd"] = op.metadata.last_entry_id
            return values
        ensemble = read_lac.ensemble
        values["rReadFragments"] = self._fragments(read_lac.metadata, names)
        # the length it will close with: the read-LAC's, then the last entry read (its write-back's header)
        values["rLength"] = length_units(op.writer._pushed_length if op.writer else read_lac.length)
        values["rFragments"] = self._fragments(op.writer.metadata if op.writer else read_lac.metadata, names)
        end_found = op._end_found or op.phase in (RecoveryPhase.CLOSING, RecoveryPhase.DONE)
        if op.phase is RecoveryPhase.FENCING:
            # (ledger.tla resets rAnswered and rMaxLac once fencing is covered: dead from then on)
            values["rAnswered"] = frozenset(names[ensemble[i]] for i, a in read_lac.answers.items() if a.is_known)
            values["rMaxLac"] = read_lac.lac
            values["rPhase"] = "fencing"
            return values
        values["rPhase"] = {RecoveryPhase.DONE: "done"}.get(op.phase, "closing" if end_found else "reading")
        values["rNext"] = op._next
        read_at = read_lac.metadata.ensemble_for(op._next)
        if not end_found:  # (ledger.tla resets rNegatives and rTried once the end is found: dead from then on)
            answers = op._window.get(op._next, {})
            values["rNegatives"] = frozenset(names[read_at[i]] for i, a in answers.items() if a.is_negative)
            values["rTried"] = op.reads_asked()
        if op.writer is not None:  # made when the read-LAC finished, with its LAC at the start point
            values["rWbAcks"] = self._acks(pending_acks(op.writer), names)
            values["rWbSentLac"] = self._lacs(pending_lacs(op.writer))
            values["rWbLac"] = op.writer.last_add_confirmed
        if op.phase is RecoveryPhase.DONE:
            values["rEnd"] = op.metadata.last_entry_id
        elif end_found:
            values["rEnd"] = op._next - 1
        return values


def length_units(length: int) -> int:
    """A ledger length in bytes as ledger.tla counts it: in entries (every payload has one size)."""
    units, rest = divmod(length, PAYLOAD_SIZE)
    if rest:
        raise HarnessError(f"ledger length {length} is not a whole number of {PAYLOAD_SIZE}-byte payloads")
    return units


_RECOVERY_VARS = (
    "rPhase",
    "rAnswered",
    "rMaxLac",
    "rReadFragments",
    "rFragments",
    "rNext",
    "rNegatives",
    "rTried",
    "rWbAcks",
    "rWbSentLac",
    "rWbLac",
    "rEnd",
    "rLength",
)


def _function(items: Mapping[Value, Value]) -> Value:
    """A TLA+ function; the empty one is the empty sequence (TLC prints `<<>>`)."""
    return Function.of(items) if items else ()


def _writer_state(writer: LedgerWriter) -> str:
    if writer.state is WriterState.FAILED:
        # ledger.tla's FENCED: EFENCED, or the metadata IN_RECOVERY at an ensemble change; FAILED: CLOSED.
        return "FENCED" if isinstance(writer._failure, LedgerFencedError) else "FAILED"
    return writer.state.name


def _sync_journal(cluster: LedgerCluster, bookie: BookieId) -> None:
    """ledger.tla's BookieSyncs: the bookie's unsynced journal appends become durable."""
    node = cluster.bookies[bookie]
    if not node.up or not node.unsynced:
        raise HarnessError(f"bookie {bookie} has no unsynced journal append to sync")
    if node.sync():
        raise HarnessError(f"bookie {bookie} held replies until its journal's sync, which the spec's bookie does not")


def _durable_state(node: SimBookie) -> Value:
    """ledger.tla's durableState of one bookie: {} if nothing is unsynced, else what its durable journal
    holds of the ledger (entries, and the LAC header of the last entry: the latest copy of it)."""
    if not node.unsynced:
        return frozenset()
    bodies = {r.entry_id: r.body for r in node.journal if r.kind is RecordKind.ENTRY and r.ledger_id == LEDGER_ID}
    lac = read_header(bodies[max(bodies)])[2] if bodies else NO_ENTRY
    return frozenset({Record.of({"entries": frozenset(bodies), "lac": lac})})


def _impl(candidate: Candidate, names: Names) -> BookieId:
    spec = candidate.params["bookie"]
    return next(i for i, s in names.items() if s == spec)


def _fate_label(label: str, failing: frozenset[BookieId]) -> str:
    return f"{label}; the connection attempts to {sorted(failing)} fail" if failing else label


def _show(msg: Record) -> str:
    return f"{msg['kind']}({msg['client']} -> {msg['bookie']}, entry {msg['entry']}, val {msg['val']})"


__all__ = ["SPEC", "LedgerMapping"]
