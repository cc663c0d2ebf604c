"""Requests sent in batches (many per stream message): none lost, each with its own typed answer.

Over real bookie processes: recovery with many reads in flight, whose reads and
write-backs leave in batches, closes a ledger at the same end, with the same entries,
as one read at a time, and writes every entry back to its whole write set; a batch
holding a bad request answers that one with its error and the others normally. With
fakes: the client's driver hands every Send of a round to `send_many` in one call,
runs steps fed from many threads exactly once and in order, takes the steps of all the
answers of one stream message in one round, and a failing step loses no later one; the
gRPC transport turns a stream-level error code into the request's typed response without
touching its neighbours.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import grpc
import pytest

from impl.bookie import bookie_pb2 as pb
from impl.bookie import bookie_pb2_grpc as pb_grpc
from impl.bookie import wire
from impl.bookie.channel import BookieChannel, Callback, answer_batch
from impl.bookie.client.api import BookKeeperClient, _Driver
from impl.bookie.client.pipelined_transport import PipelinedTransport
from impl.bookie.client.writer import Send
from impl.bookie.entry_format import decode_entry, encode_entry, master_key
from impl.bookie.protocol import (
    AddRequest,
    AddResponse,
    ErrorCode,
    ReadLacRequest,
    ReadLacResponse,
    ReadRequest,
    ReadResponse,
    Request,
)
from impl.metadata.ledger import DigestType, LedgerState

from .real_cluster import BookieCluster, bookie_cluster

PASSWORD = b"batches"
KEY = master_key(PASSWORD)
ENTRIES = 900  # 600 adds per bookie in one hand-over: more than one stream message (MAX_BATCH 512)


def payload(entry_id: int) -> bytes:
    return b"payload-%d-" % entry_id + bytes([entry_id % 251]) * 200


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BookieCluster]:
    directory = tmp_path_factory.mktemp("batches-cluster")
    with bookie_cluster(directory, f"embedded://{directory / 'metadata'}", 3) as cluster:
        yield cluster


def unconfirmed_ledger(client: BookKeeperClient) -> tuple[int, tuple[str, ...]]:
    """An OPEN E3/Qw3/Qa2 ledger whose entries 0..ENTRIES-1 all carry LAC -1 (its writer died before any
    completion) and are stored on two of their three bookies (entry e not on ensemble[e % 3]): every
    recovery read finds a copy, and the missing third copy must be written back."""
    handle = client.create_ledger(3, 3, 2, password=PASSWORD)
    ledger_id, ensemble = handle.ledger_id, handle.metadata.last_ensemble
    answers: list[Any] = []
    done = threading.Semaphore(0)
    channels = [BookieChannel(bookie) for bookie in ensemble]
    try:
        for index, channel in enumerate(channels):
            requests: list[tuple[Request, Callback]] = []
            length = 0
            for entry_id in range(ENTRIES):
                length += len(payload(entry_id))
                if entry_id % 3 == index:
                    continue
                body = encode_entry(ledger_id, entry_id, -1, length, payload(entry_id), DigestType.CRC32C, PASSWORD)
                requests.append(
                    (AddRequest(ledger_id, entry_id, KEY, body), lambda r: (answers.append(r), done.release()))
                )
            channel.send_many(requests)
        for _ in range(2 * ENTRIES):
            assert done.acquire(timeout=30)
    finally:
        for channel in channels:
            channel.close()
    assert all(isinstance(a, AddResponse) and a.code is ErrorCode.EOK for a in answers)
    return ledger_id, ensemble


@pytest.mark.processes
@pytest.mark.timeout(180)
def test_batched_recovery_closes_where_one_read_at_a_time_does_and_writes_every_entry_back(
    cluster: BookieCluster,
) -> None:
    results = {}
    with cluster.client(timeout_s=60) as client:
        for read_ahead in (1, 256):
            ledger_id, ensemble = unconfirmed_ledger(client)
            client.recovery_read_ahead = read_ahead
            reader = client.open_ledger(ledger_id, PASSWORD, recovery=True)
            metadata = reader.metadata
            assert metadata.state is LedgerState.CLOSED
            assert metadata.fragments[-1].ensemble == ensemble  # no ensemble change was needed
            entries = [e.payload for e in reader.read(0, reader.last_add_confirmed)]
            results[read_ahead] = (metadata.last_entry_id, metadata.length, entries)

            # Written back to the whole write set: every bookie now stores every entry, as sent.
            for bookie in ensemble:
                channel = BookieChannel(bookie)
                try:
                    futures = [channel.submit(ReadRequest(ledger_id, e)) for e in range(ENTRIES)]
                    for entry_id, future in enumerate(futures):
                        response = future.result(30)
                        assert isinstance(response, ReadResponse) and response.code is ErrorCode.EOK, (bookie, entry_id)
                        decoded = decode_entry(response.body, DigestType.CRC32C, PASSWORD, ledger_id, entry_id)
                        assert decoded.payload == payload(entry_id)
                finally:
                    channel.close()

    lengths = sum(len(payload(e)) for e in range(ENTRIES))
    assert results[1] == (ENTRIES - 1, lengths, [payload(e) for e in range(ENTRIES)])
    assert results[256] == results[1]


@pytest.mark.processes
@pytest.mark.timeout(60)
def test_a_bad_request_in_a_batch_gets_its_error_and_the_others_their_answers(cluster: BookieCluster) -> None:
    bookie = next(iter(cluster.bookies))
    ledger_id = 990_001
    good = encode_entry(ledger_id, 0, -1, 1, b"x", DigestType.CRC32C, PASSWORD)
    requests: list[Request] = [
        AddRequest(ledger_id, 0, KEY, good),
        AddRequest(ledger_id, 1, KEY, b"not an entry"),  # EBADREQ: no header
        AddRequest(ledger_id, 2, master_key(b"wrong"), encode_entry(ledger_id, 2, -1, 1, b"x")),  # EUA
        ReadRequest(ledger_id, 7),  # ENOENTRY
        ReadRequest(ledger_id, 0),
        ReadLacRequest(ledger_id),
    ]
    answers: dict[int, list[Any]] = {i: [] for i in range(len(requests))}
    done = threading.Semaphore(0)

    def answer(i: int) -> Any:
        return lambda response: (answers[i].append(response), done.release())

    with PipelinedTransport(timeout_s=20) as transport:
        transport.send_many([(bookie, r, answer(i)) for i, r in enumerate(requests[:3])])  # one message
        for _ in range(3):
            assert done.acquire(timeout=20)
        transport.send_many([(bookie, r, answer(i + 3)) for i, r in enumerate(requests[3:])])
        for _ in range(3):
            assert done.acquire(timeout=20)
    assert answers == {
        0: [AddResponse(ledger_id, 0, ErrorCode.EOK)],
        1: [AddResponse(ledger_id, 1, ErrorCode.EBADREQ)],
        2: [AddResponse(ledger_id, 2, ErrorCode.EUA)],
        3: [ReadResponse(ledger_id, 7, ErrorCode.ENOENTRY)],
        4: [ReadResponse(ledger_id, 0, ErrorCode.EOK, good)],
        5: [ReadLacResponse(ledger_id, ErrorCode.EOK, -1)],
    }

    # A request the bookie cannot even parse (an empty stream message) inside one Batches message.
    with grpc.insecure_channel(bookie) as raw:
        stub = pb_grpc.BookieStub(raw)
        batch = pb.StreamReqBatch(
            requests=[
                wire.request_to_pb(1, ReadRequest(ledger_id, 0)),
                pb.StreamReq(tag=2),
                wire.request_to_pb(3, ReadRequest(ledger_id, 9)),
            ]
        )
        replies = {
            msg.tag: wire.response_from_pb(msg)
            for out in stub.Batches(iter([batch]), timeout=10)
            for msg in out.responses
        }
    assert replies == {
        1: ReadResponse(ledger_id, 0, ErrorCode.EOK, good),
        2: ErrorCode.EBADREQ,
        3: ReadResponse(ledger_id, 9, ErrorCode.ENOENTRY),
    }


# ---- fakes -------------------------------------------------------------------------------------------------


class FakeChannel:
    """Answers every request at once: an unparseable one (ledger 13) with the stream-level code EBADREQ."""

    def __init__(self, address: str) -> None:
        self.address = address
        self.hand_overs: list[int] = []

    def send_many(self, requests: list[tuple[Request, Callback]], encoded: dict[int, bytes] | None = None) -> None:
        self.hand_overs.append(len(requests))
        for request, callback in requests:
            if request.ledger_id == 13:
                callback(ErrorCode.EBADREQ)
            else:
                assert isinstance(request, ReadRequest)
                callback(ReadResponse(request.ledger_id, request.entry_id, ErrorCode.EOK, b"body"))

    def close(self) -> None:
        pass


def test_transport_types_a_stream_level_error_and_answers_its_neighbours() -> None:
    channels: dict[str, FakeChannel] = {}

    def factory(address: str) -> Any:
        return channels.setdefault(address, FakeChannel(address))

    answers: list[tuple[int, Any]] = []
    with PipelinedTransport(timeout_s=5, channel_factory=factory) as transport:
        transport.send_many(
            [
                ("b1", ReadRequest(1, 0), lambda r: answers.append((0, r))),
                ("b2", ReadRequest(13, 5), lambda r: answers.append((1, r))),
                ("b1", AddRequest(13, 6, b"k", b""), lambda r: answers.append((2, r))),
                ("b1", ReadRequest(1, 1), lambda r: answers.append((3, r))),
            ]
        )
    assert sorted(answers, key=lambda a: a[0]) == [
        (0, ReadResponse(1, 0, ErrorCode.EOK, b"body")),
        (1, ReadResponse(13, 5, ErrorCode.EBADREQ)),
        (2, AddResponse(13, 6, ErrorCode.EBADREQ)),
        (3, ReadResponse(1, 1, ErrorCode.EOK, b"body")),
    ]
    assert channels["b1"].hand_overs == [3] and channels["b2"].hand_overs == [1]  # one hand-over per bookie


class RecordingTransport:
    def __init__(self) -> None:
        self.calls: list[list[tuple[str, Any]]] = []

    def send(self, bookie: str, request: Any, on_answer: Any) -> None:  # never used when send_many exists
        raise AssertionError("send_many expected")

    def send_many(self, sends: list[tuple[str, Any, Any]]) -> None:
        self.calls.append([(bookie, request) for bookie, request, _ in sends])


class CountingCore:
    def __init__(self) -> None:
        self.seen: list[int] = []

    def step(self, n: int) -> list[Any]:
        self.seen.append(n)
        return [Send(f"b{n % 3}", ReadRequest(1, n))]


def driver(transport: Any, core: Any) -> _Driver:
    client = BookKeeperClient(None, None, transport)  # type: ignore[arg-type]  # no metadata: only Sends here
    return _Driver(client, core, lambda event: None)


def test_driver_sends_the_requests_of_a_round_in_one_call() -> None:
    transport, core = RecordingTransport(), CountingCore()
    d = driver(transport, core)
    d.feed(lambda: [out for n in range(100) for out in core.step(n)])
    assert len(transport.calls) == 1 and [r.entry_id for _, r in transport.calls[0]] == list(range(100))


def test_driver_runs_every_step_fed_from_many_threads_once_in_each_threads_order() -> None:
    transport, core = RecordingTransport(), CountingCore()
    d = driver(transport, core)
    threads = [
        threading.Thread(
            target=lambda t=t: [d.feed(lambda n=n: core.step(n)) for n in range(t * 1000, t * 1000 + 1000)]
        )
        for t in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(core.seen) == list(range(4000))
    for t in range(4):
        mine = [n for n in core.seen if t * 1000 <= n < (t + 1) * 1000]
        assert mine == sorted(mine)
    assert sorted(r.entry_id for call in transport.calls for _, r in call) == list(range(4000))


def test_a_failing_step_loses_neither_the_sends_before_it_nor_the_steps_after_it() -> None:
    transport, core = RecordingTransport(), CountingCore()
    d = driver(transport, core)
    ran: list[str] = []

    def outer() -> list[Any]:
        # Queued behind this step: taken together in the next round, where boom fails between them.
        d.feed(lambda: core.step(1))
        d.feed(boom)
        d.feed(lambda: core.step(2))
        return []

    def boom() -> list[Any]:
        ran.append("boom")
        raise RuntimeError("a bug in a core")

    with pytest.raises(RuntimeError):
        d.feed(outer)
    assert [r.entry_id for call in transport.calls for _, r in call] == [1]  # sent although a later step failed
    d.feed(lambda: core.step(3))  # the next feed runs what was left, then its own step
    assert core.seen == [1, 2, 3] and ran == ["boom"]
    assert [r.entry_id for call in transport.calls for _, r in call] == [1, 2, 3]


def test_the_steps_of_one_answered_stream_message_run_in_one_round() -> None:
    """The answers of one stream message (answer_batch) feed their steps; the driver takes them all
    after the message is answered, so the requests they make leave in one hand-over, not one each."""
    transport, core = RecordingTransport(), CountingCore()
    d = driver(transport, core)
    lock = threading.Lock()
    callbacks: dict[int, Callback] = {
        tag: (lambda _response, n=tag: d.feed(lambda: core.step(n))) for tag in range(1, 51)
    }
    responses = [wire.response_to_pb(tag, ReadResponse(1, tag, ErrorCode.ENOENTRY)) for tag in range(1, 51)]
    answer_batch(lock, callbacks, responses)
    assert core.seen == list(range(1, 51))
    assert len(transport.calls) == 1 and [r.entry_id for _, r in transport.calls[0]] == list(range(1, 51))
    d.feed(lambda: core.step(99))  # outside an answered message a step runs at once
    assert core.seen[-1] == 99 and len(transport.calls) == 2
