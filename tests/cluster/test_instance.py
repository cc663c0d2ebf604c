"""`pulsar-ref instance` with real processes: a configuration-store ZooKeeper and two clusters (each its
own ZooKeeper, bookies and a broker), a third cluster joining with `cluster up --configuration-store`,
and `down` leaving no process behind, also after an interrupted `up`."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from impl.broker.web.admin_client import AdminClient
from tests.cluster.conftest import REPO, processes_of, processes_under, pulsar_ref

pytestmark = [pytest.mark.processes, pytest.mark.zookeeper]


def instance_processes(directory: Path) -> list[psutil.Process]:
    """Every live process of the instance: those naming its directory, and those naming a metadata store
    or the configuration store of one of its parts (brokers are started with the URLs only)."""
    found = {p.pid: p for p in processes_under(directory)}
    urls = []
    for part in sorted(directory.glob("*/cluster.json")):
        found |= {p.pid: p for p in processes_of(part.parent)}
        with contextlib.suppress(OSError, ValueError, KeyError):
            urls.append(json.loads(part.read_text())["metadata"])
    with contextlib.suppress(OSError, ValueError, KeyError):
        urls.append(json.loads((directory / "instance.json").read_text())["configuration_store"])
    for url in filter(None, urls):
        found |= {p.pid: p for p in processes_under(url)}  # a string: a Path would fold zk:// into zk:/
    return list(found.values())


def test_instance_up_status_join_and_down(tmp_path: Path) -> None:
    directory, joined = tmp_path / "instance", tmp_path / "joined"
    up = pulsar_ref("instance", "up", "--dir", str(directory), "--clusters", "2")
    try:
        assert up.returncode == 0, up.stderr
        lines = [line.split() for line in up.stdout.splitlines()]
        assert [line[0] for line in lines] == ["cluster-1", "cluster-2"]
        urls = {name: (pulsar, http) for name, pulsar, http in lines}
        assert all(p.startswith("pulsar://127.0.0.1:") and h.startswith("http://127.0.0.1:") for p, h in urls.values())

        roles = {p.cmdline()[3] for p in instance_processes(directory)}  # python -m pulsar_ref.cli ROLE
        assert {"bookie", "broker"} <= roles  # the helper sees every kind of process it must see gone
        status = pulsar_ref("instance", "status", "--dir", str(directory))
        assert status.returncode == 0, status.stdout + status.stderr
        for part in ("configuration-store", "cluster-1", "cluster-2"):
            assert f"\n{part}\n" in status.stdout
        assert status.stdout.count(" up ") == 1 + 2 * 4  # the configuration ZooKeeper; ZooKeeper, 2 bookies, broker

        one, two = AdminClient(urls["cluster-1"][1]), AdminClient(urls["cluster-2"][1])
        assert two.call("GET", "/admin/v2/clusters") == ["cluster-1", "cluster-2"]
        data = one.call("GET", "/admin/v2/clusters/cluster-2")
        assert (data["brokerServiceUrl"], data["serviceUrl"]) == urls["cluster-2"]
        one.call("PUT", "/admin/v2/tenants/geo", {"allowedClusters": ["cluster-1", "cluster-2"]})
        one.call("PUT", "/admin/v2/namespaces/geo/ns")
        two.call("POST", "/admin/v2/namespaces/geo/ns/replication", ["cluster-1", "cluster-2"])
        assert one.call("GET", "/admin/v2/namespaces/geo/ns/replication") == ["cluster-1", "cluster-2"]

        # A third cluster joins the instance by naming its configuration store.
        config = json.loads((directory / "instance.json").read_text())["configuration_store"]
        join = pulsar_ref(
            *("cluster", "up", "--dir", str(joined), "--name", "east", "--configuration-store", config),
            *("--bookies", "1", "--brokers", "1", "--ensemble", "1", "--write-quorum", "1", "--ack-quorum", "1"),
        )
        assert join.returncode == 0, join.stderr
        east_web = json.loads((joined / "cluster.json").read_text())["web_services"][0]
        assert AdminClient(east_web).call("GET", "/admin/v2/clusters") == ["cluster-1", "cluster-2", "east"]
        assert AdminClient(east_web).call("GET", "/admin/v2/namespaces/geo") == ["geo/ns"]
        assert pulsar_ref("cluster", "down", "--dir", str(joined)).returncode == 0
    finally:
        pulsar_ref("cluster", "down", "--dir", str(joined))
        down = pulsar_ref("instance", "down", "--dir", str(directory))
    assert down.returncode == 0, down.stderr
    assert instance_processes(directory) == []
    assert processes_of(joined) == []
    stopped = pulsar_ref("instance", "status", "--dir", str(directory), timeout=30)
    assert stopped.returncode == 1 and stopped.stdout.count(" down ") == 1 + 2 * 4


def test_instance_down_after_an_interrupted_up(tmp_path: Path) -> None:
    """`up` killed half-way, with no chance to clean up: `down` still finds and stops what it launched."""
    directory = tmp_path / "instance"
    proc = subprocess.Popen(
        [sys.executable, "-m", "pulsar_ref.cli", "instance", "up", "--dir", str(directory), "--clusters", "2"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=REPO,
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not processes_under(directory / "cluster-1" / "bookie-1"):
        time.sleep(0.05)
    proc.kill()
    proc.wait()
    assert instance_processes(directory)  # the configuration store and cluster-1's nodes outlived their launcher
    again = pulsar_ref("instance", "up", "--dir", str(directory))
    assert again.returncode == 1 and "instance down" in again.stderr  # no second instance over the first
    down = pulsar_ref("instance", "down", "--dir", str(directory))
    assert down.returncode == 0, down.stderr
    assert instance_processes(directory) == []
