"""One fixture, three backends: every contract test runs on memory, embedded and a real ZooKeeper.

`backend` gives a factory of *isolated* stores: each `backend.fresh()` is a new,
empty namespace (a new MemoryServer, a new SQLite directory, a new ZooKeeper chroot)
and returns a `connect()` that opens client sessions on it.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

from impl.metadata.store import MetadataStore

Connect = Callable[[], MetadataStore]


@dataclass
class Backend:
    name: str
    new_namespace: Callable[[], Connect]
    cleanups: list[Callable[[], None]] = field(default_factory=list)

    def fresh(self) -> Connect:
        return self.new_namespace()


def memory_backend() -> Backend:
    from impl.metadata.memory import MemoryServer

    def new_namespace() -> Connect:
        return MemoryServer().connect

    return Backend("memory", new_namespace)


def embedded_backend() -> Backend:
    from impl.metadata.embedded import EmbeddedStore

    directories: list[str] = []

    def new_namespace() -> Connect:
        directory = tempfile.mkdtemp(prefix="pulsar-ref-embedded-")
        directories.append(directory)
        return lambda: EmbeddedStore(directory, session_timeout_s=10.0)

    def remove_directories() -> None:
        for directory in directories:
            shutil.rmtree(directory, ignore_errors=True)

    return Backend("embedded", new_namespace, [remove_directories])


def zk_backend(request: pytest.FixtureRequest) -> Backend:
    zookeeper = request.getfixturevalue("zookeeper")  # the session fixture in tests/conftest.py
    from kazoo.client import KazooClient

    from impl.metadata.url import connect

    def new_namespace() -> Connect:
        chroot = f"/t-{uuid.uuid4().hex}"
        admin = KazooClient(hosts=zookeeper.connect_string)
        admin.start(timeout=30)
        try:
            admin.ensure_path(chroot)
        finally:
            admin.stop()
            admin.close()
        url = f"zk://{zookeeper.connect_string}{chroot}"
        return lambda: connect(url, session_timeout_s=10.0)

    return Backend("zk", new_namespace)


BACKEND_PARAMS = ["memory", "embedded", pytest.param("zk", marks=pytest.mark.zookeeper)]


@pytest.fixture(params=BACKEND_PARAMS)
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    made = {"memory": memory_backend, "embedded": embedded_backend}.get(request.param)
    chosen = made() if made else zk_backend(request)
    try:
        yield chosen
    finally:
        for cleanup in chosen.cleanups:
            cleanup()


@pytest.fixture
def sessions(backend: Backend) -> Iterator[tuple[MetadataStore, MetadataStore]]:
    """Two sessions on one fresh namespace of the backend; both closed afterwards."""
    connect = backend.fresh()
    a, b = connect(), connect()
    try:
        yield a, b
    finally:
        a.close()
        b.close()
