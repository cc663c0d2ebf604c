"""The BookKeeper client over real bookie processes (gRPC), on the embedded store and on a real ZooKeeper.

The in-process variants of these properties live in test_api.py and test_recovery.py;
here every bookie is a `pulsar-ref bookie` process, fenced, hung (SIGSTOP) or killed
for real, and every client has its own metadata session, as separate applications do.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from impl.bookie.channel import BookieChannel
from impl.bookie.client.api import WriteHandle
from impl.bookie.client.errors import LedgerFencedError, MetadataUpdateError, NotEnoughBookiesError, UnauthorizedError
from impl.bookie.protocol import ErrorCode, ReadRequest, ReadResponse
from impl.metadata.ledger import LedgerState
from impl.metadata.zkserver import ZooKeeperServer

from .real_cluster import BookieCluster, bookie_cluster

pytestmark = [pytest.mark.processes, pytest.mark.timeout(120)]

ROOT = Path(__file__).resolve().parents[2]
PASSWORD = b"secret"


# ---- clusters: one shared per backend for the tests that leave bookies running ----------------------------


@pytest.fixture(scope="module")
def embedded_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BookieCluster]:
    directory = tmp_path_factory.mktemp("embedded-cluster")
    with bookie_cluster(directory, f"embedded://{directory / 'metadata'}", 4) as cluster:
        yield cluster


@pytest.fixture(scope="module")
def zk_cluster(tmp_path_factory: pytest.TempPathFactory, zookeeper: ZooKeeperServer) -> Iterator[BookieCluster]:
    directory = tmp_path_factory.mktemp("zk-cluster")
    url = f"zk://{zookeeper.connect_string}/client-{uuid.uuid4().hex[:8]}"
    with bookie_cluster(directory, url, 4) as cluster:
        yield cluster


@pytest.fixture(
    params=[
        pytest.param("embedded", id="embedded"),
        pytest.param("zookeeper", id="zookeeper", marks=pytest.mark.zookeeper),
    ]
)
def cluster(request: pytest.FixtureRequest) -> BookieCluster:
    name = "embedded_cluster" if request.param == "embedded" else "zk_cluster"
    cluster: BookieCluster = request.getfixturevalue(name)
    return cluster


@pytest.fixture
def own_cluster(tmp_path: Path) -> Iterator[BookieCluster]:
    """Four fresh bookies for a test that kills one."""
    with bookie_cluster(tmp_path, f"embedded://{tmp_path / 'metadata'}", 4) as cluster:
        yield cluster


def payload(i: int) -> bytes:
    return b"entry-%d-" % i + b"x" * 100


def wait_until_stored(bookies: list[str], ledger_id: int, entry_id: int, timeout_s: float = 20.0) -> None:
    """Poll the bookies with plain (unfenced) reads until each stores the entry."""
    deadline = time.monotonic() + timeout_s
    for bookie in bookies:
        channel = BookieChannel(bookie)
        try:
            while True:
                response = channel.call(ReadRequest(ledger_id, entry_id), timeout=timeout_s)
                if isinstance(response, ReadResponse) and response.code is ErrorCode.EOK:
                    break
                assert time.monotonic() < deadline, f"bookie {bookie} never stored entry {ledger_id}:{entry_id}"
                time.sleep(0.05)
        finally:
            channel.close()


def write(handle: WriteHandle, first: int, count: int) -> None:
    for i in range(first, first + count):
        assert handle.add(payload(i)) == i


# ---- large entries ---------------------------------------------------------------------------------------------


def test_one_read_of_large_entries_beyond_four_mib(cluster: BookieCluster) -> None:
    """A bookie puts the replies ready together in one stream message of about 4 MiB; a message of
    large entries passes that, and gRPC's default limit of 4 MiB refused it (RESOURCE_EXHAUSTED)."""
    with cluster.client() as client:
        writer = client.create_ledger(3, 3, 2, password=PASSWORD)
        big = [bytes([i]) * (128 * 1024) for i in range(100)]  # 12.5 MiB of 128 KiB entries, as Pulsar batches are
        for data in big:
            writer.add(data)
        writer.close()
        reader = client.open_ledger(writer.ledger_id, PASSWORD, recovery=False)
        assert [e.payload for e in reader.read(0, 99)] == big


