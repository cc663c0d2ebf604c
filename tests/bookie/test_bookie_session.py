"""A bookie process whose ZooKeeper session expires registers again on a new session (as a
BookKeeper bookie does), so clients can place ledgers on it again."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest

from impl.cluster.sessions import expire_node_session
from impl.metadata.registry import BookieRegistry
from impl.metadata.url import connect
from impl.metadata.zkserver import ZooKeeperServer
from tests.bookie.bookie_process import BookieProcess

pytestmark = [pytest.mark.processes, pytest.mark.zookeeper]


def test_a_bookie_registers_again_after_its_session_expired(zookeeper: ZooKeeperServer, tmp_path: Path) -> None:
    url = f"zk://{zookeeper.connect_string}/bookie-session-{uuid.uuid4().hex[:8]}"
    bookie = BookieProcess(tmp_path / "b", url)
    store = connect(url)
    try:
        registry = BookieRegistry(store)
        assert bookie.address in registry.writable_bookies()
        first = store.exists(f"/ledgers/available/{bookie.address}")
        assert first is not None
        expire_node_session(url, "bookie", bookie.address)
        deadline = time.monotonic() + 30
        while True:
            stat = store.exists(f"/ledgers/available/{bookie.address}")
            if stat is not None and stat.ephemeral_owner != first.ephemeral_owner:
                break  # registered again, by a new session
            assert time.monotonic() < deadline, "the bookie did not register again after its session expired"
            time.sleep(0.2)
        assert bookie.proc.poll() is None
    finally:
        store.close()
        bookie.ensure_stopped()
