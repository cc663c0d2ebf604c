"""A subset of the managed-ledger tests on the durable backends: the embedded store and a real
ZooKeeper (the in-memory store runs the full suite in test_managed_ledger.py / test_cursor.py)."""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import time
import uuid
from collections.abc import Iterator

import pytest

from impl.broker.managed_ledger import (
    ManagedLedger,
    ManagedLedgerConfig,
    ManagedLedgerFencedError,
    ManagedLedgerState,
)
from impl.metadata.url import connect as connect_url

from .conftest import Cluster, FakeClock, make_cluster

TOPIC = "public/default/persistent/durable"


@pytest.fixture(params=["embedded", pytest.param("zk", marks=pytest.mark.zookeeper)])
def durable_cluster(request: pytest.FixtureRequest) -> Iterator[Cluster]:
    directory = None
    if request.param == "embedded":
        directory = tempfile.mkdtemp(prefix="pulsar-ref-ml-")
        url = f"embedded://{directory}"
    else:
        zookeeper = request.getfixturevalue("zookeeper")
        name = f"ml-{uuid.uuid4().hex[:12]}"
        with connect_url(f"zk://{zookeeper.connect_string}") as admin:
            admin.ensure_path(f"/{name}")
        url = f"zk://{zookeeper.connect_string}/{name}"
    cluster = make_cluster(lambda: connect_url(url, session_timeout_s=10), url)
    try:
        yield cluster
    finally:
        cluster.close()
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)


def open_ml(cluster: Cluster, config: ManagedLedgerConfig) -> ManagedLedger:
    """Every acknowledgement persisted before it returns, so a takeover right after an ack sees it."""
    store, bk = cluster.broker()
    clock = FakeClock()
    config = dataclasses.replace(config, cursor_persist_interval_s=0)
    return ManagedLedger.open(TOPIC, store, bk, config, clock, wall_clock=clock)


def test_takeover_with_rollover_cursor_and_trim(durable_cluster: Cluster) -> None:
    config = ManagedLedgerConfig(max_entries_per_ledger=3)
    old = open_ml(durable_cluster, config)
    positions = [old.add(b"m%d" % i) for i in range(7)]
    cursor = old.open_cursor("sub", "earliest")
    cursor.mark_delete(positions[3])
    cursor.delete([positions[5]])
    assert old.trim() == [positions[0].ledger_id]

    new = open_ml(durable_cluster, config)
    assert [d for _, d in new.read(None, 10)] == [b"m%d" % i for i in range(3, 7)]
    recovered = new.cursors()["sub"]
    assert recovered.mark_delete_position == positions[3]
    assert recovered.individually_deleted == [(positions[5], positions[5])]
    assert recovered.backlog() == 2
    with pytest.raises(ManagedLedgerFencedError):
        old.add(b"late")
    assert old.state is ManagedLedgerState.FENCED
    assert new.add(b"new").ledger_id > positions[-1].ledger_id


def test_an_expired_session_fences_the_managed_ledger(durable_cluster: Cluster) -> None:
    ml = open_ml(durable_cluster, ManagedLedgerConfig())
    ml.add(b"a")
    ml.store.expire_session()  # BookKeeper issue 4462: never write again after an expiry
    deadline = time.monotonic() + 10
    while ml.state is not ManagedLedgerState.FENCED and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ml.state is ManagedLedgerState.FENCED
    with pytest.raises(ManagedLedgerFencedError, match="metadata session expired"):
        ml.add(b"b")  # the bookies would still take it: the managed ledger refuses
    again = open_ml(durable_cluster, ManagedLedgerConfig())
    assert [d for _, d in again.read(None, 5)] == [b"a"]
