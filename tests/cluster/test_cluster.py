"""`pulsar-ref cluster` with real ZooKeeper and bookie processes: up, status, fault verbs, down."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import psutil
import pytest
from kazoo.client import KazooClient

from tests.cluster.conftest import free_port_block, processes_of, processes_under, pulsar_ref, state

pytestmark = [pytest.mark.processes, pytest.mark.zookeeper]


def status_rows(directory: Path) -> tuple[int, dict[str, list[str]]]:
    result = pulsar_ref("cluster", "status", "--dir", str(directory))
    rows = {}
    for line in result.stdout.splitlines()[1:]:
        fields = line.split()
        if fields and fields[0] in {n["name"] for n in state(directory)["nodes"] + state(directory)["zookeepers"]}:
            rows[fields[0]] = fields[1:]
    return result.returncode, rows


def registration_session(metadata: str, bookie: str) -> int | None:
    """The session holding the bookie's registration node (None: not registered)."""
    hosts, chroot = metadata[len("zk://") :].split("/", 1)
    zk = KazooClient(hosts=hosts)
    zk.start(timeout=15)
    try:
        stat = zk.exists(f"/{chroot}/ledgers/available/{bookie}")
        return None if stat is None else int(stat.ephemeralOwner)
    finally:
        zk.stop()
        zk.close()