# ---- fencing -------------------------------------------------------------------------------------------------


def test_recovering_open_fences_the_writer(cluster: BookieCluster) -> None:
    with cluster.client() as writer_client, cluster.client() as recoverer:
        writer = writer_client.create_ledger(3, 3, 2, password=PASSWORD)
        write(writer, 0, 20)
        lac = writer.last_add_confirmed
        assert lac == 19

        reader = recoverer.open_ledger(writer.ledger_id, PASSWORD, recovery=True)

        assert reader.metadata.state is LedgerState.CLOSED
        assert reader.last_add_confirmed >= lac
        with pytest.raises(LedgerFencedError, match="fenced"):
            writer.add(b"after recovery")
        with pytest.raises(LedgerFencedError):
            writer.add(b"the handle stays stopped")
        entries = reader.read(0, reader.last_add_confirmed)
        assert [e.payload for e in entries[: lac + 1]] == [payload(i) for i in range(lac + 1)]
        stored, _ = recoverer.ledgers.read(writer.ledger_id)
        assert (stored.state, stored.last_entry_id) == (LedgerState.CLOSED, reader.last_add_confirmed)


def test_ten_concurrent_recovering_opens_during_writing_agree(cluster: BookieCluster) -> None:
    with cluster.client() as writer_client:
        writer = writer_client.create_ledger(3, 3, 2, password=PASSWORD)
        acknowledged: list[int] = []
        failures: list[BaseException] = []
        stop = threading.Event()
        started = threading.Event()

        def keep_writing() -> None:
            """Pipelined adds (up to 20 in flight) until the writer is fenced."""
            in_flight: list[Future[int]] = []
            i = 0
            while not stop.is_set():
                in_flight.append(writer.add_async(payload(i)))
                i += 1
                if len(in_flight) >= 20:
                    future = in_flight.pop(0)
                    try:
                        acknowledged.append(future.result(timeout=30))
                    except LedgerFencedError as e:
                        failures.append(e)
                        break
                    if len(acknowledged) >= 50:
                        started.set()
            for future in in_flight:
                try:
                    acknowledged.append(future.result(timeout=30))
                except LedgerFencedError as e:
                    failures.append(e)
            started.set()

        thread = threading.Thread(target=keep_writing)
        thread.start()
        try:
            assert started.wait(60), "the writer did not get 50 adds acknowledged"
            lac_before = writer.last_add_confirmed

            def recover() -> int:
                with cluster.client() as client:
                    return client.open_ledger(writer.ledger_id, PASSWORD, recovery=True).last_add_confirmed

            with ThreadPoolExecutor(10) as pool:
                results = list(pool.map(lambda _: recover(), range(10)))
        finally:
            stop.set()
            thread.join(60)
        assert not thread.is_alive()

        assert len(set(results)) == 1, f"recovering opens disagree on the last entry: {results}"
        last = results[0]
        assert last >= lac_before >= 49
        # No acknowledged add is lost: every entry the writer saw confirmed is inside the closed ledger.
        assert acknowledged and max(acknowledged) <= last
        assert failures, "the writer was never told it is fenced"
        stored = writer_client.open_ledger(writer.ledger_id, PASSWORD, recovery=False)
        assert stored.metadata.last_entry_id == last
        entries = stored.read(0, last)
        assert [e.payload for e in entries] == [payload(i) for i in range(last + 1)]


