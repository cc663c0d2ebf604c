"""The replicator's producer on the remote cluster, over Pulsar's binary protocol.

A replicator publishes to the same topic in the remote cluster under the producer name
`pulsar.repl.<local cluster>`. Its SENDs carry whole entries as the origin stored them (a batch
stays one batch), with the origin's metadata kept and `replicated_from` set: the remote broker
recognises the name's prefix and de-duplicates on the origin's producer name and sequence ids from
the metadata, as Pulsar's does. The SEND's own sequence id is only this producer's counter, so that
receipts can be matched although the entries of several origin producers interleave.

Outcomes go back to the replicator as callbacks, never as retries here: a receipt (the remote
persisted the entry, or dropped it as a duplicate of one it has) is `on_receipt(token)`; a refused
send, the broker closing the producer or a lost connection is `on_lost(reason)`, once, after which
this producer is finished and the replicator rewinds (and attaches a new one).
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Hashable

from impl.client import connection as core
from impl.client.api import Client
from impl.client.errors import ClientError, ConnectionLost
from impl.client.transport import BrokerConnection
from impl.protocol import pulsar_api_pb2 as api

T = api.BaseCommand


class RemoteProducer:
    """One attachment of a replicator's producer to the remote topic; finished at its first loss."""

    def __init__(
        self,
        client: Client,
        topic: str,
        name: str,
        on_receipt: Callable[[Hashable], None],
        on_lost: Callable[[RemoteProducer, str], None],
    ) -> None:
        """Attach (lookup, PRODUCER); ClientError when the remote cannot take the producer now."""
        self.topic = topic
        self._on_receipt = on_receipt
        self._on_lost = on_lost
        self._lock = threading.Lock()
        self._id = client.next_id()
        self._next_sequence = 0
        self._pending: dict[int, Hashable] = {}  # the SEND's sequence id -> the replicator's token
        self.finished = False
        conn = client.connection(client.lookup(topic))
        request = api.CommandProducer(
            topic=topic, producer_id=self._id, producer_name=name, user_provided_producer_name=True
        )
        self.name = conn.call(T.PRODUCER, request).producer_success.producer_name
        self._conn: BrokerConnection = conn
        conn.attach("producer", self._id, self)
        if not conn.open:  # lost while attaching: on_detached may have come before attach
            self._lose("the connection closed while the producer attached")

    @property
    def url(self) -> str:
        return self._conn.url

    def send(self, entry: bytes, num_messages: int, token: Hashable) -> None:
        """Send one entry; its outcome comes back through the callbacks."""
        with self._lock:
            if self.finished:
                return  # the loss was reported: the replicator rewinds and sends it again
            sequence_id = self._next_sequence
            self._next_sequence += 1
            self._pending[sequence_id] = token
        send = api.CommandSend(producer_id=self._id, sequence_id=sequence_id, highest_sequence_id=sequence_id)
        if num_messages > 1:
            send.num_messages = num_messages
        try:
            self._conn.write(core.command(T.SEND, "send", send, entry))
        except ConnectionLost as e:
            self._lose(str(e))

    # ---- the remote broker's answers (on the connection's thread) ---------------------------

    def on_event(self, event: core.Output) -> None:
        if isinstance(event, core.Receipt):
            with self._lock:
                token = self._pending.pop(event.sequence_id, None)
            if token is not None:
                self._on_receipt(token)  # a duplicate (-1:-1) too: the remote has the entry
        elif isinstance(event, core.SendFailed):
            self._lose(f"the remote refused a send: {event.message} ({api.ServerError.Name(event.error)})")

    def on_detached(self) -> None:
        self._lose("the remote closed the producer, or the connection was lost")

    def _lose(self, reason: str) -> None:
        with self._lock:
            if self.finished:
                return
            self.finished = True
            self._pending.clear()
        self._on_lost(self, reason)

    def close(self) -> None:
        """Detach without waiting for what is pending (the replicator's cursor has not passed it)."""
        with self._lock:
            self.finished = True
            self._pending.clear()
        self._conn.detach("producer", self._id)
        if self._conn.open:
            with contextlib.suppress(ClientError):
                self._conn.call(T.CLOSE_PRODUCER, api.CommandCloseProducer(producer_id=self._id), timeout_s=2.0)