def registers_again(metadata: str, bookie: str, old_session: int | None, timeout_s: float = 30) -> bool:
    """The bookie registered again on a session other than `old_session` (as BookKeeper's bookie does)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        session = registration_session(metadata, bookie)
        if session is not None and session != old_session:
            return True
        time.sleep(0.2)
    return False


def registered_bookies(metadata: str) -> list[str]:
    hosts, chroot = metadata[len("zk://") :].split("/", 1)
    zk = KazooClient(hosts=hosts)
    zk.start(timeout=15)
    try:
        return sorted(c for c in zk.get_children(f"/{chroot}/ledgers/available") if c != "readonly")
    finally:
        zk.stop()
        zk.close()


def test_up_status_faults_and_down_with_zookeeper_and_bookies(cluster_dir: Path) -> None:
    up = pulsar_ref("cluster", "up", "--dir", str(cluster_dir), "--bookies", "3", "--brokers", "0")
    assert up.returncode == 0, up.stderr
    cluster = state(cluster_dir)
    metadata = cluster["metadata"]
    assert up.stdout.strip() == metadata and metadata.startswith("zk://127.0.0.1:")
    assert [n["role"] for n in cluster["nodes"]] == ["bookie"] * 3
    assert all(n["pid"] for n in cluster["nodes"] + cluster["zookeepers"])
    bookie_ids = sorted(f"127.0.0.1:{n['port']}" for n in cluster["nodes"])
    assert registered_bookies(metadata) == bookie_ids

    code, rows = status_rows(cluster_dir)
    assert code == 0 and all(r[1] == "up" for r in rows.values()), rows
    # each bookie's id, as ledger ensembles and the registry name it (issue 26)
    assert sorted(rows[n["name"]][4] for n in cluster["nodes"]) == bookie_ids

    # kill: the process is gone, status says so and fails
    old_pid = cluster["nodes"][0]["pid"]
    kill = pulsar_ref("cluster", "kill", "--dir", str(cluster_dir), "bookie-1")
    assert kill.returncode == 0, kill.stderr
    assert not psutil.pid_exists(old_pid) or psutil.Process(old_pid).status() == psutil.STATUS_ZOMBIE
    code, rows = status_rows(cluster_dir)
    assert code == 1 and rows["bookie-1"][1] == "down"

    # restart: same port and data directory, registered again (its stale session is cleared)
    restart = pulsar_ref("cluster", "restart", "--dir", str(cluster_dir), "bookie-1")
    assert restart.returncode == 0, restart.stderr
    after = state(cluster_dir)
    assert after["nodes"][0]["port"] == cluster["nodes"][0]["port"]
    assert after["nodes"][0]["pid"] not in (None, old_pid)
    assert registered_bookies(metadata) == bookie_ids

    # pause / resume: SIGSTOP and SIGCONT
    assert pulsar_ref("cluster", "pause", "--dir", str(cluster_dir), "bookie-2").returncode == 0
    pid2 = after["nodes"][1]["pid"]
    assert psutil.Process(pid2).status() == psutil.STATUS_STOPPED
    code, rows = status_rows(cluster_dir)
    assert code == 1 and rows["bookie-2"][1] == "paused"
    assert pulsar_ref("cluster", "resume", "--dir", str(cluster_dir), "bookie-2").returncode == 0
    assert psutil.Process(pid2).status() != psutil.STATUS_STOPPED

    # expire-session: ZooKeeper ends the bookie's session and its registration with it; the process
    # lives on and registers again on a new session
    bookie3 = f"127.0.0.1:{cluster['nodes'][2]['port']}"
    before = registration_session(metadata, bookie3)
    assert before is not None
    expire = pulsar_ref("cluster", "expire-session", "--dir", str(cluster_dir), "bookie-3")
    assert expire.returncode == 0, expire.stderr
    assert "expired" in expire.stdout
    assert registers_again(metadata, bookie3, before)
    assert psutil.pid_exists(cluster["nodes"][2]["pid"])
    # ... and a ZooKeeper server cannot have its session expired
    assert pulsar_ref("cluster", "expire-session", "--dir", str(cluster_dir), "zk-1").returncode == 1

    # logs
    logs = pulsar_ref("cluster", "logs", "--dir", str(cluster_dir), "bookie-1")
    assert logs.returncode == 0 and "listening" in logs.stdout

    assert processes_under(cluster_dir)
    down = pulsar_ref("cluster", "down", "--dir", str(cluster_dir))
    assert down.returncode == 0, down.stderr
    assert processes_of(cluster_dir) == []


def test_down_leaves_nothing_after_a_failed_up(cluster_dir: Path) -> None:
    base = free_port_block(3)
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", base + 2))  # bookie-2's port: ZooKeeper and bookie-1 start, then bookie-2 fails
    blocker.listen()
    try:
        up = pulsar_ref(
            "cluster", "up", "--dir", str(cluster_dir), "--bookies", "2", "--brokers", "0", "--base-port", str(base)
        )
    finally:
        blocker.close()
    assert up.returncode == 1
    assert "bookie-2" in up.stderr and "start-up failed" in up.stderr
    assert processes_of(cluster_dir) == []  # `up` cleaned up after itself
    down = pulsar_ref("cluster", "down", "--dir", str(cluster_dir))
    assert down.returncode == 0
    assert processes_of(cluster_dir) == []


def test_down_after_an_interrupted_up(cluster_dir: Path) -> None:
    """`up` killed half-way (no chance to clean up): `down` still finds and stops what it launched."""
    import subprocess
    import sys

    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pulsar_ref.cli",
            "cluster",
            "up",
            "--dir",
            str(cluster_dir),
            "--bookies",
            "2",
            "--brokers",
            "0",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not processes_under(cluster_dir / "zookeeper"):
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    assert processes_under(cluster_dir)  # the ZooKeeper JVM outlived its launcher
    down = pulsar_ref("cluster", "down", "--dir", str(cluster_dir))
    assert down.returncode == 0, down.stderr
    assert processes_of(cluster_dir) == []


def test_three_zookeepers_survive_a_member_restart(cluster_dir: Path) -> None:
    up = pulsar_ref("cluster", "up", "--dir", str(cluster_dir), "--zookeepers", "3", "--bookies", "1", "--brokers", "0")
    assert up.returncode == 0, up.stderr
    metadata = up.stdout.strip()
    assert metadata.count("127.0.0.1:") == 3
    code, rows = status_rows(cluster_dir)
    assert code == 0
    assert sorted(rows[f"zk-{i}"][-1] for i in (1, 2, 3)) == ["follower", "follower", "leader"]
    old_pid = state(cluster_dir)["zookeepers"][1]["pid"]
    restart = pulsar_ref("cluster", "restart", "--dir", str(cluster_dir), "zk-2")
    assert restart.returncode == 0, restart.stderr
    assert state(cluster_dir)["zookeepers"][1]["pid"] != old_pid
    code, rows = status_rows(cluster_dir)
    assert code == 0 and rows["zk-2"][-1] in ("follower", "leader")
    # the bookie kept its registration through the member restart; its session can still be ended by force
    bookie1 = f"127.0.0.1:{state(cluster_dir)['nodes'][0]['port']}"
    assert registered_bookies(metadata) == [bookie1]
    before = registration_session(metadata, bookie1)
    assert pulsar_ref("cluster", "expire-session", "--dir", str(cluster_dir), "bookie-1").returncode == 0
    assert registers_again(metadata, bookie1, before)
    assert pulsar_ref("cluster", "down", "--dir", str(cluster_dir)).returncode == 0
    assert processes_of(cluster_dir) == []


def test_standalone_topology_faults_in_place_and_whole_process(cluster_dir: Path) -> None:
    up = pulsar_ref("cluster", "up", "--dir", str(cluster_dir), "--standalone")
    assert up.returncode == 0, up.stderr
    assert up.stdout.strip().startswith("pulsar://127.0.0.1:")
    code, rows = status_rows(cluster_dir)
    assert code == 0 and rows["standalone-1"][1] == "up"
    result = pulsar_ref("cluster", "status", "--dir", str(cluster_dir))
    in_process = {line.split()[0]: line.split()[2] for line in result.stdout.splitlines()[1:] if line[:1] == "b"}
    assert in_process == {"bookie-0": "up", "bookie-1": "up", "bookie-2": "up", "broker": "up"}, result.stdout
    pid = state(cluster_dir)["nodes"][0]["pid"]

    # a bookie and the broker are stopped and started in place: the process stays the same
    for node in ("bookie-0", "broker"):
        kill = pulsar_ref("cluster", "kill", "--dir", str(cluster_dir), node)
        assert kill.returncode == 0 and "inside standalone-1" in kill.stdout, kill.stderr
        down = pulsar_ref("cluster", "status", "--dir", str(cluster_dir))
        assert down.returncode == 1 and any(line.split()[:3] == [node, line.split()[1], "down"] for line in
                                            down.stdout.splitlines()), down.stdout  # fmt: skip
        assert pulsar_ref("cluster", "restart", "--dir", str(cluster_dir), node).returncode == 0
    assert pulsar_ref("cluster", "expire-session", "--dir", str(cluster_dir), "broker").returncode == 0
    assert pulsar_ref("cluster", "pause", "--dir", str(cluster_dir), "bookie-1").returncode == 1  # not a process
    assert state(cluster_dir)["nodes"][0]["pid"] == pid
    assert pulsar_ref("cluster", "status", "--dir", str(cluster_dir)).returncode == 0

    # the whole process: kill -9 and start again on the same data (waits out its stale registrations)
    assert pulsar_ref("cluster", "kill", "--dir", str(cluster_dir), "standalone-1").returncode == 0
    restart = pulsar_ref("cluster", "restart", "--dir", str(cluster_dir), "standalone-1")
    assert restart.returncode == 0, restart.stderr
    assert state(cluster_dir)["nodes"][0]["pid"] not in (None, pid)
    assert pulsar_ref("cluster", "down", "--dir", str(cluster_dir)).returncode == 0
    assert processes_of(cluster_dir) == []
