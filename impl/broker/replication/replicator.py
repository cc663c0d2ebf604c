"""Geo-replication's pure cores (spec/replication.tla): the replicator of one topic towards one remote
cluster, and the de-duplication decision of the topic it publishes to.

`Replicator` is the replicator <<origin, remote>> of the spec: a durable cursor on the origin's
managed ledger, named as Pulsar names it (`pulsar.repl.<remote>`), whose mark-delete position is
the spec's `cursor`; the entries it read and sent, each waiting for the remote's receipt (the
spec's `outstanding`); and the last entry it read (`readPos`). It is driven by typed events
through one function, `step(event) -> outputs`, and does no I/O: the shell (the broker) reads the
managed ledger, publishes through a producer connected to the remote cluster and persists the
cursor, as the outputs ask.

  Start                 the replicator (re)starts from its cursor -> ReadEntries
  EntriesRead(entries)  entries the shell read after the read position, in order: every entry
                        published locally -> PublishToRemote with its origin metadata kept
                        (producer name, sequence id, publish and event times, properties) and
                        `replicated_from` set to the origin cluster; an entry that arrived by
                        replication (`replicated_from` set) is skipped: never replicated again
  SendReceipt(pos)      the remote acknowledged the message sent for `pos`: the cursor moves past
                        every entry done (received or skipped) up to the first still waiting ->
                        PersistMarkDelete; a receipt for an entry not waiting (a connection
                        before a restart) is ignored
  ProducerDisconnected  the connection to the remote was lost, or a send failed: what was not
                        acknowledged is sent again, so the replicator rewinds to its cursor ->
                        ReadEntries (Pulsar's replicator rewinds its cursor when its producer is
                        created again, and when a send fails)

A restart (a broker crash, or an ownership change: another broker loads the topic) is a new
`Replicator` built from the persisted mark-delete position (`Replicator.restart`). Receipts are
the only thing that moves the cursor past a published entry: an entry is never acknowledged
before the remote has it (the spec's mutation AckBeforeReceipt shows the loss that follows).

`Deduplication` is the remote side's decision, per topic: a message whose sequence id is at or
below the highest persisted for its producer name is a duplicate (dropped, and acknowledged);
`is_duplicate` is the decision as a pure function. Replicated messages are de-duplicated on the
origin's producer name and sequence id, which the replicator keeps.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from impl.broker.ledger_list import Position

REPLICATOR_PREFIX = "pulsar.repl"  # Pulsar's replicatorPrefix: replicators' cursor and producer names
CURSOR_PREFIX = f"{REPLICATOR_PREFIX}."  # a replicator's cursor: pulsar.repl.<remote cluster>
MAX_WAITING = 1000  # entries sent and waiting for their receipt before the replicator stops reading


def cursor_name(remote_cluster: str) -> str:
    """The durable cursor of the replicator towards `remote_cluster`, as Pulsar names it."""
    return f"{CURSOR_PREFIX}{remote_cluster}"


def is_replicator_cursor(name: str) -> bool:
    return name.startswith(CURSOR_PREFIX)


class ReplicationError(Exception):
    """An input the replicator has no room for (entries out of order); the shell's bug, never the remote's."""


@dataclass(frozen=True)
class MessageMetadata:
    """What a message carries from its origin; `replicated_from` is "" for a message published locally."""

    producer_name: str
    sequence_id: int
    publish_time: int = 0  # milliseconds, as the origin's broker stamped it
    event_time: int = 0
    replicated_from: str = ""
    properties: tuple[tuple[str, str], ...] = ()

    @property
    def replicated(self) -> bool:
        return bool(self.replicated_from)


@dataclass(frozen=True)
class Entry:
    """An entry of the origin's managed ledger (one message)."""

    position: Position
    metadata: MessageMetadata
    payload: bytes = b""


# ---- inputs -----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Start:
    """The replicator starts reading from its cursor (after its creation or restart)."""


@dataclass(frozen=True)
class EntriesRead:
    """Entries the shell read from the managed ledger, after the read position, in order."""

    entries: tuple[Entry, ...]


@dataclass(frozen=True)
class SendReceipt:
    """The remote acknowledged (persisted, or dropped as a duplicate) the message sent for `position`."""

    position: Position


@dataclass(frozen=True)
class ProducerDisconnected:
    """The producer's connection to the remote was lost (the remote's broker crashed, the topic moved), or a send
    failed: the replicator rewinds to its cursor."""


Event = Start | EntriesRead | SendReceipt | ProducerDisconnected

# ---- outputs ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReadEntries:
    """Read up to `max_entries` entries of the managed ledger after `after`, and feed them back (EntriesRead)."""

    after: Position
    max_entries: int


@dataclass(frozen=True)
class PublishToRemote:
    """Publish to the remote cluster's topic; its receipt is fed back as SendReceipt(position)."""

    position: Position  # the origin's entry (the callback's context, not sent)
    metadata: MessageMetadata
    payload: bytes


@dataclass(frozen=True)
class PersistMarkDelete:
    """Persist the cursor's new mark-delete position (every entry up to it is done)."""

    cursor: str
    position: Position


Output = ReadEntries | PublishToRemote | PersistMarkDelete


@dataclass
class _Read:
    position: Position
    done: bool  # received by the remote, or skipped


