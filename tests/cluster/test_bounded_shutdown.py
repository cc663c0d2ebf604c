"""Issue 49 item 7: SIGTERM stops a broker, a bookie and a proxy within a bound whatever ZooKeeper's state.

A graceful stop talks to ZooKeeper (unregister, close cursors and ledgers, release bundles); with ZooKeeper
killed or stopped (SIGSTOP) each call waits for its deadline, and a broker whose ZooKeeper had died once
stayed up for over a minute until SIGKILL. `--shutdown-timeout` (Pulsar's brokerShutdownTimeoutMs, default
60 s) bounds the whole stop: past it the process halts (exit code 3). Here the bound is 3 s; each process
must be gone within BOUND_S + SLACK_S of its SIGTERM (the slack covers interpreter start-up of the signal
handler and a loaded machine, not the stop itself).
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from impl.metadata.zkserver import ZooKeeperServer
from impl.shutdown import HALT_EXIT_CODE
from tests.processes import start_listening

BOUND_S = 3.0
SLACK_S = 12.0


@pytest.fixture
def own_zookeeper(tmp_path: Path) -> Iterator[ZooKeeperServer]:
    """A ZooKeeper of this test's own: it is killed or paused, which the session-wide one must not be."""
    server = ZooKeeperServer(tmp_path / "zk", die_with_parent=True)
    server.start(timeout_s=90)
    try:
        yield server
    finally:
        pid = server.pid()
        if pid is not None:
            os.kill(pid, signal.SIGCONT)
        server.kill()


@pytest.mark.parametrize("zookeeper_state", ["killed", "paused"])
def test_sigterm_stops_broker_bookies_and_proxy_within_the_bound_when_zookeeper_is_gone(
    own_zookeeper: ZooKeeperServer, tmp_path: Path, zookeeper_state: str
) -> None:
    metadata = f"zk://{own_zookeeper.connect_string}/bounded"
    bound = ("--shutdown-timeout", str(BOUND_S))
    procs: list[subprocess.Popen[str]] = []
    try:
        for i in range(2):
            bookie, _, _ = start_listening(
                ["bookie", "--metadata", metadata, "--data", str(tmp_path / f"b{i}"), "--port", "0", *bound]
            )
            procs.append(bookie)
        quorums = ("--ensemble", "2", "--write-quorum", "2", "--ack-quorum", "2")
        broker, _, banner = start_listening(
            ["broker", "--metadata", metadata, "--port", "0", "--web-port", "0", *quorums, *bound]
        )
        procs.append(broker)
        service_url = banner.split("Pulsar clients: ")[1].split(";")[0]
        proxy, _, _ = start_listening(["proxy", "--metadata", metadata, "--port", "0", "--web-port", "0", *bound])
        procs.append(proxy)
        # A loaded topic: the broker's stop closes its cursor and ledger through ZooKeeper (where it hung).
        client = pulsar.Client(service_url)
        try:
            producer = client.create_producer("persistent://public/default/bounded")
            producer.send(b"x")
            client.subscribe("persistent://public/default/bounded", "s")
        finally:
            client.close()

        zk_pid = own_zookeeper.pid()
        assert zk_pid is not None
        if zookeeper_state == "killed":
            own_zookeeper.kill()
        else:
            os.kill(zk_pid, signal.SIGSTOP)
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                code = proc.wait(BOUND_S + SLACK_S)
            except subprocess.TimeoutExpired:
                pytest.fail(f"{proc.args[3]} still runs {BOUND_S + SLACK_S:g} s after SIGTERM (bound {BOUND_S:g} s)")
            assert code in (0, HALT_EXIT_CODE), (proc.args, code)
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
