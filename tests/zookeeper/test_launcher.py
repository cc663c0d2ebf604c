"""The ZooKeeper launcher on real JVMs: standalone and ensemble life cycles, and `pulsar-ref zk`."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from impl.metadata import zkserver
from impl.metadata.store import ConnectionLoss
from impl.metadata.zkserver import ZooKeeperError, ZooKeeperNotInstalled, ZooKeeperServer, servers_in
from impl.metadata.zookeeper import ZooKeeperStore

pytestmark = pytest.mark.zookeeper
PULSAR_REF = str(Path(sys.executable).parent / "pulsar-ref")


def zk_processes(directory: Path) -> list[psutil.Process]:
    """Live JVMs whose command line names a config under `directory`."""
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        cmdline = process.info["cmdline"] or []
        if process.info["status"] != psutil.STATUS_ZOMBIE and any(str(directory) in arg for arg in cmdline):
            found.append(process)
    return found


def zk_command(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run([PULSAR_REF, "zk", *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    zk = ZooKeeperServer(tmp_path / "zk")
    try:
        yield zk
    finally:
        zk.stop()


def test_standalone_keeps_its_data_across_stop_restart_and_kill(server: ZooKeeperServer) -> None:
    server.start()
    assert server.mode() == "standalone"
    with ZooKeeperStore.from_url(f"zk://{server.connect_string}/app") as store:
        store.create("/kept", b"v0")
        store.set("/kept", b"v1", expected_version=0)
    server.stop()
    assert server.pid() is None and server.mode() is None
    server.start()
    server.restart()
    with ZooKeeperStore.from_url(f"zk://{server.connect_string}/app") as store:
        data, stat = store.get("/kept")
        assert (data, stat.version) == (b"v1", 1)
        store.set("/kept", b"v2", expected_version=1)  # acknowledged, then crash
    server.kill()
    assert server.pid() is None
    server.start()
    with ZooKeeperStore.from_url(f"zk://{server.connect_string}/app") as store:
        assert store.get("/kept")[0] == b"v2"


def test_failed_start_names_the_cause_and_stop_leaves_no_process(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        zk = ZooKeeperServer(tmp_path / "zk", port)
        with pytest.raises(ZooKeeperError, match="Address already in use"):
            zk.start(timeout_s=60)
        zk.stop()
        zk.stop()  # idempotent
        assert zk.pid() is None
        assert zk_processes(tmp_path) == []

        # The same through the command: start fails, cleans up, and `zk stop` is still fine.
        failed = zk_command("start", "--dir", str(tmp_path / "cli"), "--port", str(port), "--timeout", "60")
        assert failed.returncode == 1
        assert "Address already in use" in failed.stderr
        assert zk_command("stop", "--dir", str(tmp_path / "cli")).returncode == 0
        assert zk_processes(tmp_path) == []


def test_missing_package_says_how_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(zkserver, "ZOOKEEPER_JAR", tmp_path / "no-such" / "zookeeper.jar")
    with pytest.raises(ZooKeeperNotInstalled, match="apt-get install zookeeper"):
        ZooKeeperServer(tmp_path / "zk").start()


def test_cli_ensemble_forms_a_quorum_survives_losing_one_server_and_stops_clean(tmp_path: Path) -> None:
    directory = tmp_path / "ens"
    try:
        started = zk_command("start", "--dir", str(directory), "--port", "0", "--ensemble", "3")
        assert started.returncode == 0, started.stderr
        connect_string = started.stdout.strip()
        assert len(connect_string.split(",")) == 3
        servers = servers_in(directory)
        modes = sorted(s.mode() or "down" for s in servers)
        assert modes == ["follower", "follower", "leader"]

        status = zk_command("status", "--dir", str(directory))
        assert status.returncode == 0 and status.stdout.count("pid ") == 3

        with ZooKeeperStore.from_url(f"zk://{connect_string}/q") as store:
            store.create("/before", b"1")
            leader = next(s for s in servers if s.mode() == "leader")
            leader.kill()
            # Two of three still form a quorum (after a new election): writes and reads go on.
            until_quorum_serves(lambda: store.set("/before", b"2"))
            assert store.get("/before")[0] == b"2"
        assert zk_command("status", "--dir", str(directory)).returncode == 1  # one server is down
    finally:
        stopped = zk_command("stop", "--dir", str(directory))
    assert stopped.returncode == 0
    assert zk_processes(directory) == []
    assert all(s.pid() is None for s in servers_in(directory))


def until_quorum_serves(operation: Callable[[], object], attempts: int = 120) -> None:
    """Retry an idempotent operation through the leader election that follows a leader's death."""
    for _ in range(attempts):
        try:
            operation()
            return
        except ConnectionLoss:
            time.sleep(0.5)
    operation()


def test_free_port_never_hands_out_a_port_twice() -> None:
    """Callers pick several ports before binding any (standalone: its bookies', broker's and control
    ports); a repeat would put two servers on one port."""
    ports = [zkserver.free_port() for _ in range(3000)]
    assert len(set(ports)) == len(ports)
