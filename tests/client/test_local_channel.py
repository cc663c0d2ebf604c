"""The local channel to in-process bookies (impl/bookie/client/local_channel.py) keeps the gRPC channel's
answer contract: each callback once, on the answering thread (never the caller's inside send_many), in the
order the bookie produced the replies; a ConnectionError for every request to a bookie that is down or
goes down before it answers, and nothing from it afterwards."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from impl.bookie.channel import Result
from impl.bookie.client.io_loop import on_io_loop_thread
from impl.bookie.client.local_channel import LocalBookieChannel, LocalBookiesRegistry, LocalChannels
from impl.bookie.client.pipelined_transport import PipelinedTransport
from impl.bookie.entry_format import encode_entry
from impl.bookie.protocol import AddRequest, AddResponse, ErrorCode, ReadRequest, ReadResponse, Request, Response
from impl.bookie.server import Bookie

KEY = b"k" * 20
BOOKIE = "127.0.0.1:1"


def body(eid: int) -> bytes:
    return encode_entry(1, eid, eid - 1, eid + 1, b"x" * 100)


class Answers:
    """Callbacks that record each answer with the thread it came on, and count calls per request."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.got: list[tuple[int, Result, bool]] = []  # (request index, result, on the answering thread)
        self.callers: set[int] = set()
        self.done = threading.Event()
        self.expected = 0

    def callback(self, index: int) -> Callable[[Result], None]:
        self.expected += 1

        def answer(result: Result) -> None:
            with self.lock:
                self.got.append((index, result, on_io_loop_thread() and threading.get_ident() not in self.callers))
                if len(self.got) >= self.expected:
                    self.done.set()

        return answer

    def wait(self) -> list[tuple[int, Result, bool]]:
        assert self.done.wait(20), f"{len(self.got)} of {self.expected} answered"
        return self.got


@pytest.fixture
def bookie(tmp_path: Path):
    bookie = Bookie(tmp_path, checkpoint_interval=3600)
    yield bookie
    bookie.close()


def channel_to(registry: LocalBookiesRegistry) -> tuple[LocalChannels, LocalBookieChannel]:
    def remote(address: str) -> object:
        raise AssertionError(f"{address} is local: no gRPC channel")

    channels = LocalChannels(registry, remote)
    channel = channels(BOOKIE)
    assert isinstance(channel, LocalBookieChannel)
    return channels, channel


def test_adds_and_reads_answered_once_in_order_on_the_answering_thread(bookie: Bookie) -> None:
    registry = LocalBookiesRegistry()
    registry.up(BOOKIE, bookie)
    channels, channel = channel_to(registry)
    answers = Answers()
    answers.callers.add(threading.get_ident())
    try:
        for first in range(0, 300, 30):  # several hand-overs, each of several adds
            channel.send_many([(AddRequest(1, e, KEY, body(e)), answers.callback(e)) for e in range(first, first + 30)])
        got = answers.wait()
        assert [index for index, _, _ in got] == list(range(300))  # the journal's order: the bookie's
        assert [result for _, result, _ in got] == [AddResponse(1, e, ErrorCode.EOK) for e in range(300)]
        assert all(elsewhere for _, _, elsewhere in got)

        # A read is answered inside the bookie's submit_many, on the caller's thread: still not here.
        reads = Answers()
        reads.callers.add(threading.get_ident())
        channel.send_many([(ReadRequest(1, e), reads.callback(e)) for e in (5, 6, 299)])
        got = reads.wait()
        assert [(i, r) for i, r, _ in got] == [(e, ReadResponse(1, e, ErrorCode.EOK, body(e))) for e in (5, 6, 299)]
        assert all(elsewhere for _, _, elsewhere in got)
    finally:
        channel.close()
        channels.close()


class HeldBookie:
    """A bookie that keeps its requests' deliveries for the test to answer."""

    def __init__(self) -> None:
        self.held: list[tuple[Request, Callable[[Response], None]]] = []

    def submit_many(self, requests: Sequence[tuple[Request, Callable[[Response], None]]]) -> None:
        self.held += requests


def held_channel() -> tuple[LocalBookiesRegistry, HeldBookie, LocalChannels, LocalBookieChannel, Answers]:
    """A channel to a HeldBookie registered as BOOKIE, and a collector of its answers."""
    registry = LocalBookiesRegistry()
    held = HeldBookie()
    registry.up(BOOKIE, held)
    channels, channel = channel_to(registry)
    return registry, held, channels, channel, Answers()


def test_requests_in_flight_fail_when_the_bookie_goes_down_and_late_replies_are_dropped() -> None:
    registry, held, channels, channel, answers = held_channel()
    try:
        channel.send_many([(AddRequest(1, e, KEY, b"x"), answers.callback(e)) for e in range(3)])
        held.held[0][1](AddResponse(1, 0, ErrorCode.EOK))  # answered before the kill
        registry.down(BOOKIE)
        for request, deliver in held.held[1:]:  # the stopped bookie's journal drains: too late
            assert isinstance(request, AddRequest)
            deliver(AddResponse(1, request.entry_id, ErrorCode.EOK))
        got = answers.wait()
        assert got[0][:2] == (0, AddResponse(1, 0, ErrorCode.EOK))
        assert sorted(i for i, _, _ in got[1:]) == [1, 2]
        assert all(isinstance(r, ConnectionError) for _, r, _ in got[1:])

        # Down: refused, on the answering thread. Up again (a restart): served.
        refused = Answers()
        refused.callers.add(threading.get_ident())
        channel.send_many([(AddRequest(1, 9, KEY, b"x"), refused.callback(9))])
        ((_, result, elsewhere),) = refused.wait()
        assert isinstance(result, ConnectionError) and elsewhere
        restarted = HeldBookie()
        registry.up(BOOKIE, restarted)
        served = Answers()
        channel.send_many([(AddRequest(1, 10, KEY, b"x"), served.callback(10))])
        restarted.held[0][1](AddResponse(1, 10, ErrorCode.EOK))
        assert [r for _, r, _ in served.wait()] == [AddResponse(1, 10, ErrorCode.EOK)]
        with answers.lock:
            assert len(answers.got) == 3  # nothing answered twice
    finally:
        channel.close()
        channels.close()


