"""Rollovers with adds queued, on a real `pulsar-ref standalone` process with the official client.

fencing.tla's multi-step rollover (close the ledger, create the next, write the ledger list by
conditional write, then write the adds that queued meanwhile) is safe only if the queued adds wait for
the list write: with `QueuedAddsAwaitListWrite = FALSE` an add is acknowledged on a ledger that no
reader of the list can find (AckedMessagesOnList). Here the broker rolls over every few entries while
hundreds of asynchronous sends are outstanding, so sends arrive during nearly every rollover; every
acknowledged message must then be readable through the ledger list, once and in order, also after the
process is SIGKILLed in the middle of the stream and started again on its data.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pulsar
import pytest

from tests.broker import pulsar_standalone
from tests.waiting import wait_for

pytestmark = pytest.mark.processes

ENTRIES_PER_LEDGER = 5


def standalone(data: Path, *options: str) -> pulsar_standalone.Standalone:
    return pulsar_standalone.Standalone(data, "--max-entries-per-ledger", str(ENTRIES_PER_LEDGER), *options)


def send_async(producer: Any, count: int) -> tuple[dict[int, Any], threading.Event]:
    """Send `count` messages at once; (result, message id) by message index, and an event set when all
    are answered."""
    answers: dict[int, Any] = {}
    done = threading.Event()
    lock = threading.Lock()

    def answered(i: int) -> Any:
        def callback(result: Any, message_id: Any) -> None:
            with lock:
                answers[i] = (result, message_id)
                if len(answers) == count:
                    done.set()

        return callback

    for i in range(count):
        producer.send_async(b"%d" % i, answered(i))
    return answers, done


def read_all(url: str, topic: str) -> list[tuple[Any, bytes]]:
    client = pulsar.Client(url, operation_timeout_seconds=30)
    try:
        reader = client.create_reader(topic, pulsar.MessageId.earliest)
        read = []
        while reader.has_message_available():
            message = reader.read_next(timeout_millis=10_000)
            read.append((message.message_id(), message.data()))
        return read
    finally:
        client.close()


def test_adds_sent_during_rollovers_are_all_on_the_ledger_list(tmp_path: Path) -> None:
    s = standalone(tmp_path / "roll")
    topic = f"persistent://public/default/roll-{uuid.uuid4().hex[:8]}"
    client = pulsar.Client(s.url, operation_timeout_seconds=30)
    try:
        producer = client.create_producer(topic, batching_enabled=False, max_pending_messages=1000)
        answers, done = send_async(producer, 300)
        assert done.wait(120), f"{300 - len(answers)} sends unanswered"
        failed = {i: result for i, (result, _) in answers.items() if result != pulsar.Result.Ok}
        assert not failed, failed
        read = read_all(s.url, topic)
        assert [data for _, data in read] == [b"%d" % i for i in range(300)]  # each once, in order
        ledgers: dict[int, list[int]] = {}
        for message_id, _ in read:
            ledgers.setdefault(message_id.ledger_id(), []).append(message_id.entry_id())
        assert len(ledgers) >= 300 // ENTRIES_PER_LEDGER  # a rollover every few entries, sends queued across them
        assert all(entries == list(range(len(entries))) for entries in ledgers.values()), ledgers
        assert all(len(entries) <= ENTRIES_PER_LEDGER for entries in ledgers.values()), ledgers
    finally:
        client.close()
        s.proc.terminate()
        s.proc.wait()


def test_a_sigkill_among_rollovers_loses_no_acknowledged_message(tmp_path: Path) -> None:
    data = tmp_path / "killed"
    topic = f"persistent://public/default/killed-{uuid.uuid4().hex[:8]}"
    s = standalone(data)
    client = pulsar.Client(s.url, operation_timeout_seconds=5)
    try:
        producer = client.create_producer(topic, batching_enabled=False, send_timeout_millis=5000)
        answers, _ = send_async(producer, 400)
        # kill while sends are still in flight, well past the first rollovers
        wait_for(lambda: len(answers) >= 100, "100 sends answered", 60)
        s.proc.send_signal(signal.SIGKILL)
        s.proc.wait()
    finally:
        with contextlib.suppress(pulsar.PulsarException):  # NotConnected: its broker is gone
            client.close()
    acked = {b"%d" % i for i, (result, _) in answers.items() if result == pulsar.Result.Ok}
    assert len(acked) >= 100
    # At once, on the same ports (the same broker identity): its old session has not expired yet.
    s = standalone(data, "--pulsar-port", str(urlsplit(s.url).port), "--web-port", str(urlsplit(s.web_url).port))
    try:
        read = [payload for _, payload in read_all(s.url, topic)]
        assert len(read) == len(set(read)), "a message was read twice"
        assert acked <= set(read), f"acknowledged and lost: {sorted(acked - set(read))[:10]}"
        order = [int(p) for p in read]
        assert order == sorted(order), "read out of the order they were sent"
    finally:
        s.proc.terminate()
        s.proc.wait()
