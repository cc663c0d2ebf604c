"""The embedded store across processes: SIGKILL mid-write, reopen, reaping, multi-process writers."""

from __future__ import annotations

import os
import random
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

from impl.metadata.embedded import DB_FILE, EmbeddedStore
from impl.metadata.store import EventType, WatchedEvent

from .embedded_writer import payload
from .events import Inbox

REPO = Path(__file__).resolve().parents[2]


def spawn(*args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.metadata_store.embedded_writer", *args],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_ready(proc: subprocess.Popen[str]) -> None:
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip() == "ready", f"child did not start: {line!r} {proc.stderr.read() if proc.stderr else ''}"


def test_sigkill_during_writes_loses_no_acknowledged_write_and_tears_nothing(tmp_path):
    rng = random.Random(4462)
    acknowledged: set[int] = set()
    # Kill after varied numbers of acknowledgements, then after a varied extra pause.
    for acks_before_kill in (1, 9, 40, 120):
        proc = spawn("log", str(tmp_path))
        try:
            wait_ready(proc)
            assert proc.stdout is not None
            for _ in range(acks_before_kill):
                acknowledged.add(int(proc.stdout.readline()))
            if rng.random() < 0.5:
                os.sched_yield()
            else:
                for _ in range(rng.randint(0, 5)):
                    acknowledged.add(int(proc.stdout.readline()))
            proc.send_signal(signal.SIGKILL)
            # Acknowledgements already printed before the kill count too.
            for line in proc.stdout:
                if line.strip():
                    acknowledged.add(int(line))
        finally:
            proc.kill()
            proc.wait()
        assert proc.returncode == -signal.SIGKILL

    with sqlite3.connect(tmp_path / DB_FILE) as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
    store = EmbeddedStore(tmp_path)
    try:
        counter = int(store.get("/counter")[0])
        written = sorted(int(name) for name in store.children("/log"))
        # Atomic multis: the counter and the log agree exactly, with no gaps.
        assert written == list(range(1, counter + 1))
        assert acknowledged <= set(written), f"lost acknowledged writes: {sorted(acknowledged - set(written))}"
        for i in written:
            assert store.get(f"/log/{i:08d}")[0] == payload(i), f"entry {i} is torn"
        assert counter >= max(acknowledged) >= 120
    finally:
        store.close()


def test_reopen_keeps_versions_cversions_and_zxids(tmp_path):
    first = EmbeddedStore(tmp_path)
    first.create("/n", b"a")
    for value in (b"b", b"c", b"d"):
        first.set("/n", value)
    first.create("/n/child")
    first.delete("/n/child")
    first.create("/n/s-", sequential=True)
    first.create("/n/eph", ephemeral=True)
    before_data, before = first.get("/n")
    first.close()

    second = EmbeddedStore(tmp_path)
    try:
        data, after = second.get("/n")
        # Closing the first session deleted its ephemeral (one more child change).
        assert data == before_data == b"d"
        assert (after.version, after.czxid, after.mzxid) == (before.version, before.czxid, before.mzxid)
        assert after.cversion == before.cversion + 1
        assert second.children("/n") == ["s-0000000001"]
        assert second.create("/n/s-", sequential=True) == "/n/s-0000000003"
        assert second.set("/n", b"e").mzxid > before.mzxid
    finally:
        second.close()


def test_a_killed_clients_session_is_reaped_and_its_ephemeral_deleted(tmp_path):
    observer = EmbeddedStore(tmp_path, session_timeout_s=10.0)
    proc = spawn("ephemeral", str(tmp_path))
    try:
        wait_ready(proc)
        inbox: Inbox[WatchedEvent] = Inbox()
        stat = observer.exists("/alive", watch=inbox)
        assert stat is not None and stat.ephemeral_owner != observer.session_id
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        # The observer's heartbeat thread reaps the dead session after its 1 s timeout.
        assert inbox.wait_for(1) == [WatchedEvent(EventType.DELETED, "/alive")]
        assert observer.exists("/alive") is None
    finally:
        proc.kill()
        proc.wait()
        observer.close()


def test_a_paused_client_comes_back_expired_and_is_fenced(tmp_path):
    """A client stalled past its timeout (GC pause, partition) must learn it expired, never act on
    the old session (BookKeeper issue 4462): listeners hear EXPIRED and calls raise SessionExpired."""
    observer = EmbeddedStore(tmp_path, session_timeout_s=10.0)
    proc = spawn("ephemeral", str(tmp_path))
    try:
        wait_ready(proc)
        inbox: Inbox[WatchedEvent] = Inbox()
        assert observer.exists("/alive", watch=inbox) is not None
        proc.send_signal(signal.SIGSTOP)
        assert inbox.wait_for(1) == [WatchedEvent(EventType.DELETED, "/alive")]
        proc.send_signal(signal.SIGCONT)
        out, err = proc.communicate(timeout=60)
        lines = out.splitlines()
        assert "listener EXPIRED" in lines and "raised SessionExpired" in lines, (out, err)
        assert proc.returncode == 0, err
        assert observer.exists("/alive") is None
    finally:
        proc.kill()
        proc.wait()
        observer.close()


def test_several_processes_increment_one_node_linearizably(tmp_path):
    # All start on a fresh directory at once: creating the database races too.
    procs = [spawn("increment", str(tmp_path), "30") for _ in range(3)]
    written = conflicts = 0
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, err
        w, c = map(int, out.split())
        written, conflicts = written + w, conflicts + c
    assert written + conflicts == 90
    check = EmbeddedStore(tmp_path)
    try:
        data, stat = check.get("/counter")
        assert int(data) == stat.version == written
    finally:
        check.close()
