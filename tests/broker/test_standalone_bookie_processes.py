"""`standalone --bookie-processes`: the standalone's bookies in processes of their own (issue 46, item 4;
docs/broker.md, "The standalone's bookies"). They serve the broker, are killed and started again by the
fault verbs, stop with the standalone, and leave a data directory the in-process bookies read back."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import psutil
import pytest

from impl.broker.standalone import Standalone, _ProcessBookie
from impl.client import Client

pytestmark = pytest.mark.processes


def alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def test_bookie_processes_serve_survive_a_kill_and_leave_data_the_in_process_bookies_read(tmp_path: Path) -> None:
    t = f"persistent://public/default/t-{uuid.uuid4().hex[:8]}"
    data = tmp_path / "standalone"
    s = Standalone(data, port=0, web_port=0, bookie_processes=True)
    s.start()
    try:
        bookies = [b for b in s.bookies if isinstance(b, _ProcessBookie)]
        assert len(bookies) == 3 and all(b.up for b in bookies)
        pids = [b.proc.pid for b in bookies if b.proc is not None]
        assert len(set(pids)) == 3 and os.getpid() not in pids
        assert {c.pid for c in psutil.Process().children()} >= set(pids)
        with Client(s.pulsar_service_url) as client:
            producer = client.create_producer(t)
            for i in range(5):
                producer.send(b"%d" % i)
            s.control("kill", "bookie-0")
            assert not alive(pids[0]) and not s.bookies[0].up
            for i in range(5, 10):  # the two bookies left are an ensemble
                producer.send(b"%d" % i)
            s.control("start", "bookie-0")
            assert s.bookies[0].up
            pids += [b.proc.pid for b in bookies[:1] if b.proc is not None]
            assert [n["up"] for n in s.status()] == [True, True, True, True]
            producer.close()
    finally:
        s.stop()
    assert not any(alive(p) for p in pids)
    s = Standalone(data, port=0, web_port=0)  # the same data directory, bookies in process
    s.start()
    try:
        with Client(s.pulsar_service_url) as client:
            consumer = client.subscribe(t, "after", initial_position="earliest")
            assert [consumer.receive(timeout_s=10).data for _ in range(10)] == [b"%d" % i for i in range(10)]
            consumer.close()
    finally:
        s.stop()
