"""The shell of a `Replicator` core (replicator.py): one topic of this cluster towards one remote.

It does what the core's outputs ask: reads the managed ledger after the read position through the
durable cursor `pulsar.repl.<remote>`, publishes through a `RemoteProducer` (remote.py) attached to
the same topic in the remote cluster, and persists the cursor's mark-delete position, which moves
only past entries the remote acknowledged. Its inputs, from other threads (the managed ledger's
new entries, the remote's receipts and losses, timers), are queued and fed to the core by one
drain on the broker's executor at a time, so the core is stepped by one thread.

What a fault does:
- the remote is down or refuses the producer: publishing stops, and after a backoff the core
  rewinds to its cursor and sends from there again (at-least-once; the remote's de-duplication
  drops what it already has, which makes it exactly-once);
- the remote closes the producer or the connection goes: the same rewind, at once;
- this broker crashes or the topic moves: the next owner's replicator starts from the persisted
  cursor (`Replicator.restart`);
- the managed ledger cannot be read (bookies unavailable): the read is retried after a pause.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Hashable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any

from impl.broker.ledger_list import Position
from impl.broker.managed_ledger import ManagedCursor, ManagedLedger
from impl.broker.replication import replicator as rc
from impl.broker.replication.remote import RemoteProducer
from impl.broker.topic_stats import Rate
from impl.client.api import Client
from impl.client.errors import ClientError
from impl.protocol import entry_codec

log = logging.getLogger(__name__)

BEFORE_FIRST = Position(-1, -1)  # the core's cursor before any entry (ledger ids start at 0)
READ_CHUNK = 100  # entries per managed-ledger read: a bound on the work between two receipts
READ_RETRY_S = 0.5
BACKOFF_FIRST_S = 0.1
BACKOFF_MAX_S = 2.0
# An entry that is not a Pulsar message is skipped, as a subscription skips it: the core skips what
# carries `replicated_from`, so it is given this.
UNREADABLE = rc.MessageMetadata("", 0, replicated_from="(unreadable entry)")


@dataclass(frozen=True)
class _NewEntries:
    """The managed ledger confirmed entries: a read that found nothing is done again."""


@dataclass(frozen=True)
class _ReadAgain:
    """A read failed a while ago: try it again."""


@dataclass(frozen=True)
class _Lost:
    """The producer was lost: rewind (the core's ProducerDisconnected), once per producer."""

    producer: RemoteProducer | None  # None: attaching failed


_Input = rc.Event | _NewEntries | _ReadAgain | _Lost


def metadata_of(meta: Any) -> rc.MessageMetadata:
    """The core's view of an entry's MessageMetadata (what replication keeps and decides on)."""
    return rc.MessageMetadata(
        producer_name=meta.producer_name,
        sequence_id=meta.sequence_id,
        publish_time=meta.publish_time,
        event_time=meta.event_time,
        replicated_from=meta.replicated_from,
        properties=tuple((p.key, p.value) for p in meta.properties),
    )


class TopicReplicator:
    """The replicator of topic `topic` (this cluster, `local`) towards cluster `remote`."""

    def __init__(
        self,
        topic: str,
        ml: ManagedLedger,
        local: str,
        remote: str,
        client: Callable[[], Client],  # the remote cluster's client; ClientError when it has none
        executor: Executor,
    ) -> None:
        self.topic = topic
        self.ml = ml
        self.local = local
        self.remote = remote
        self._client = client
        self._executor = executor
        self._lock = threading.Lock()
        self._inbox: collections.deque[_Input] = collections.deque()
        self._draining = False
        self._stopped = False
        self._producer: RemoteProducer | None = None
        self._broken = False  # attaching failed: nothing is read or sent until the rewind
        self._backoff_s = BACKOFF_FIRST_S
        self._idle_read: rc.ReadEntries | None = None  # a read that found nothing, done again on new entries
        self._confirmed_since_read = False  # with _idle_read: no wake-up is lost between a read and new entries
        self._sent: dict[Position, tuple[int, int]] = {}  # waiting entries -> (messages, bytes), for the stats
        self._timers: set[threading.Timer] = set()
        self.outbound = Rate()
        self.last_error = ""
        self.cursor: ManagedCursor = ml.open_cursor(rc.cursor_name(remote), initial="latest")
        persisted = self.cursor.mark_delete_position
        self.core = rc.Replicator.restart(local, remote, BEFORE_FIRST if persisted is None else persisted)

    # ---- inputs, from any thread ------------------------------------------------------------

    def start(self) -> None:
        self._post(rc.Start())

    def new_entries(self) -> None:
        self._confirmed_since_read = True
        if self._idle_read is not None:
            self._post(_NewEntries())

    def stop(self) -> None:
        """Stop replicating (unload, lost ownership, the cluster left the namespace's replication)."""
        with self._lock:
            self._stopped = True
            producer, self._producer = self._producer, None
            timers, self._timers = self._timers, set()
        for timer in timers:
            timer.cancel()
        if producer is not None:
            producer.close()

    def delete(self) -> None:
        """Stop, and delete the cursor: the remote is no longer among the namespace's clusters."""
        self.stop()
        self.ml.delete_cursor(self.cursor.name)

    def _post(self, event: _Input) -> None:
        with self._lock:
            if self._stopped:
                return
            self._inbox.append(event)
            if self._draining:
                return
            self._draining = True
        try:
            self._executor.submit(self._drain)
        except RuntimeError:  # the broker is closing
            with self._lock:
                self._draining = False

    def _later(self, delay_s: float, event: _Input) -> None:
        def fire() -> None:
            with self._lock:
                self._timers.discard(timer)
            self._post(event)

        timer = threading.Timer(delay_s, fire)
        timer.daemon = True
        with self._lock:
            if self._stopped:
                return
            self._timers.add(timer)
        timer.start()

    # ---- the drain: one thread steps the core and performs its outputs ------------------------

    def _drain(self) -> None:
        while True:
            with self._lock:
                if self._stopped or not self._inbox:
                    self._draining = False
                    return
                event = self._inbox.popleft()
            try:
                self._handle(event)
            except Exception:
                log.exception("replicator %s of %s", self.core.cursor, self.topic)

    def _handle(self, event: _Input) -> None:
        if isinstance(event, _NewEntries | _ReadAgain):
            read, self._idle_read = self._idle_read, None
            if read is not None:
                self._perform([read])
            return
        if isinstance(event, _Lost):
            if event.producer is not None and event.producer is not self._producer:
                return  # an earlier producer's loss: its rewind happened
            if event.producer is not None:
                event.producer.close()  # the remote forgets it (after a refused send it would keep it)
            self._producer, self._broken, self._idle_read = None, False, None
            self._sent.clear()
            self._perform(self.core.step(rc.ProducerDisconnected()))
            return
        if isinstance(event, rc.SendReceipt):
            sent = self._sent.pop(event.position, None)
            if sent is not None:
                self.outbound.add(*sent)
        self._perform(self.core.step(event))

    def _perform(self, outputs: list[rc.Output]) -> None:
        work = collections.deque(outputs)
        while work:
            out = work.popleft()
            if isinstance(out, rc.ReadEntries):
                work.extend(self._read(out))
            elif isinstance(out, rc.PublishToRemote):
                self._publish(out)
            else:
                self._persist(out)

    def _read(self, out: rc.ReadEntries) -> list[rc.Output]:
        if self._broken:
            return []  # the rewind reads again
        self._confirmed_since_read = False
        try:
            start = self.ml.first_position() if out.after == BEFORE_FIRST else self.ml.next_position(out.after)
            batch = [] if start is None else self.ml.read(start, min(out.max_entries, READ_CHUNK))
        except Exception as e:  # bookies unavailable, the topic fenced: the owner deals with the latter
            self.last_error = f"reading: {e}"
            log.warning("replicator %s of %s: reading: %s; retrying", self.core.cursor, self.topic, e)
            self._idle_read = out
            self._later(READ_RETRY_S, _ReadAgain())
            return []
        entries = []
        for position, data in batch:
            try:
                parsed = entry_codec.parse(data, verify_checksum=False)
            except entry_codec.CorruptEntry as e:
                log.error("replicator %s of %s: skipping %s: %s", self.core.cursor, self.topic, position, e)
                parsed = None
            if parsed is None:
                entries.append(rc.Entry(position, UNREADABLE))
                continue
            # The core's payload is the entry whole, as stored: _publish sends it on with one field changed.
            entries.append(rc.Entry(position, metadata_of(parsed.metadata), data))
        if not entries:
            self._idle_read = out
            if self._confirmed_since_read:  # entries came while this read found none: read again
                self._idle_read = None
                return [out]
            return []
        return self.core.step(rc.EntriesRead(tuple(entries)))

    def _publish(self, out: rc.PublishToRemote) -> None:
        if self._broken:
            return
        producer = self._producer or self._attach()
        if producer is None:
            return
        stored = entry_codec.parse(out.payload, verify_checksum=False)
        meta = api_copy(stored.metadata)
        meta.replicated_from = out.metadata.replicated_from
        entry = entry_codec.build(meta, stored.payload)
        self._sent[out.position] = (stored.num_messages, len(stored.payload))
        producer.send(entry, stored.num_messages, out.position)

    def _attach(self) -> RemoteProducer | None:
        name = f"{rc.REPLICATOR_PREFIX}.{self.local}"
        try:
            producer = RemoteProducer(self._client(), self.topic, name, self._received, self._lost)
        except ClientError as e:
            producer = None
            self.last_error = f"attaching to {self.remote}: {e}"
        if producer is None or producer.finished:
            self._broken = True
            log.warning(
                "replicator %s of %s: %s; retrying in %.1f s",
                self.core.cursor,
                self.topic,
                self.last_error,
                self._backoff_s,
            )
            self._later(self._backoff_s, _Lost(None))
            self._backoff_s = min(BACKOFF_MAX_S, self._backoff_s * 2)
            return None
        self._backoff_s = BACKOFF_FIRST_S
        self._producer = producer
        log.info("replicator %s of %s attached to %s", self.core.cursor, self.topic, producer.url)
        return producer

    def _received(self, token: Hashable) -> None:
        assert isinstance(token, Position)
        self._post(rc.SendReceipt(token))

    def _lost(self, producer: RemoteProducer, reason: str) -> None:
        self.last_error = reason
        log.info("replicator %s of %s: %s; rewinding", self.core.cursor, self.topic, reason)
        self._post(_Lost(producer))

    def _persist(self, out: rc.PersistMarkDelete) -> None:
        try:
            self.cursor.mark_delete(out.position)
        except Exception as e:  # fenced or closing: the topic's owner closes it and a new one resumes
            self.last_error = f"persisting the cursor: {e}"
            log.warning("replicator %s of %s: persisting %s: %s", self.core.cursor, self.topic, out.position, e)

    # ---- stats --------------------------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        """Pulsar's ReplicatorStats for this remote."""
        self.outbound.roll(time.monotonic())
        producer = self._producer
        waiting = self.core.waiting
        delay_s = 0.0
        if waiting:
            first = self.ml.read(waiting[0], 1)
            if first:
                published = entry_codec.parse(first[0][1], verify_checksum=False).metadata.publish_time
                delay_s = max(0.0, time.time() - published / 1000)
        return {
            "msgRateOut": self.outbound.message_rate,
            "msgThroughputOut": self.outbound.byte_rate,
            "msgOutCounter": self.outbound.messages,
            "bytesOutCounter": self.outbound.bytes,
            "replicationBacklog": self.cursor.backlog(),
            "connected": producer is not None and not producer.finished,
            "replicationDelayInSeconds": delay_s,
            "outboundConnection": producer.url if producer is not None else "",
            "cursor": self.core.cursor,
            "markDeletePosition": str(self.core.mark_delete),
            "lastError": self.last_error,
        }


def api_copy(meta: Any) -> Any:
    copy = type(meta)()
    copy.CopyFrom(meta)
    return copy