def test_open_without_recovery_or_with_a_wrong_password_fences_nothing(cluster: BookieCluster) -> None:
    with cluster.client() as writer_client, cluster.client() as other:
        writer = writer_client.create_ledger(3, 3, 2, password=PASSWORD)
        write(writer, 0, 10)

        with pytest.raises(UnauthorizedError, match="wrong password"):
            other.open_ledger(writer.ledger_id, b"not the password", recovery=True)
        reader = other.open_ledger(writer.ledger_id, PASSWORD, recovery=False)
        assert reader.metadata.state is LedgerState.OPEN
        assert reader.read_last_confirmed() == 8  # piggybacked on entry 9
        assert [e.payload for e in reader.read(0, 8)] == [payload(i) for i in range(9)]

        write(writer, 10, 10)  # the writer goes on: no bookie was fenced
        closed = writer.close()
        assert closed is not None and (closed.state, closed.last_entry_id) == (LedgerState.CLOSED, 19)
        assert other.open_ledger(writer.ledger_id, PASSWORD).last_add_confirmed == 19


# ---- recovery with a misbehaving bookie -------------------------------------------------------------------------


def test_recovery_with_a_hung_bookie(cluster: BookieCluster) -> None:
    # The old writer waits long for a bookie (as a writer that has not noticed the hang yet);
    # the recoverer gives up on the hung bookie after 2 s.
    with cluster.client(request_timeout_s=20) as writer_client, cluster.client(request_timeout_s=2) as recoverer:
        writer = writer_client.create_ledger(3, 3, 2, password=PASSWORD)
        write(writer, 0, 10)
        hung = writer.metadata.last_ensemble[1]
        with cluster.hung(hung):
            write(writer, 10, 5)  # Qa=2: the two live bookies acknowledge
            lac = writer.last_add_confirmed
            assert lac == 14
            started = time.monotonic()
            reader = recoverer.open_ledger(writer.ledger_id, PASSWORD, recovery=True)
            took = time.monotonic() - started
            assert reader.metadata.state is LedgerState.CLOSED
            assert reader.last_add_confirmed >= lac
            with pytest.raises(LedgerFencedError):
                writer.add(b"late")  # the two live bookies are fenced: Qa can no longer be reached
            entries = reader.read(0, lac)
            assert [e.payload for e in entries] == [payload(i) for i in range(lac + 1)]
        assert took < 25, f"recovery took {took:.1f}s with one hung bookie"


def test_recovery_after_a_bookie_was_killed_mid_writing(own_cluster: BookieCluster) -> None:
    cluster = own_cluster
    with cluster.client(request_timeout_s=2) as writer_client, cluster.client(request_timeout_s=2) as recoverer:
        writer = writer_client.create_ledger(3, 3, 2, password=PASSWORD)
        write(writer, 0, 10)
        victim = writer.metadata.last_ensemble[0]
        cluster.kill(victim)  # from now on it drops every add
        write(writer, 10, 10)  # ensemble change: the fourth bookie replaces the dead one
        assert victim not in writer.metadata.last_ensemble
        lac = writer.last_add_confirmed

        reader = recoverer.open_ledger(writer.ledger_id, PASSWORD, recovery=True)

        assert reader.last_add_confirmed >= lac == 19
        assert [f.first_entry_id for f in reader.metadata.fragments][0] == 0
        assert len(reader.metadata.fragments) >= 2
        with pytest.raises(LedgerFencedError):
            writer.add(b"late")
        entries = reader.read(0, lac)
        assert [e.payload for e in entries] == [payload(i) for i in range(lac + 1)]


# ---- conflicting closes -------------------------------------------------------------------------------------------


