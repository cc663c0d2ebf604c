"""The broker's hot paths under pipelining: many entries in one Send, acks that queue up behind each
other on a consume stream. Each shortcut must give exactly the outcomes the one-at-a-time path gives."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from impl.broker import broker_pb2 as pb
from impl.broker.grpc_client import Client, MessageId
from impl.broker.service import Subscription
from impl.broker.standalone import Standalone
from tests.waiting import wait_for


def topic() -> str:
    return f"persistent://public/default/p-{uuid.uuid4().hex[:8]}"


def subscription(standalone: Standalone, t: str, name: str) -> Subscription:
    assert standalone.broker is not None
    return standalone.broker.service.topics[t].subscriptions[name]


def test_a_pipelined_send_acknowledges_every_entry_in_order_and_stops_at_a_refusal(client: Client) -> None:
    t = topic()
    client.create_producer(t, name="pipelined")
    stub = client.stub(client.lookup(t))
    messages = [pb.Message(payload=b"m%d" % i) for i in range(50)]
    resp = stub.Send(
        pb.SendReq(topic=t, producer_name="pipelined", sequence_id=0, messages=messages, entry_sizes=[1] * 50)
    )
    assert resp.code == pb.OK and len(resp.results) == 50
    positions = [(r.ledger_id, r.entry_id) for r in resp.results]
    assert all(r.code == pb.OK for r in resp.results)
    assert positions == sorted(positions) and len(set(positions)) == 50
    # An oversize entry in the middle: it and everything after it are refused, nothing after it written.
    big = pb.Message(payload=b"x" * (6 * 1024 * 1024))
    resp = stub.Send(
        pb.SendReq(
            topic=t,
            producer_name="pipelined",
            sequence_id=50,
            messages=[pb.Message(payload=b"a"), big, pb.Message(payload=b"b")],
            entry_sizes=[1, 1, 1],
        )
    )
    assert [r.code for r in resp.results][0] == pb.OK
    assert all(r.code != pb.OK for r in resp.results[1:])
    assert [m for _, m in client.read_topic(t)] == [b"m%d" % i for i in range(50)] + [b"a"]


def test_acks_that_queue_up_are_persisted_together(standalone: Standalone, client: Client) -> None:
    t = topic()
    producer = client.create_producer(t)
    for i in range(8):
        producer.send(b"m%d" % i)
    consumer = client.subscribe(t, "together", initial_position="earliest")
    got = [consumer.receive(timeout_s=10) for _ in range(8)]
    sub = subscription(standalone, t, "together")
    persisted = sub.cursor.ledger_entries
    with sub.lock:  # the stream's handler waits on this lock: the acks sent meanwhile queue up
        for msg in got:
            consumer.acknowledge(msg)
        time.sleep(0.3)
    wait_for(lambda: sub.cursor.backlog() == 0, "every ack to count")
    assert sub.cursor.mark_delete_position == got[-1].id.position
    # The first ack was taken before the lock was let go, the other seven waited together.
    assert sub.cursor.ledger_entries - persisted <= 2
    consumer.close()


def test_an_unknown_id_among_queued_acks_spoils_none_of_the_others(standalone: Standalone, client: Client) -> None:
    t = topic()
    producer = client.create_producer(t)
    first = producer.send(b"m0")
    for i in range(1, 6):
        producer.send(b"m%d" % i)
    consumer = client.subscribe(t, "unknown", initial_position="earliest")
    got = [consumer.receive(timeout_s=10) for _ in range(6)]
    sub = subscription(standalone, t, "unknown")
    with sub.lock:
        for msg in got[:3]:
            consumer.acknowledge(msg)
        consumer.acknowledge(MessageId(first.ledger_id + 100, 0, 0))  # never delivered: refused alone
        for msg in got[3:]:
            consumer.acknowledge(msg)
        time.sleep(0.3)
    wait_for(lambda: sub.cursor.backlog() == 0, "the known acks to count")
    assert sub.cursor.mark_delete_position == got[-1].id.position
    producer.send(b"after")  # the stream lives on
    assert consumer.receive(timeout_s=10).data == b"after"
    consumer.close()


def test_restart_keeps_what_the_pipelined_path_acknowledged(tmp_path: Path) -> None:
    s = Standalone(tmp_path / "sa")
    s.start()
    t = topic()
    try:
        with Client(s.service_url, timeout_s=10) as c:
            producer = c.create_producer(t)
            futures = [producer.send_async(b"v%d" % i) for i in range(300)]
            producer.flush()
            ids = [f.result(30) for f in futures]
            producer.close()
    finally:
        s.stop()
    assert ids == sorted(ids) and len(set(ids)) == 300
    s = Standalone(tmp_path / "sa")
    s.start()
    try:
        with Client(s.service_url, timeout_s=10) as c:
            read = c.read_topic(t)
            assert [m for _, m in read] == [b"v%d" % i for i in range(300)]
            assert [mid for mid, _ in read] == ids
    finally:
        s.stop()


def test_batches_close_by_size_and_by_delay_without_a_flush(client: Client) -> None:
    t = topic()
    producer = client.create_producer(t, batching=True, batch_max_messages=100, batch_delay_s=0.05)
    chunk = b"x" * (60 * 1024)
    by_size = [producer.send_async(chunk) for _ in range(3)]  # 180 KiB crosses the 128 KiB batch limit
    ids = [f.result(10) for f in by_size]
    assert {(i.ledger_id, i.entry_id) for i in ids} == {(ids[0].ledger_id, ids[0].entry_id)}
    assert [i.batch_index for i in ids] == [0, 1, 2]
    start = time.monotonic()
    late = [producer.send_async(b"late-%d" % i) for i in range(2)]
    late_ids = [f.result(10) for f in late]  # no flush: the delay closes the batch
    assert time.monotonic() - start >= 0.05
    assert late_ids[0].entry_id == late_ids[1].entry_id != ids[0].entry_id
    producer.close()
    assert [m for _, m in client.read_topic(t)] == [chunk] * 3 + [b"late-0", b"late-1"]


def test_a_producers_requests_are_appended_in_sequence_order_whatever_order_they_arrive_in(
    client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    import impl.broker.service as service

    monkeypatch.setattr(service, "REORDER_WAIT_S", 1.0)
    t = topic()
    client.create_producer(t, name="reordered")  # the broker expects sequence id 0 next
    stub = client.stub(client.lookup(t))

    def request(first: int, count: int) -> pb.SendReq:
        messages = [pb.Message(payload=b"s%d" % (first + i)) for i in range(count)]
        return pb.SendReq(
            topic=t, producer_name="reordered", sequence_id=first, messages=messages, entry_sizes=[1] * count
        )

    later = stub.Send.future(request(3, 2))  # arrives first: waits for 0..2
    time.sleep(0.2)
    assert not later.done()
    earlier = stub.Send(request(0, 3))
    assert [r.code for r in earlier.results] == [pb.OK] * 3
    assert [r.code for r in later.result(10).results] == [pb.OK] * 2
    assert [m for _, m in client.read_topic(t)] == [b"s%d" % i for i in range(5)]
    # A gap that never fills (the client gave up on a request that never arrived) holds the next
    # request only for the reorder wait, then it is appended.
    start = time.monotonic()
    assert [r.code for r in stub.Send(request(7, 1)).results] == [pb.OK]
    assert 0.9 <= time.monotonic() - start < 5
    assert [m for _, m in client.read_topic(t)][-1] == b"s7"


def test_many_requests_in_flight_keep_every_message_in_order(client: Client) -> None:
    t = topic()
    producer = client.create_producer(t, name="pipelined-client")
    futures = []
    for i in range(3000):
        futures.append(producer.send_async(b"%d" % i))
        if i % 250 == 0:
            time.sleep(0.01)  # several requests, not one
    producer.flush()
    ids = [f.result(60) for f in futures]
    producer.close()
    assert ids == sorted(ids) and len(set(ids)) == 3000
    assert [m for _, m in client.read_topic(t)] == [b"%d" % i for i in range(3000)]


class _Done:
    def __init__(self, resp: pb.SendResp) -> None:
        self.resp = resp

    def result(self) -> pb.SendResp:
        return self.resp


class _ScriptedBroker:
    """A client stand-in whose broker answers Send from a script and records the requests."""

    def __init__(self, answers: list[pb.SendResp]) -> None:
        self.timeout_s = 0.3
        self.answers = answers
        self.requests: list[pb.SendReq] = []

    def call(self, topic: str, method: str, request: object) -> pb.ProducerResp:
        return pb.ProducerResp(code=pb.OK, producer_name="scripted", last_sequence_id=-1)

    def lookup(self, topic: str) -> str:
        return "broker"

    def forget(self, topic: str) -> None:
        pass

    def stub(self, address: str) -> _ScriptedBroker:
        return self

    @property
    def Send(self) -> _ScriptedBroker:  # noqa: N802 - the stub's method name
        return self

    def future(self, request: pb.SendReq, timeout: float) -> _Done:
        self.requests.append(request)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return _Done(answer)


def test_a_rejected_request_leaves_no_gap_in_the_sequence_ids() -> None:
    from impl.broker.grpc_client import Producer, SendRejected

    ok = pb.SendResp(code=pb.OK, results=[pb.EntryResult(code=pb.OK, ledger_id=1, entry_id=0)])
    broker = _ScriptedBroker([pb.SendResp(code=pb.NOT_OWNER, message="moved")])
    producer = Producer(broker, "t", "scripted", False, 100, 0.001)  # type: ignore[arg-type]
    with pytest.raises(SendRejected):
        producer.send(b"first", timeout_s=0.3)
    broker.answers = [ok]
    assert producer.send(b"second") == MessageId(1, 0, 0)
    producer.close()
    # The rejected request was tried until its deadline; the next one reuses its sequence id.
    assert {r.sequence_id for r in broker.requests} == {0}
