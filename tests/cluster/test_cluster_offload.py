"""Tiered storage on a multi-broker cluster (issue 45): `pulsar-ref cluster up` with an offloader for every
broker and small ledgers; the official client produces, the topic's closed ledgers are offloaded (`PUT
.../offload` sent to the broker that does not own the topic, its 307 followed) and their bookie copies deleted
at once (deletion lag 0); then the owner is killed, the other broker takes the topic over and a reader from
the earliest reads every acknowledged message back, the offloaded ledgers from the store the first broker
wrote (a directory both share, or an S3 bucket on moto's server)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pulsar
import pytest

from impl.broker.web.admin_client import AdminClient, topic_path
from impl.web.http import HttpError
from pulsar_ref.commands.demo import LIFECYCLE_OPTIONS, plan_cluster
from tests.cluster.conftest import pulsar_ref, state
from tests.cluster.test_cluster_pulsar_client import brokers, topics_of
from tests.s3_server import S3Server, s3_server  # noqa: F401  (the fixture)
from tests.waiting import wait_for

pytestmark = [pytest.mark.processes, pytest.mark.zookeeper]

PER_LEDGER = 10
COUNT = 35  # three closed ledgers of 10, the current one with 5
LATEST = {"ledgerId": 2**63 - 1, "entryId": 2**63 - 1}  # offload every closed ledger
TOPIC = "persistent://public/default/tiered-takeover"
EXPECTED = [f"m{i}".encode() for i in range(COUNT)]


def ledgers(admin: AdminClient) -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = admin.call("GET", topic_path(TOPIC) + "/internalStats")["ledgers"]
    return found


def bookie_copy_exists(admin: AdminClient, ledger_id: int) -> bool:
    try:
        admin.call("GET", f"/view/ledger/{ledger_id}", raw=True)
    except HttpError as e:
        if e.status == 404:
            return False
        raise
    return True


def read_all(service_url: str, deadline_s: float, topic: str = TOPIC, compacted: bool = False) -> list[pulsar.Message]:
    """Every message of `topic` from the earliest, by a reader (of its compacted view with `compacted`); its
    creation retried (short operations, so that the client does not back off for long) until a broker serves
    the topic, e.g. until the other broker has taken it over."""
    client = pulsar.Client(service_url, operation_timeout_seconds=5)
    deadline = time.monotonic() + deadline_s
    try:
        while True:
            try:
                reader = client.create_reader(topic, pulsar.MessageId.earliest, is_read_compacted=compacted)
                break
            except pulsar.PulsarException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)
        got = []
        while reader.has_message_available():
            got.append(reader.read_next(10_000))
        reader.close()
        return got
    finally:
        client.close()


def until_done(admin: AdminClient, path: str, what: str) -> dict[str, Any]:
    """GET `path` (an offload's or a compaction's status) until it is no longer RUNNING; its last answer."""
    status: dict[str, Any] = {}

    def finished() -> bool:
        status.update(admin.call("GET", path))
        return status["status"] != "RUNNING"

    wait_for(finished, what, timeout_s=30)
    return status


def offload_across_a_takeover(cluster_dir: Path, objects: Callable[[], list[str]], *options: str) -> None:
    """Up with `options` (the offloader), produce, offload through the non-owner, kill the owner, read back
    from the survivor. `objects`: the names in the offload store."""
    up = pulsar_ref(
        "cluster", "up", "--dir", str(cluster_dir), "--bookies", "3", "--brokers", "2",
        "--max-entries-per-ledger", str(PER_LEDGER), "--offload-deletion-lag-ms", "0", *options,
    )  # fmt: skip
    assert up.returncode == 0, up.stderr
    assert "tiered storage: " in up.stderr
    status = pulsar_ref("cluster", "status", "--dir", str(cluster_dir))
    assert "offload:  " in status.stdout and "0 ms" in status.stdout, status.stdout
    first, second = brokers(cluster_dir)
    client = pulsar.Client(state(cluster_dir)["pulsar_service"], operation_timeout_seconds=30)
    try:
        producer = client.create_producer(TOPIC, batching_enabled=False)
        acked = [producer.send(m) for m in EXPECTED]
        assert len(acked) == COUNT
    finally:
        client.close()  # the topic stays loaded on its owner
    owner, survivor = (first, second) if topics_of(first, [TOPIC]) else (second, first)
    assert topics_of(owner, [TOPIC]) == [TOPIC]

    # Offload through the broker that does not own the topic: its 307 names the owner.
    other = AdminClient(f"http://127.0.0.1:{survivor['web_port']}")
    other.call("PUT", topic_path(TOPIC) + "/offload", body=LATEST)
    status_of = until_done(other, topic_path(TOPIC) + "/offload", "the offload to finish")
    assert status_of["status"] == "SUCCESS", status_of
    listed = ledgers(other)
    assert len(listed) == 4 and [x["entries"] for x in listed[:3]] == [PER_LEDGER] * 3, listed
    assert [x["offloaded"] for x in listed] == [True, True, True, False], listed
    offloaded = [x["ledgerId"] for x in listed[:3]]

    def deleted() -> bool:
        return all(x.get("offloadContext", {}).get("bookkeeperDeleted") for x in ledgers(other)[:3])

    wait_for(deleted, "the bookie copies to be deleted (lag 0)", timeout_s=20)
    assert not any(bookie_copy_exists(other, i) for i in offloaded)
    names = objects()
    assert all(any(n.endswith(f"-ledger-{i}") for n in names) for i in offloaded), (names, offloaded)

    kill = pulsar_ref("cluster", "kill", "--dir", str(cluster_dir), owner["name"])
    assert kill.returncode == 0, kill.stderr
    # Only the survivor: the reads after the takeover can come from nowhere but the offload store (the first
    # three ledgers) and the bookies (the last one, recovered by the new owner).
    read = read_all(f"pulsar://127.0.0.1:{survivor['pulsar_port']}", deadline_s=60)
    assert [m.data() for m in read] == EXPECTED
    assert topics_of(survivor, [TOPIC]) == [TOPIC]
    after = ledgers(other)
    assert [x["ledgerId"] for x in after[:3]] == offloaded
    assert all(x["offloaded"] and x["offloadContext"]["bookkeeperDeleted"] for x in after[:3]), after


def test_filesystem_offload_survives_the_owners_death(cluster_dir: Path) -> None:
    store = cluster_dir / "offload"  # `cluster up`'s default for the filesystem driver, shared by both brokers
    offload_across_a_takeover(cluster_dir, lambda: [p.name for p in store.iterdir()], "--offload-driver", "filesystem")
    assert state(cluster_dir)["offload"] == {"driver": "filesystem", "directory": str(store), "deletion_lag_ms": 0}


@pytest.mark.deep  # the S3 offloader is tested against moto in tests/broker; this adds the cluster's 30 s
def test_s3_offload_survives_the_owners_death(cluster_dir: Path, s3_server: S3Server) -> None:  # noqa: F811
    s3 = s3_server.client()
    s3.create_bucket(Bucket="cluster-offload")

    def objects() -> list[str]:
        return [o["Key"] for o in s3.list_objects_v2(Bucket="cluster-offload").get("Contents", [])]

    # The brokers find moto's credentials in the environment the s3_server fixture set (inherited).
    offload_across_a_takeover(
        cluster_dir, objects, "--offload-driver", "aws-s3", "--s3-offload-bucket", "cluster-offload",
        "--s3-offload-endpoint", s3_server.endpoint, "--s3-offload-region", "us-east-1",
    )  # fmt: skip


@pytest.mark.parametrize(
    ("options", "says"),
    [
        (["--offload-driver", "aws-s3"], "needs --s3-offload-bucket"),
        (["--offload-driver", "filesystem", "--s3-offload-bucket", "b"], "with the filesystem offloader"),
        (["--offload-driver", "S3", "--s3-offload-bucket", "b", "--offload-dir", "."], "writes to a bucket"),
        (["--offload-dir", "no/such/dir"], "no such directory"),
        (["--offload-deletion-lag-ms", "0"], "needs an offloader"),
        (["--offload-driver", "filesystem", "--offload-deletion-lag-ms", "-1"], "must be >= 0"),
        (["--offload-driver", "filesystem", "--brokers", "0"], "without brokers"),
        (["--max-entries-per-ledger", "0"], "must be >= 1"),
    ],
)
def test_up_refuses_bad_offload_options(tmp_path: Path, options: list[str], says: str) -> None:
    refused = pulsar_ref("cluster", "up", "--dir", str(tmp_path / "c"), *options, timeout=30)
    assert refused.returncode == 2 and says in refused.stderr, refused.stderr
    assert not (tmp_path / "c").exists()  # refused before anything was planned or started


def test_demo_cluster_plans_its_brokers_with_a_shared_offloader(tmp_path: Path) -> None:
    """`demo --cluster` (whose lifecycle is on by default): the `cluster up --offload-driver filesystem` layout,
    with the demo's small ledgers and no deletion lag; without the lifecycle, no offloader (planned only)."""
    cluster = plan_cluster(tmp_path / "c", 0, lifecycle=True)
    assert cluster.offload == {"driver": "filesystem", "directory": str(tmp_path / "c" / "offload")}
    assert (tmp_path / "c" / "offload").is_dir()
    brokers = [n for n in cluster.state["nodes"] if n["role"] == "broker"]
    assert len(brokers) == 2
    for broker in brokers:
        command = " ".join(broker["command"])
        assert " ".join(LIFECYCLE_OPTIONS) in command
        assert f"--offload-driver filesystem --offload-dir {tmp_path / 'c' / 'offload'}" in command
    assert plan_cluster(tmp_path / "plain", 0, lifecycle=False).offload is None
