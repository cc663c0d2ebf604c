"""Topic compaction, the shell (Pulsar's TwoPhaseCompactor and CompactedTopicImpl; docs/storage-lifecycle.md).

The decisions are the pure core's (impl/broker/storage_lifecycle.py, `StorageLifecycle`, checked against
spec/storage.tla): one compaction at a time, the last value per key, the swap of the compacted ledger and
what to delete on each outcome. `TopicCompactor` performs its outputs for one topic:

  ReadForCompaction       the previous compacted ledger's entries and the topic's entries after its
                          horizon up to the new one, each message keyed (an empty payload: a tombstone)
  WriteCompactedLedger    a new BookKeeper ledger: per kept entry its topic position and the entry as
                          stored (a batch rebuilt with only the messages kept), then closed
  WriteCompactionCursor   the `__compaction` cursor's mark-delete moves to the horizon with the property
                          `CompactedTopicLedger` = the new ledger (one write, as Pulsar's markDelete)
  DeleteCompactedLedger   the previous compacted ledger, once the cursor names the new one

The cursor being a durable cursor of the topic, it holds back trimming until entries are compacted, and a
broker that loads the topic finds the compacted ledger again from the cursor's properties (`load`).
Readers and consumers with readCompacted read `CompactedView` up to the horizon, then the topic after it
(service.Subscription). Messages without a key are left out of the compacted ledger.
"""

from __future__ import annotations

import bisect
import enum
import logging
import struct
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

from impl.bookie.client.errors import LedgerFencedError
from impl.broker import storage_lifecycle as sl
from impl.broker.errors import BrokerError
from impl.broker.ledger_list import Position
from impl.broker.managed_ledger_errors import ManagedLedgerFencedError
from impl.protocol import entry_codec
from impl.protocol import pulsar_api_pb2 as api

if TYPE_CHECKING:
    from impl.broker.managed_ledger import ManagedLedger

log = logging.getLogger(__name__)

COMPACTION_CURSOR = "__compaction"  # Pulsar's Compactor.COMPACTION_SUBSCRIPTION
COMPACTED_LEDGER_PROPERTY = "CompactedTopicLedger"  # Pulsar's Compactor.COMPACTED_TOPIC_LEDGER_PROPERTY
READ_CHUNK = 500  # topic entries read per managed-ledger read while compacting
_HEADER = struct.Struct(">qq")  # a compacted entry: the topic position it came from, then the entry


class CompactionStatus(enum.Enum):
    """Pulsar's LongRunningProcessStatus."""

    NOT_RUN = "NOT_RUN"
    RUNNING = "RUNNING"
    SUCCESS = "SUCCESS"
    ERROR = "ERROR"


class CompactionRunning(BrokerError):
    """A compaction of the topic is already running (the admin API answers 409, as Pulsar)."""


def encode_compacted(position: Position, data: bytes) -> bytes:
    return _HEADER.pack(position.ledger_id, position.entry_id) + data


def decode_compacted(raw: bytes) -> tuple[Position, bytes]:
    if len(raw) < _HEADER.size:
        raise ValueError(f"a compacted entry of {len(raw)} bytes has no position header")
    ledger_id, entry_id = _HEADER.unpack_from(raw)
    return Position(ledger_id, entry_id), raw[_HEADER.size :]


@dataclass(frozen=True)
class CompactedView:
    """What readCompacted readers read up to `horizon`: the compacted ledger's entries, by topic position."""

    horizon: Position
    ledger_id: int
    entries: tuple[tuple[Position, bytes], ...]

    def after(self, position: Position | None, max_entries: int) -> list[tuple[Position, bytes]]:
        """Up to `max_entries` entries after `position` (None: from the first)."""
        start = 0
        if position is not None:
            start = bisect.bisect_right([p for p, _ in self.entries], position)
        return list(self.entries[start : start + max_entries])


def keyed(position: Position, data: bytes) -> list[sl.KeyedEntry]:
    """The keyed messages of one stored entry, in order; messages without a key are not compacted."""
    entry = entry_codec.parse(data, verify_checksum=False)
    out = []
    for m in entry_codec.singles(entry):
        if m.key:
            out.append(sl.KeyedEntry(position, m.key, m.payload if m.payload else None))
    return out


def rebuild(data: bytes, kept: set[str]) -> bytes:
    """The entry as compaction keeps it: a batch keeps, per kept key, its last message in the entry, and
    only those (as Pulsar's RawBatchConverter did before `compacted_out`, which the official client 3.13
    does not skip: it delivers such messages empty)."""
    entry = entry_codec.parse(data, verify_checksum=False)
    if not entry.is_batch:
        return data
    messages = entry_codec.singles(entry)
    last = {m.key: i for i, m in enumerate(messages) if m.key in kept}
    chosen = [m for i, m in enumerate(messages) if last.get(m.key) == i]
    if len(chosen) == len(messages):
        return data
    payload = entry_codec.batch_payload(chosen, entry.metadata.sequence_id)
    metadata = api.MessageMetadata()
    metadata.CopyFrom(entry.metadata)
    metadata.num_messages_in_batch = len(chosen)
    metadata.ClearField("compression")  # NONE: the kept messages are written uncompressed
    metadata.uncompressed_size = len(payload)
    return entry_codec.build(metadata, payload)