def test_close_after_recovery_closed_further_is_a_metadata_version_error(cluster: BookieCluster) -> None:
    """Entry 10 reaches two bookies but not the third (hung) one: with Qa=3 the writer never sees it
    confirmed, recovery finds it and closes at 10, so the writer's close at 9 conflicts."""
    with cluster.client(request_timeout_s=20) as writer_client, cluster.client(request_timeout_s=2) as recoverer:
        writer = writer_client.create_ledger(3, 3, 3, password=PASSWORD)
        write(writer, 0, 10)
        hung = writer.metadata.last_ensemble[2]
        with cluster.hung(hung):
            pending = writer.add_async(payload(10))
            live = [b for b in writer.metadata.last_ensemble if b != hung]
            wait_until_stored(live, writer.ledger_id, 10)
            assert not pending.done() and writer.last_add_confirmed == 9
            reader = recoverer.open_ledger(writer.ledger_id, PASSWORD, recovery=True)
            assert reader.metadata.last_entry_id == 10  # written back to a replacement of the hung bookie
            with pytest.raises(MetadataUpdateError, match="already CLOSED at entry 10"):
                writer.close()
        stored, _ = recoverer.ledgers.read(writer.ledger_id)
        assert (stored.state, stored.last_entry_id) == (LedgerState.CLOSED, 10)


def test_writer_close_over_in_recovery_wins(cluster: BookieCluster) -> None:
    """A recoverer that cannot reach any bookie leaves the ledger IN_RECOVERY; the writer's close still wins."""
    with cluster.client() as writer_client, cluster.client(request_timeout_s=1, timeout_s=10) as recoverer:
        writer = writer_client.create_ledger(3, 3, 2, password=PASSWORD)
        write(writer, 0, 10)
        with cluster.hung(*writer.metadata.last_ensemble), pytest.raises(NotEnoughBookiesError):
            recoverer.open_ledger(writer.ledger_id, PASSWORD, recovery=True)
        recoverer.close()  # its fencing reads die with its channels
        assert recoverer.ledgers.read(writer.ledger_id)[0].state is LedgerState.IN_RECOVERY

        closed = writer.close()

        assert closed is not None and (closed.state, closed.last_entry_id) == (LedgerState.CLOSED, 9)
        with cluster.client() as late:
            reader = late.open_ledger(writer.ledger_id, PASSWORD, recovery=True)
            assert (reader.metadata.state, reader.last_add_confirmed) == (LedgerState.CLOSED, 9)


# ---- the command line -------------------------------------------------------------------------------------------


def ledger_cli(url: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pulsar_ref.cli", "ledger", "--metadata", url, *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )


def test_ledger_cli_end_to_end(cluster: BookieCluster) -> None:
    url = cluster.url
    created = ledger_cli(url, "write", "-E", "3", "-Qw", "3", "-Qa", "2", "--password", "pw", "--count", "20")
    assert created.returncode == 0, created.stderr
    ledger_id = int(created.stdout.split()[1])
    assert f"ledger {ledger_id}: wrote 20 entries, last_add_confirmed=19" in created.stdout
    assert "left OPEN" in created.stdout

    denied = ledger_cli(url, "recover", str(ledger_id), "--password", "wrong")
    assert denied.returncode == 2
    assert "UnauthorizedError" in denied.stderr and "wrong password" in denied.stderr

    no_reads = ledger_cli(url, "--read-ahead", "0", "recover", str(ledger_id), "--password", "pw")
    assert no_reads.returncode == 2 and "recovery_read_ahead must be at least 1" in no_reads.stderr

    recovered = ledger_cli(url, "--read-ahead", "8", "recover", str(ledger_id), "--password", "pw")
    assert recovered.returncode == 0, recovered.stderr
    assert f"ledger {ledger_id}: CLOSED last_entry=19" in recovered.stdout

    read = ledger_cli(url, "read", str(ledger_id), "18", "19", "--password", "pw")
    assert read.returncode == 0, read.stderr
    assert read.stdout.splitlines() == ["18\tentry-18", "19\tentry-19"]

    listed = ledger_cli(url, "list", "-l")
    assert f"ledger {ledger_id}: CLOSED last_entry=19" in listed.stdout

    assert ledger_cli(url, "delete", str(ledger_id)).returncode == 0
    missing = ledger_cli(url, "show", str(ledger_id))
    assert missing.returncode == 2 and "does not exist" in missing.stderr

    too_big = ledger_cli(url, "create", "-E", "9")
    assert too_big.returncode == 2 and "need 9 writable bookies" in too_big.stderr
