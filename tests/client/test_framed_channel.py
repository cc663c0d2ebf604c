"""The event-loop transport (impl/bookie/client/framed_channel.py, io_loop.py) against a real bookie process:
answers arrive on the one I/O thread, a blocking client call from there refuses instead of stalling every
bookie connection, and closing answers what is still waiting."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from impl.bookie.client.api import _wait
from impl.bookie.client.io_loop import on_io_loop_thread
from impl.bookie.client.pipelined_transport import PipelinedTransport
from impl.bookie.entry_format import encode_entry, master_key
from impl.bookie.protocol import AddRequest, AddResponse, ErrorCode, ReadRequest, ReadResponse

from .real_cluster import BookieOnPort, wait_stopped

pytestmark = [pytest.mark.processes, pytest.mark.timeout(120)]

KEY = master_key(b"pw")


def add(entry_id: int) -> AddRequest:
    return AddRequest(7, entry_id, KEY, encode_entry(7, entry_id, entry_id - 1, entry_id + 1, b"x"))


def test_answers_in_order_on_the_io_thread_and_a_blocking_call_there_refuses(bookie: BookieOnPort) -> None:
    answers: list[tuple[int, Any, bool]] = []
    refused: list[BaseException] = []
    done = threading.Semaphore(0)

    def on_answer(i: int) -> Any:
        def answer(response: Any) -> None:
            answers.append((i, response, on_io_loop_thread()))
            if i == 0:
                from concurrent.futures import Future

                try:
                    _wait(Future(), 1.0, "a blocking call")  # would stall every bookie stream: refused
                except RuntimeError as e:
                    refused.append(e)
            done.release()

        return answer

    with PipelinedTransport(timeout_s=20) as transport:
        transport.send_many([(bookie.address, add(i), on_answer(i)) for i in range(50)])
        for _ in range(50):
            assert done.acquire(timeout=20)
        read_back: list[Any] = []
        got = threading.Event()
        transport.send(bookie.address, ReadRequest(7, 49), lambda r: (read_back.append(r), got.set()))
        assert got.wait(20)
    assert [i for i, _, _ in answers] == list(range(50))
    assert all(r == AddResponse(7, i, ErrorCode.EOK) and on_loop for i, r, on_loop in answers)
    assert len(refused) == 1 and "bookie I/O thread" in str(refused[0])
    assert isinstance(read_back[0], ReadResponse) and read_back[0].code is ErrorCode.EOK
    assert not on_io_loop_thread()


def test_close_answers_every_waiting_request_once(bookie: BookieOnPort) -> None:
    answers: list[Any] = []
    lock = threading.Lock()

    def answer(response: Any) -> None:
        with lock:
            answers.append(response)

    os.kill(bookie.proc.pid, signal.SIGSTOP)  # the bookie answers nothing: every request still waits at close
    wait_stopped(bookie.proc.pid)  # a signal is delivered asynchronously
    try:
        transport = PipelinedTransport(timeout_s=60)
        transport.send_many([(bookie.address, add(i), answer) for i in range(10)])
        time.sleep(0.2)
        transport.close()
    finally:
        os.kill(bookie.proc.pid, signal.SIGCONT)
    assert answers == [None] * 10  # "no answer", exactly once each


def test_a_stream_that_ended_with_nothing_in_flight_reaches_the_restarted_bookie(
    tmp_path: Path, bookie: BookieOnPort
) -> None:
    """Nothing waits when the bookie dies, so no answer tells the transport to drop the channel: the
    channel itself opens a new stream (on a fresh gRPC channel) for the next request."""
    answers: list[Any] = []
    got = threading.Semaphore(0)

    def answer(response: Any) -> None:
        answers.append(response)
        got.release()

    with PipelinedTransport(timeout_s=10) as transport:
        transport.send(bookie.address, add(0), answer)
        assert got.acquire(timeout=20)
        port = bookie.port
        bookie.kill()
        time.sleep(0.5)  # the stream has ended, with nothing in flight
        # a metadata store of its own: the killed process's registration outlives it until its session expires
        restarted = BookieOnPort(tmp_path / "data", f"embedded://{tmp_path / 'metadata-2'}", port)
        try:
            transport.send(restarted.address, ReadRequest(7, 0), answer)
            assert got.acquire(timeout=20)
        finally:
            restarted.ensure_stopped()
    assert answers[0] == AddResponse(7, 0, ErrorCode.EOK)
    assert isinstance(answers[1], ReadResponse) and answers[1].code is ErrorCode.EOK  # journal replayed at restart


def test_closing_one_transport_while_another_runs_leaves_it_no_closed_loop_events(
    bookie: BookieOnPort, caplog: pytest.LogCaptureFixture
) -> None:
    """gRPC hands the completions of every event loop's calls out through one poller per process; a
    transport that stopped its loop before its streams and channels finished closing left completions
    for a closed loop, which raised ("Event loop is closed") in the loop of a transport still running."""

    def adds(transport: PipelinedTransport, first: int) -> None:
        done = threading.Semaphore(0)
        transport.send_many([(bookie.address, add(first + i), lambda _: done.release()) for i in range(400)])
        for _ in range(400):
            assert done.acquire(timeout=20)

    with PipelinedTransport(timeout_s=20) as running:
        for round_ in range(10):
            with PipelinedTransport(timeout_s=20) as other:
                adds(other, 1000 * round_)
            adds(running, 1000 * round_ + 500)  # 400 ids each: no overlap
    closed_loop = [r for r in caplog.records if "Event loop is closed" in (r.exc_text or r.getMessage())]
    assert not closed_loop
