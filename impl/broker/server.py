"""The broker's gRPC API (broker.proto): a thin mapping onto BrokerService and the admin.

Every handler answers with a `Code`; broker errors keep their code and sentence, so a client
can tell "rejected, nothing written" from "outcome unknown" (impl/broker/errors.py).
"""

from __future__ import annotations

import json
import logging
import queue
import threading
import time
from collections.abc import Callable, Iterator
from concurrent import futures
from typing import Any, TypeVar

import grpc

from impl.broker import broker_pb2 as pb
from impl.broker import broker_pb2_grpc as pb_grpc
from impl.broker.admin import Admin
from impl.broker.entry_codec import SingleMessage, build_messages, parse, singles
from impl.broker.errors import BrokerError, PersistenceError, UnknownMessageIdError
from impl.broker.managed_ledger import Position
from impl.broker.service import Append, BrokerService, ConsumerSink, Subscription, consumer_step
from impl.broker.subscription import Message, MessageId, SubscriptionType
from impl.metadata.store import ConnectionLoss, SessionExpired

log = logging.getLogger(__name__)

SEND_TIMEOUT_S = 30.0
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
SUB_TYPES = {
    pb.EXCLUSIVE: SubscriptionType.EXCLUSIVE,
    pb.SHARED: SubscriptionType.SHARED,
    pb.FAILOVER: SubscriptionType.FAILOVER,
    pb.KEY_SHARED: SubscriptionType.KEY_SHARED,
}

R = TypeVar("R")
_NOTHING = object()  # no request held back


def id_to_pb(mid: MessageId) -> pb.MessageId:
    return pb.MessageId(ledger_id=mid.ledger_id, entry_id=mid.entry_id, batch_index=mid.batch_index)


def id_from_pb(mid: pb.MessageId) -> MessageId:
    return MessageId(mid.ledger_id, mid.entry_id, mid.batch_index)


def message_to_pb(msg: Message) -> pb.Message:
    return pb.Message(payload=msg.payload, key=msg.key, properties=dict(msg.properties))


def dispatched_to_pb(msg: Message) -> pb.Message:
    """A dispatched message (which carries its whole entry, not its own payload) as the gRPC API's."""
    single = singles(parse(msg.entry, verify_checksum=False))[msg.id.batch_index]
    return pb.Message(payload=single.payload, key=single.key, properties=dict(single.properties))


def _append(producer: str, sequence_id: int, messages: list[pb.Message]) -> Append:
    """The entry a Pulsar producer would have written for these messages (a batch when several)."""
    if not messages:
        raise BrokerError("a send needs at least one message")
    singles = [SingleMessage(m.payload, m.key, tuple(sorted(m.properties.items())), m.event_time) for m in messages]
    data = build_messages(producer, sequence_id, int(time.time() * 1000), singles)
    return Append(data, sequence_id, sequence_id + len(messages) - 1, sum(len(m.payload) for m in messages))


def _answer(make: Callable[..., R], body: Callable[[], R]) -> R:
    """Run a handler body; a broker error becomes the reply's code and message."""
    try:
        return body()
    except BrokerError as e:
        return make(code=e.code, message=str(e))
    except (SessionExpired, ConnectionLoss) as e:  # the session is being renewed: the client retries
        return make(code=pb.SERVICE_NOT_READY, message=f"metadata session not usable now: {e}; retry")
    except Exception as e:  # a bug must not kill the connection silently: log it and say so
        log.exception("broker handler failed")
        return make(code=pb.PERSISTENCE_ERROR, message=f"internal error: {type(e).__name__}: {e}")


def _entry_result(added: futures.Future[tuple[Position | None, bool]] | BrokerError) -> pb.EntryResult:
    """Wait for one append; its outcome as an EntryResult (a refusal stays a refusal)."""
    if isinstance(added, BrokerError):
        return pb.EntryResult(code=added.code, message=str(added))  # type: ignore[arg-type]
    try:
        position, duplicate = added.result(timeout=SEND_TIMEOUT_S)
    except futures.TimeoutError:
        error: BrokerError = PersistenceError(f"entry not confirmed within {SEND_TIMEOUT_S}s; are the bookies up?")
        return pb.EntryResult(code=error.code, message=str(error))  # type: ignore[arg-type]
    except BrokerError as e:
        return pb.EntryResult(code=e.code, message=str(e))  # type: ignore[arg-type]
    if position is None:
        return pb.EntryResult(code=pb.OK, duplicate=duplicate, ledger_id=-1, entry_id=-1)
    return pb.EntryResult(code=pb.OK, ledger_id=position.ledger_id, entry_id=position.entry_id)