@dataclass
class Replicator:
    """The replicator of the origin's topic towards `remote_cluster` (pure core)."""

    local_cluster: str
    remote_cluster: str
    mark_delete: Position  # the cursor: every entry up to it is done (the persisted position)
    max_waiting: int = MAX_WAITING
    last_read: Position = field(init=False)  # the read position: the last entry read
    _read: list[_Read] = field(init=False, default_factory=list)  # entries read after mark_delete, in order
    _reading: bool = field(init=False, default=False)  # a ReadEntries is outstanding

    def __post_init__(self) -> None:
        if self.local_cluster == self.remote_cluster:
            raise ValueError(f"a cluster does not replicate to itself ({self.local_cluster})")
        self.last_read = self.mark_delete

    @classmethod
    def restart(cls, local_cluster: str, remote_cluster: str, persisted: Position) -> Replicator:
        """A replicator that starts again from its persisted cursor (crash, or a new owner of the topic)."""
        return cls(local_cluster, remote_cluster, persisted)

    @property
    def cursor(self) -> str:
        return cursor_name(self.remote_cluster)

    @property
    def waiting(self) -> tuple[Position, ...]:
        """Entries sent to the remote and not acknowledged yet, in order."""
        return tuple(r.position for r in self._read if not r.done)

    def step(self, event: Event) -> list[Output]:
        if isinstance(event, Start):
            return self._read_more()
        if isinstance(event, EntriesRead):
            return self._entries_read(event.entries)
        if isinstance(event, SendReceipt):
            return self._receipt(event.position)
        if isinstance(event, ProducerDisconnected):
            return self._rewind()
        raise TypeError(f"not a replicator event: {event!r}")

    # ---- the events ---------------------------------------------------------------------------

    def _entries_read(self, entries: Iterable[Entry]) -> list[Output]:
        self._reading = False
        out: list[Output] = []
        for entry in entries:
            if entry.position <= self.last_read:
                raise ReplicationError(
                    f"replicator {self.cursor}: entry {entry.position} read after {self.last_read} (out of order)"
                )
            self.last_read = entry.position
            if entry.metadata.replicated:
                # It arrived by replication: never replicated again (no loop), done at once.
                self._read.append(_Read(entry.position, done=True))
                continue
            self._read.append(_Read(entry.position, done=False))
            metadata = dataclasses.replace(entry.metadata, replicated_from=self.local_cluster)
            out.append(PublishToRemote(entry.position, metadata, entry.payload))
        return out + self._advance() + self._read_more()

    def _receipt(self, position: Position) -> list[Output]:
        for read in self._read:
            if read.position == position and not read.done:
                read.done = True
                return self._advance() + self._read_more()
        return []  # not waiting: the receipt of a message sent before a rewind or restart

    def _rewind(self) -> list[Output]:
        self._read.clear()
        self.last_read = self.mark_delete
        self._reading = False
        return self._read_more()

    # ---- the cursor ---------------------------------------------------------------------------

    def _advance(self) -> list[Output]:
        """Move the mark-delete position past the entries done, up to the first still waiting."""
        moved = False
        while self._read and self._read[0].done:
            self.mark_delete = self._read.pop(0).position
            moved = True
        return [PersistMarkDelete(self.cursor, self.mark_delete)] if moved else []

    def _read_more(self) -> list[Output]:
        if self._reading or len(self.waiting) >= self.max_waiting:
            return []
        self._reading = True
        return [ReadEntries(self.last_read, self.max_waiting - len(self.waiting))]


# ---- the remote side: de-duplication -------------------------------------------------------------


def is_duplicate(highest: Mapping[str, int], producer_name: str, sequence_id: int) -> bool:
    """A message is a duplicate when its sequence id is at or below the highest persisted for its producer."""
    return sequence_id <= highest.get(producer_name, -1)


@dataclass(frozen=True)
class Persist:
    """Persist the message (and acknowledge it)."""

    metadata: MessageMetadata


@dataclass(frozen=True)
class Duplicate:
    """Drop the message as a duplicate, and acknowledge it (Pulsar answers with message id -1:-1)."""

    metadata: MessageMetadata
    highest: int  # the producer's highest sequence id persisted


Decision = Persist | Duplicate


@dataclass
class Deduplication:
    """A topic's de-duplication state: the highest sequence id persisted per producer name (pure core).

    The state is kept whether or not de-duplication is enabled (so enabling it starts from the log);
    only an enabled topic drops duplicates.
    """

    enabled: bool
    highest: dict[str, int] = field(default_factory=dict)

    @classmethod
    def recover(cls, enabled: bool, log: Iterable[MessageMetadata]) -> Deduplication:
        """The state after a restart, rebuilt from the messages the topic persisted."""
        dedup = cls(enabled)
        for metadata in log:
            dedup._persisted(metadata)
        return dedup

    def step(self, metadata: MessageMetadata) -> Decision:
        """A message to publish (local or replicated): persist it or drop it as a duplicate."""
        if self.enabled and is_duplicate(self.highest, metadata.producer_name, metadata.sequence_id):
            return Duplicate(metadata, self.highest[metadata.producer_name])
        self._persisted(metadata)
        return Persist(metadata)

    def _persisted(self, metadata: MessageMetadata) -> None:
        if metadata.sequence_id > self.highest.get(metadata.producer_name, -1):
            self.highest[metadata.producer_name] = metadata.sequence_id
