"""Project-wide fixtures. `zookeeper`: one real standalone ZooKeeper server for the whole test session."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator

import pytest

from impl.metadata.zkserver import ZooKeeperNotInstalled, ZooKeeperServer

# Every process a test starts dies with the suite, and the suite fails if one is left at its end.
pytest_plugins = ["tests.leftovers"]


@pytest.fixture(scope="session")
def zookeeper() -> Iterator[ZooKeeperServer]:
    """A real ZooKeeper (Debian's package, run with java) on a free 127.0.0.1 port; always stopped.

    Tests share it: isolate yourself with a chroot or a unique path (e.g. zk://HOST:PORT/t-<uuid>).
    """
    directory = tempfile.mkdtemp(prefix="pulsar-ref-zk-")
    server = ZooKeeperServer(directory, die_with_parent=True)
    try:
        try:
            server.start(timeout_s=90)
        except ZooKeeperNotInstalled as e:
            pytest.fail(f"{e}. Run `make test`: it installs Debian's zookeeper package.", pytrace=False)
        yield server
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)
