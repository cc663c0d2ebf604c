"""Real bookie processes and clients over gRPC for the client's process tests.

`BookieCluster` starts N `pulsar-ref bookie` processes (in parallel, to keep test
time down) on one metadata store URL and always stops them; `client()` connects a
fresh BookKeeper client with its own metadata session, as a separate application
would. `hung(bookie)` SIGSTOPs a bookie and always SIGCONTs it again.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from impl.bookie.client.api import BookKeeperClient
from impl.bookie.client.connect import connect_bookkeeper
from impl.metadata.embedded import DB_FILE
from impl.metadata.url import connect
from tests.bookie.bookie_process import BookieProcess

ROOT = Path(__file__).resolve().parents[2]


class BookieCluster:
    def __init__(self, directory: Path, url: str, size: int) -> None:
        self.directory = directory
        self.url = url
        self.bookies: dict[str, BookieProcess] = {}
        with ThreadPoolExecutor(size) as pool:
            futures = [pool.submit(BookieProcess, directory / f"bookie-{i}", url) for i in range(size)]
        failures = [f.exception() for f in futures if f.exception() is not None]
        for future in futures:
            if future.exception() is None:
                bookie = future.result()
                self.bookies[bookie.address] = bookie
        if failures:
            self.stop()  # the bookies that did start
            raise RuntimeError(f"{len(failures)} of {size} bookies did not start: {failures[0]}") from failures[0]

    def stop(self) -> None:
        for bookie in self.bookies.values():
            bookie.ensure_stopped()  # SIGKILL: works on a SIGSTOPped bookie too
        self.bookies.clear()

    @contextmanager
    def client(self, *, request_timeout_s: float = 3.0, timeout_s: float = 30.0) -> Iterator[BookKeeperClient]:
        store = connect(self.url)
        try:
            client = connect_bookkeeper(store, timeout_s=timeout_s, request_timeout_s=request_timeout_s, seed=7)
            try:
                yield client
            finally:
                client.close()
        finally:
            store.close()

    @contextmanager
    def hung(self, *addresses: str) -> Iterator[None]:
        """SIGSTOP the bookies for the block's duration; SIGCONT them however the block ends."""
        stopped: list[BookieProcess] = []
        try:
            for address in addresses:
                bookie = self.bookies[address]
                self._stop_outside_metadata_writes(bookie)
                stopped.append(bookie)
            yield
        finally:
            for bookie in stopped:
                if bookie.proc.poll() is None:
                    os.kill(bookie.proc.pid, signal.SIGCONT)

    def _stop_outside_metadata_writes(self, bookie: BookieProcess) -> None:
        """SIGSTOP `bookie`, but not inside a write to the embedded store: a process stopped there keeps the
        SQLite write lock, and every other client's metadata write then fails after the busy timeout (a
        hazard of this test-only store: a stopped ZooKeeper client blocks nobody). Such a stop is undone
        and tried again a moment later; the bookie's registration heartbeat is a brief transaction."""
        embedded = self.url.startswith("embedded://")
        for _ in range(100):
            os.kill(bookie.proc.pid, signal.SIGSTOP)
            wait_stopped(bookie.proc.pid)
            if not embedded or not _write_locked(Path(self.url.removeprefix("embedded://")) / DB_FILE):
                return
            os.kill(bookie.proc.pid, signal.SIGCONT)
            time.sleep(0.02)
        raise RuntimeError(f"bookie {bookie.address} kept the embedded store's write lock; cannot hang it safely")

    def kill(self, address: str) -> None:
        self.bookies[address].kill()


def wait_stopped(pid: int) -> None:
    """Until every thread of `pid` is stopped (a signal is delivered asynchronously)."""
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        states = []
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/stat") as f:
                    states.append(f.read().rsplit(")", 1)[1].split()[0])
            except FileNotFoundError:
                continue  # a thread that ended meanwhile
        if all(state in "tT" for state in states):
            return
        time.sleep(0.001)
    raise RuntimeError(f"process {pid} did not stop within 5 s of SIGSTOP")


def _write_locked(db_file: Path) -> bool:
    """Whether some process holds the SQLite database's write lock right now (no waiting for it)."""
    db = sqlite3.connect(db_file, timeout=0, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        db.execute("ROLLBACK")
        return False
    except sqlite3.OperationalError as e:
        if "locked" not in str(e) and "busy" not in str(e):
            raise
        return True
    finally:
        db.close()


@contextmanager
def bookie_cluster(directory: Path, url: str, size: int) -> Iterator[BookieCluster]:
    cluster = BookieCluster(directory, url, size)
    try:
        yield cluster
    finally:
        cluster.stop()


class BookieOnPort(BookieProcess):
    """A `pulsar-ref bookie` on a chosen port (to restart a bookie where its clients expect it)."""

    def __init__(self, data: Path, url: str, port: int = 0) -> None:
        super().__init__(data, url, "--port", str(port))