class TopicCompactor:
    """One topic's compaction on its owner: the core's shell (see the module docstring)."""

    def __init__(self, name: str, ml: ManagedLedger) -> None:
        self.name = name
        self.ml = ml
        self.core = sl.StorageLifecycle(name)
        self.status = CompactionStatus.NOT_RUN
        self.last_error = ""
        self.view: CompactedView | None = None
        self._lock = threading.Lock()
        self._version = 0  # the compaction cursor's writes this broker made (the core's version)
        self._sources: dict[Position, bytes] = {}  # the run's entries as read, by position
        self._written: tuple[tuple[Position, bytes], ...] = ()  # the compacted ledger being written
        self._error = ""
        self.threshold = 0  # the namespace's compactionThreshold in bytes (0: only on demand)

    # ---- load: the compacted ledger named by the cursor ----------------------------------------

    def load(self) -> None:
        """Find the compacted ledger from the `__compaction` cursor's properties (after a takeover or a
        restart) and give the core its view."""
        horizon: Position | None = None
        ledger_id: int | None = None
        cursor = self.ml.cursors().get(COMPACTION_CURSOR)
        if cursor is not None:
            value = cursor.mark_delete_properties.get(COMPACTED_LEDGER_PROPERTY)
            if value is not None:
                ledger_id, horizon = int(value), cursor.mark_delete_position
        if ledger_id is not None and horizon is not None:
            try:
                self.view = CompactedView(horizon, ledger_id, self._read_ledger(ledger_id))
            except Exception as e:  # readCompacted readers then read the whole topic
                log.error("%s: cannot read compacted ledger %d: %s", self.name, ledger_id, e)
                self.view = None
        self.core.step(sl.Load((), 0, sl.CompactionCursor(self._version, horizon, ledger_id)))

    def delete_compacted_ledger(self) -> None:
        """The topic is deleted: its compacted ledger goes too (a failure leaks it, logged)."""
        view, self.view = self.view, None
        if view is not None:
            try:
                self.ml.bookkeeper.delete_ledger(view.ledger_id)
            except Exception as e:
                log.warning("%s: deleting compacted ledger %d: %s", self.name, view.ledger_id, e)

    def _read_ledger(self, ledger_id: int) -> tuple[tuple[Position, bytes], ...]:
        handle = self.ml.bookkeeper.open_ledger(ledger_id, self.ml.config.password, recovery=False)
        last = handle.last_add_confirmed
        raw = handle.read(0, last) if last >= 0 else []
        return tuple(decode_compacted(e.payload) for e in raw)

    def last_entry(
        self, topic_last: tuple[Position, entry_codec.Entry] | None
    ) -> tuple[Position, entry_codec.Entry] | None:
        """The last entry a readCompacted reader can read, given the topic's: the compacted view's last
        when nothing follows the horizon (its last key may have been deleted, or its batch rebuilt);
        else the topic's. GetLastMessageId answers with it, so that hasMessageAvailable ends."""
        view = self.view
        if view is None or topic_last is None or topic_last[0] > view.horizon:
            return topic_last
        if not view.entries:
            return None
        position, data = view.entries[-1]
        return position, entry_codec.parse(data, verify_checksum=False)

    # ---- requests -----------------------------------------------------------------------------

    def status_json(self) -> dict[str, str]:
        """Pulsar's LongRunningProcessStatus."""
        with self._lock:
            return {"status": self.status.value, "lastError": self.last_error}

    def trigger(self) -> None:
        """Start a compaction up to the topic's last entry, in the background; CompactionRunning if one runs."""
        self.ml.check_usable()
        with self._lock:
            if self.status is CompactionStatus.RUNNING:
                raise CompactionRunning(f"Compaction already in progress on {self.name}")
            self.status, self.last_error = CompactionStatus.RUNNING, ""
        threading.Thread(target=self.run, name=f"compact-{self.name}", daemon=True).start()

    def backlog_bytes(self) -> int:
        """Bytes after the compaction horizon (the whole topic before the first run): entries times the
        topic's mean entry size, as the backlog quota estimates."""
        view, horizon = self.ml.view(), self.core.compaction.horizon
        last = view.last_confirmed()
        if last is None:
            return 0
        stats = self.ml.stats()
        if horizon is None:
            return int(stats["size"])
        mean = stats["size"] / stats["entries"] if stats["entries"] else 0.0
        return int(view.count_between(horizon, last) * mean)

    def maybe_compact(self) -> bool:
        """The periodic check (Pulsar's compaction monitor): start a compaction when more than the
        threshold's bytes follow the horizon. Returns whether one started."""
        if self.threshold <= 0 or self.backlog_bytes() <= self.threshold:
            return False
        try:
            self.trigger()
        except CompactionRunning:
            return False
        return True

    def run(self) -> None:
        """One compaction (the caller set RUNNING): its outcome goes to the status."""
        self._error = ""
        try:
            if self.core.state is not sl.LifecycleState.LOADED:
                self.load()  # a failed swap fenced the core: read the cursor again
            last = self.ml.last_confirmed()
            done = self.core.compaction.horizon
            if last is not None and (done is None or last > done):
                self._drive(sl.CompactRequested(last))
            if self.core.op is not None and not self._error:
                self._error = f"the compaction stopped in stage {self.core.op.stage.value}"
        except Exception as e:
            log.exception("compaction of %s failed", self.name)
            self._error = f"{type(e).__name__}: {e}"
        finally:
            self._sources, self._written = {}, ()
        with self._lock:
            self.status = CompactionStatus.ERROR if self._error else CompactionStatus.SUCCESS
            self.last_error = self._error
        if self._error:
            log.warning("compaction of %s: %s", self.name, self._error)
        elif self.view is not None:
            log.info(
                "compacted %s up to %s: ledger %d, %d entries",
                self.name,
                self.view.horizon,
                self.view.ledger_id,
                len(self.view.entries),
            )

    # ---- the loop: step the core, perform its outputs, feed back the answers -------------------------

    def _drive(self, event: sl.Event) -> None:
        sl.run(self.core, event, self._perform)

    def _perform(self, out: sl.Output) -> sl.Event | None:
        if isinstance(out, sl.ReadForCompaction):
            return self._read_for_compaction(out)
        if isinstance(out, sl.WriteCompactedLedger):
            return self._write_ledger(out)
        if isinstance(out, sl.WriteCompactionCursor):
            return self._write_cursor(out)
        if isinstance(out, sl.DeleteCompactedLedger):
            try:
                self.ml.bookkeeper.delete_ledger(out.ledger_id)
            except Exception as e:  # a leak, never a loss: the cursor names another ledger
                log.warning("%s: deleting compacted ledger %d: %s", self.name, out.ledger_id, e)
            return None
        if isinstance(out, sl.Fenced):
            self._error = out.reason
            return None
        raise TypeError(f"compaction does not perform {out!r}")

    def _read_for_compaction(self, out: sl.ReadForCompaction) -> sl.Event:
        try:
            entries: list[sl.KeyedEntry] = []
            if out.previous is not None:
                view = self.view
                previous = view.entries if view is not None and view.ledger_id == out.previous else None
                for position, data in previous if previous is not None else self._read_ledger(out.previous):
                    self._sources[position] = data
                    entries += keyed(position, data)
            start = self.ml.first_position() if out.after is None else self.ml.next_position(out.after)
            while start is not None and start <= out.upto:
                batch = self.ml.read(start, READ_CHUNK)
                if not batch:
                    break
                for position, data in batch:
                    if position > out.upto:
                        break
                    try:
                        found = keyed(position, data)
                    except entry_codec.CorruptEntry as e:  # not compactable: left out, as keyless messages
                        log.error("%s: compaction skips %s: %s", self.name, position, e)
                        continue
                    if found:
                        self._sources[position] = data
                        entries += found
                start = self.ml.next_position(batch[-1][0])
            return sl.CompactionRead(tuple(entries))
        except Exception as e:
            self._error = f"reading for compaction: {type(e).__name__}: {e}"
            return sl.CompactionReadFailed(self._error)

    def _write_ledger(self, out: sl.WriteCompactedLedger) -> sl.Event:
        kept: dict[Position, set[str]] = {}
        for e in out.entries:
            kept.setdefault(e.position, set()).add(e.key)
        written = tuple((p, rebuild(self._sources[p], keys)) for p, keys in sorted(kept.items()))
        c = self.ml.config
        handle = None
        try:
            handle = self.ml.bookkeeper.create_ledger(
                c.ensemble,
                c.write_quorum,
                c.ack_quorum,
                digest=c.digest,
                password=c.password,
                custom_metadata={"application": b"pulsar", "pulsar/compactedLedger": self.name.encode()},
            )
            for position, data in written:
                handle.add(encode_compacted(position, data))
            handle.close()
        except Exception as e:
            self._error = f"writing the compacted ledger: {type(e).__name__}: {e}"
            if handle is not None:
                try:
                    self.ml.bookkeeper.delete_ledger(handle.ledger_id)
                except Exception as gone:
                    log.warning("%s: deleting unfinished compacted ledger: %s", self.name, gone)
            return sl.CompactedLedgerWriteFailed(self._error)
        self._written = written
        return sl.CompactedLedgerWritten(handle.ledger_id)

    def _write_cursor(self, out: sl.WriteCompactionCursor) -> sl.Event:
        try:
            cursor = self.ml.cursors().get(COMPACTION_CURSOR) or self.ml.open_cursor(COMPACTION_CURSOR, "earliest")
            cursor.mark_delete(out.horizon, {COMPACTED_LEDGER_PROPERTY: str(out.ledger_id)})
            cursor.persist()
        except (ManagedLedgerFencedError, LedgerFencedError):
            return sl.BadVersion()  # another broker took the topic over: this write did not apply
        except Exception as e:
            return sl.WriteUnknown(f"{type(e).__name__}: {e}")
        self.view = CompactedView(out.horizon, out.ledger_id, self._written)
        self._version = out.expected_version + 1
        return sl.CursorWritten(self._version)