def test_a_closed_channel_fails_what_waits_and_refuses_more() -> None:
    registry, held, channels, channel, answers = held_channel()
    try:
        channel.send_many([(AddRequest(1, 0, KEY, b"x"), answers.callback(0))])
        channel.close()
        channel.send_many([(AddRequest(1, 1, KEY, b"x"), answers.callback(1))])
        held.held[0][1](AddResponse(1, 0, ErrorCode.EOK))  # after the close: dropped
        got = answers.wait()
        assert sorted(i for i, _, _ in got) == [0, 1]
        assert all(isinstance(r, ConnectionError) for _, r, _ in got)
    finally:
        channels.close()


def test_a_bookie_that_refuses_at_submit_fails_the_requests() -> None:
    class Closing:
        def submit_many(self, requests: Sequence[tuple[Request, Callable[[Response], None]]]) -> None:
            raise RuntimeError("the journal is closed")

    registry = LocalBookiesRegistry()
    registry.up(BOOKIE, Closing())
    channels, channel = channel_to(registry)
    answers = Answers()
    try:
        channel.send_many([(AddRequest(1, 0, KEY, b"x"), answers.callback(0))])
        ((_, result, _),) = answers.wait()
        assert isinstance(result, ConnectionError)
    finally:
        channel.close()
        channels.close()


def test_the_transport_reaches_local_bookies_without_grpc_through_a_kill_and_a_restart(tmp_path: Path) -> None:
    registry = LocalBookiesRegistry()
    registry.add(BOOKIE)  # no gRPC server listens there: only the local channel can answer
    bookie = Bookie(tmp_path, checkpoint_interval=3600)
    registry.up(BOOKIE, bookie)

    def ask(transport: PipelinedTransport, request: Request) -> object:
        answered: list[object] = []
        event = threading.Event()

        def on_answer(response: object) -> None:
            answered.append(response)
            event.set()

        transport.send(BOOKIE, request, on_answer)
        assert event.wait(20)
        return answered[0]

    with PipelinedTransport(timeout_s=10, local_bookies=registry) as transport:
        assert ask(transport, AddRequest(1, 0, KEY, body(0))) == AddResponse(1, 0, ErrorCode.EOK)
        registry.down(BOOKIE)  # the standalone's kill: down, then the bookie closes
        bookie.close()
        assert ask(transport, AddRequest(1, 1, KEY, body(1))) is None  # no answer from a dead bookie
        bookie = Bookie(tmp_path, checkpoint_interval=3600)  # restarted on its data: entry 0 kept
        registry.up(BOOKIE, bookie)
        assert ask(transport, ReadRequest(1, 0)) == ReadResponse(1, 0, ErrorCode.EOK, body(0))
        assert ask(transport, AddRequest(1, 1, KEY, body(1))) == AddResponse(1, 1, ErrorCode.EOK)
    bookie.close()


def test_every_add_acknowledged_before_a_kill_is_there_after_the_restart(tmp_path: Path) -> None:
    registry = LocalBookiesRegistry()
    bookie = Bookie(tmp_path, checkpoint_interval=3600)
    registry.up(BOOKIE, bookie)
    answers: dict[int, object] = {}
    all_answered = threading.Event()
    total = 600

    def answered(entry: int) -> Callable[[object], None]:
        def on_answer(response: object) -> None:
            answers[entry] = response
            if len(answers) == total:
                all_answered.set()

        return on_answer

    with PipelinedTransport(timeout_s=10, local_bookies=registry) as transport:
        for entry in range(total):
            transport.send(BOOKIE, AddRequest(1, entry, KEY, body(entry)), answered(entry))
            if entry == total // 3:
                deadline = time.monotonic() + 20
                while len(answers) < 50 and time.monotonic() < deadline:
                    time.sleep(0.001)  # some acknowledged before the kill
            if entry == total // 2:  # killed with adds in flight: down first, then the bookie closes
                registry.down(BOOKIE)
                bookie.close()
        assert all_answered.wait(20)
    acknowledged = [e for e, r in answers.items() if r == AddResponse(1, e, ErrorCode.EOK)]
    assert len(acknowledged) >= 50 and len(acknowledged) <= total // 2 + 1
    assert all(r is None for e, r in answers.items() if e > total // 2)  # none after the kill
    restarted = Bookie(tmp_path, checkpoint_interval=3600)
    registry.up(BOOKIE, restarted)
    try:
        with PipelinedTransport(timeout_s=10, local_bookies=registry) as transport:
            reads: dict[int, object] = {}
            done = threading.Event()

            def read(entry: int) -> Callable[[object], None]:
                def on_answer(response: object) -> None:
                    reads[entry] = response
                    if len(reads) == len(acknowledged):
                        done.set()

                return on_answer

            for entry in acknowledged:
                transport.send(BOOKIE, ReadRequest(1, entry), read(entry))
            assert done.wait(20)
        assert all(reads[e] == ReadResponse(1, e, ErrorCode.EOK, body(e)) for e in acknowledged)
    finally:
        restarted.close()
