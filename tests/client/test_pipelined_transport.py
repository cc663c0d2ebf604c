"""PipelinedTransport against real bookie processes: one answer per request through hangs, kills and restarts."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from impl.bookie.client.pipelined_transport import PipelinedTransport
from impl.bookie.entry_format import encode_entry, master_key
from impl.bookie.protocol import AddRequest, AddResponse, ErrorCode, ReadRequest, ReadResponse

from .real_cluster import BookieOnPort, wait_stopped

pytestmark = [pytest.mark.processes, pytest.mark.timeout(120)]

KEY = master_key(b"pw")


class Answers:
    """Every answer the transport delivered, per request number."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.by_request: dict[int, list[Any]] = {}
        self.count = 0
        self.all_in = threading.Condition(self.lock)

    def callback(self, number: int) -> Any:
        def on_answer(response: Any) -> None:
            with self.lock:
                self.by_request.setdefault(number, []).append(response)
                self.count += 1
                self.all_in.notify_all()

        return on_answer

    def wait_for(self, count: int, timeout_s: float) -> None:
        with self.lock:
            assert self.all_in.wait_for(lambda: self.count >= count, timeout_s), f"{self.count} of {count} answers"


def add(entry_id: int) -> AddRequest:
    return AddRequest(1, entry_id, KEY, encode_entry(1, entry_id, entry_id - 1, entry_id + 1, b"x"))


def test_every_request_is_answered_exactly_once_through_a_hang(bookie: BookieOnPort) -> None:
    answers = Answers()
    with PipelinedTransport(timeout_s=1.0) as transport:
        for i in range(200):
            transport.send(bookie.address, add(i), answers.callback(i))
        answers.wait_for(200, 10)
        assert all(a == [AddResponse(1, i, ErrorCode.EOK)] for i, a in answers.by_request.items())

        os.kill(bookie.proc.pid, signal.SIGSTOP)
        wait_stopped(bookie.proc.pid)  # a signal is delivered asynchronously
        try:
            started = time.monotonic()
            for i in range(200, 300):
                transport.send(bookie.address, ReadRequest(1, i - 200), answers.callback(i))
            answers.wait_for(300, 10)
            assert time.monotonic() - started >= 0.9  # the deadline, not an error, answered them
        finally:
            os.kill(bookie.proc.pid, signal.SIGCONT)
        assert all(answers.by_request[i] == [None] for i in range(200, 300))

        # The hung requests' late responses arrive now and must be dropped; new ones are answered.
        transport.send(bookie.address, ReadRequest(1, 7), answers.callback(300))
        answers.wait_for(301, 10)
        time.sleep(0.5)
        read = answers.by_request[300]
        assert len(read) == 1 and isinstance(read[0], ReadResponse) and read[0].code is ErrorCode.EOK
        assert not transport._unanswered  # each request's claim was taken once, by its answer or deadline
    assert Counter(len(a) for a in answers.by_request.values()) == {1: 301}


def test_a_request_sent_while_the_deadline_timer_is_idle_is_answered_at_its_deadline(bookie: BookieOnPort) -> None:
    """Sending does not wake the deadline timer: idle, it waits one timeout at most, so it still answers a
    request sent partway through that wait by the request's own deadline, not a timeout later."""
    answers = Answers()
    with PipelinedTransport(timeout_s=2.0) as transport:
        first = time.monotonic()
        transport.send(bookie.address, add(0), answers.callback(0))
        answers.wait_for(1, 10)
        # The timer waited for that add's deadline (2 s), found it answered and began an idle wait (2 s more).
        time.sleep(max(0.0, first + 2.6 - time.monotonic()))
        os.kill(bookie.proc.pid, signal.SIGSTOP)
        wait_stopped(bookie.proc.pid)  # a signal is delivered asynchronously
        try:
            started = time.monotonic()
            transport.send(bookie.address, ReadRequest(1, 0), answers.callback(1))
            answers.wait_for(2, 10)
            waited = time.monotonic() - started
        finally:
            os.kill(bookie.proc.pid, signal.SIGCONT)
        assert answers.by_request[1] == [None]
        # Its deadline is 2 s after the send; a timer that slept a whole idle wait past it would take 3.4 s+.
        assert 1.9 <= waited < 3.2, f"answered after {waited:.2f} s, against a 2 s deadline"


def test_a_killed_bookie_answers_none_at_once_and_a_restarted_one_is_reached_again(
    tmp_path: Path, bookie: BookieOnPort
) -> None:
    answers = Answers()
    with PipelinedTransport(timeout_s=5.0) as transport:
        transport.send(bookie.address, add(0), answers.callback(0))
        answers.wait_for(1, 10)
        assert answers.by_request[0] == [AddResponse(1, 0, ErrorCode.EOK)]

        os.kill(bookie.proc.pid, signal.SIGKILL)
        bookie.proc.wait()
        started = time.monotonic()
        transport.send(bookie.address, ReadRequest(1, 0), answers.callback(1))
        answers.wait_for(2, 10)
        assert answers.by_request[1] == [None]
        assert time.monotonic() - started < 4, "a refused connection must not wait for the deadline"

        # Same port, same data (a fresh metadata store, so the old registration does not block it).
        restarted = BookieOnPort(tmp_path / "data", f"embedded://{tmp_path / 'metadata-2'}", bookie.port)
        try:
            transport.send(bookie.address, ReadRequest(1, 0), answers.callback(2))
            answers.wait_for(3, 10)
            read = answers.by_request[2]
            assert len(read) == 1 and isinstance(read[0], ReadResponse) and read[0].code is ErrorCode.EOK
        finally:
            restarted.ensure_stopped()