class _StreamSink(ConsumerSink):
    def __init__(self, out: queue.Queue[pb.ConsumeResp | None]) -> None:
        self.out = out

    def deliver(self, messages: list[tuple[Message, int]]) -> None:
        resp = pb.ConsumeResp()
        for msg, count in messages:
            resp.deliveries.add(id=id_to_pb(msg.id), message=dispatched_to_pb(msg), redelivery_count=count)
        self.out.put(resp)

    def set_active(self, active: bool) -> None:
        self.out.put(pb.ConsumeResp(active=active, active_changed=True))


class _Servicer(pb_grpc.BrokerServicer):
    def __init__(self, service: BrokerService, admin: Admin) -> None:
        self.service = service
        self.admin = admin

    def Lookup(self, request: pb.LookupReq, context: Any) -> pb.LookupResp:
        def body() -> pb.LookupResp:
            redirect, broker, authoritative = self.service.lookup(request.topic, request.authoritative)
            return pb.LookupResp(code=pb.OK, redirect=redirect, broker=broker, authoritative=authoritative)

        return _answer(pb.LookupResp, body)

    def CreateProducer(self, request: pb.ProducerReq, context: Any) -> pb.ProducerResp:
        def body() -> pb.ProducerResp:
            name, last = self.service.topic(request.topic).create_producer(request.producer_name)
            return pb.ProducerResp(code=pb.OK, producer_name=name, last_sequence_id=last)

        return _answer(pb.ProducerResp, body)

    def Send(self, request: pb.SendReq, context: Any) -> pb.SendResp:
        def body() -> pb.SendResp:
            messages = list(request.messages)
            sizes = list(request.entry_sizes)
            if not sizes:
                append = _append(request.producer_name, request.sequence_id, messages)
                result = _entry_result(self.service.send(request.topic, request.producer_name, append))
                if result.code != pb.OK:
                    return pb.SendResp(code=result.code, message=result.message)
                return pb.SendResp(
                    code=pb.OK, ledger_id=result.ledger_id, entry_id=result.entry_id, duplicate=result.duplicate
                )
            topic = self.service.topic(request.topic)  # NOT_OWNER etc. here: nothing was written
            if any(n < 1 for n in sizes) or sum(sizes) != len(messages):
                raise BrokerError(f"entry_sizes {sizes} do not split the {len(messages)} messages; fix the client")
            appends, first = [], 0
            for n in sizes:
                appends.append(_append(request.producer_name, request.sequence_id + first, messages[first : first + n]))
                first += n
            pending = topic.publish_entries(request.producer_name, appends)
            # The managed ledger completes adds in order: once the last one is done, so is every
            # earlier one, and the handler wakes once instead of once per entry.
            last = next((p for p in reversed(pending) if not isinstance(p, BrokerError)), None)
            if last is not None:
                futures.wait([last], timeout=SEND_TIMEOUT_S)
            resp = pb.SendResp(code=pb.OK)
            resp.results.extend(_entry_result(p) for p in pending)
            return resp

        return _answer(pb.SendResp, body)

    def Read(self, request: pb.ReadReq, context: Any) -> pb.ReadResp:
        def body() -> pb.ReadResp:
            start = id_from_pb(request.start) if request.has_start else None
            resp = pb.ReadResp(code=pb.OK)
            for msg in self.service.read(request.topic, start, request.limit):
                resp.entries.add(id=id_to_pb(msg.id), message=message_to_pb(msg))
            return resp

        return _answer(pb.ReadResp, body)

    def LastMessageId(self, request: pb.LastIdReq, context: Any) -> pb.LastIdResp:
        def body() -> pb.LastIdResp:
            last = self.service.topic(request.topic).last_message_id()
            if last is None:
                return pb.LastIdResp(code=pb.OK, has_id=False)
            return pb.LastIdResp(code=pb.OK, has_id=True, id=id_to_pb(last))

        return _answer(pb.LastIdResp, body)

    def Admin(self, request: pb.AdminReq, context: Any) -> pb.AdminResp:
        def body() -> pb.AdminResp:
            try:
                args = json.loads(request.args) if request.args else {}
            except json.JSONDecodeError as e:
                return pb.AdminResp(code=pb.INVALID_ARGUMENT, message=f"admin args are not JSON: {e}")
            if not isinstance(args, dict):
                return pb.AdminResp(code=pb.INVALID_ARGUMENT, message="admin args must be a JSON object")
            result = self.admin.run(request.verb, args)
            return pb.AdminResp(code=pb.OK, result=json.dumps(result, sort_keys=True))

        return _answer(pb.AdminResp, body)

    def Consume(self, request_iterator: Iterator[pb.ConsumeReq], context: Any) -> Iterator[pb.ConsumeResp]:
        out: queue.Queue[pb.ConsumeResp | None] = queue.Queue()
        consumer = self.service.next_consumer_id()
        state: dict[str, Subscription] = {}

        def fail(code: int, message: str) -> None:
            out.put(pb.ConsumeResp(code=code, message=message))  # type: ignore[arg-type]
            out.put(None)

        def handle(req: pb.ConsumeReq) -> bool:
            kind = req.WhichOneof("op")
            sub = state.get("sub")
            if kind == "subscribe":
                if sub is not None:
                    fail(pb.INVALID_ARGUMENT, "already subscribed on this stream")
                    return False
                s = req.subscribe
                topic = self.service.topic(s.topic)
                state["sub"] = topic.subscribe(
                    s.subscription,
                    SUB_TYPES[s.type],
                    s.initial_position == pb.EARLIEST,
                    consumer,
                    s.consumer_name or f"consumer-{consumer}",
                    _StreamSink(out),
                )
                out.put(pb.ConsumeResp(code=pb.OK, subscribed=True))
                return True
            if sub is None:
                fail(pb.INVALID_ARGUMENT, "subscribe first: the first request on a consume stream is Subscribe")
                return False
            if kind == "flow":
                consumer_step(sub, lambda: sub.dispatcher.flow(consumer, req.flow.permits))
            elif kind == "ack":
                ids = [id_from_pb(i) for i in req.ack.ids]
                if ids:
                    consumer_step(sub, lambda: sub.dispatcher.ack(consumer, ids, req.ack.cumulative))
            elif kind == "nack":
                ids = [id_from_pb(i) for i in req.nack.ids]
                consumer_step(sub, lambda: sub.dispatcher.nack(consumer, ids))
            return True

        inbox: queue.SimpleQueue[pb.ConsumeReq | None] = queue.SimpleQueue()

        def receive() -> None:
            try:
                for req in request_iterator:
                    inbox.put(req)
            except grpc.RpcError:
                pass  # the consumer went away
            finally:
                inbox.put(None)

        def acks_together(first: pb.ConsumeReq) -> tuple[list[pb.ConsumeReq], pb.ConsumeReq | None | object]:
            """`first` (an individual ack) and the individual acks queued right behind it; the next
            request (or _NOTHING)."""
            acks = [first]
            while True:
                try:
                    nxt = inbox.get_nowait()
                except queue.Empty:
                    return acks, _NOTHING
                if nxt is None or nxt.WhichOneof("op") != "ack" or nxt.ack.cumulative:
                    return acks, nxt
                acks.append(nxt)

        def handle_acks(acks: list[pb.ConsumeReq]) -> None:
            # One persist of the cursor for acks that waited together (each one is a cursor-ledger add,
            # and a consumer acks every message), in their order; nothing is acknowledged later than
            # it would have been one by one.
            sub = state.get("sub")
            if sub is not None and len(acks) > 1:
                ids = [id_from_pb(i) for a in acks for i in a.ack.ids]
                try:
                    consumer_step(sub, lambda: sub.dispatcher.ack(consumer, ids, False))
                    return
                except UnknownMessageIdError:
                    pass  # one of them is unknown (so none counted): one by one, each refusal reported
            for a in acks:
                try:
                    handle(a)
                except BrokerError as e:
                    out.put(pb.ConsumeResp(code=pb.OK, message=f"{type(e).__name__}: {e}"))

        def read_requests() -> None:
            held: pb.ConsumeReq | None | object = _NOTHING
            try:
                while True:
                    req = inbox.get() if held is _NOTHING else held
                    held = _NOTHING
                    if req is None:
                        return
                    assert isinstance(req, pb.ConsumeReq)
                    try:
                        if req.WhichOneof("op") == "ack" and not req.ack.cumulative and "sub" in state:
                            acks, held = acks_together(req)
                            handle_acks(acks)
                        elif not handle(req):
                            return
                    except BrokerError as e:
                        if "sub" not in state:
                            fail(e.code, str(e))  # the subscribe failed: end the stream
                            return
                        out.put(pb.ConsumeResp(code=pb.OK, message=f"{type(e).__name__}: {e}"))
            finally:
                sub = state.get("sub")
                if sub is not None:
                    sub.topic.remove_consumer(sub, consumer)
                out.put(None)

        threading.Thread(target=receive, name=f"consumer-{consumer}-receive", daemon=True).start()
        threading.Thread(target=read_requests, name=f"consumer-{consumer}", daemon=True).start()
        while True:
            item = out.get()
            if item is None:
                return
            yield item


class BrokerServer:
    """The broker's gRPC endpoint on host:port (port 0 = any free port; see `.port`).

    Bound at construction so the broker knows its address (its identity in ownership nodes)
    before the service exists; `start(service, admin)` begins serving.
    """

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=64),
            options=[
                ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
                ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ],
        )
        self.port = self.server.add_insecure_port(f"{host}:{port}")
        if self.port == 0:
            raise OSError(f"cannot listen on {host}:{port}; pick a free port or use 0")
        self.host = host

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, service: BrokerService, admin: Admin) -> None:
        pb_grpc.add_BrokerServicer_to_server(_Servicer(service, admin), self.server)
        self.server.start()

    def stop(self, grace_s: float = 1.0) -> None:
        self.server.stop(grace=grace_s).wait()
