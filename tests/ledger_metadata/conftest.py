"""`connect`: sessions on one fresh store per test, via the URL dispatcher: memory, embedded, real ZooKeeper."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator

import pytest

from impl.metadata.store import MetadataStore
from impl.metadata.url import connect as connect_url

Connect = Callable[[], MetadataStore]


@pytest.fixture(params=["memory", "embedded", pytest.param("zk", marks=pytest.mark.zookeeper)])
def connect(request: pytest.FixtureRequest) -> Iterator[Connect]:
    opened: list[MetadataStore] = []
    directory = None
    name = f"ledger-metadata-{uuid.uuid4().hex}"
    if request.param == "memory":
        url = f"memory://{name}"
    elif request.param == "embedded":
        directory = tempfile.mkdtemp(prefix="pulsar-ref-ledger-metadata-")
        url = f"embedded://{directory}"
    else:
        zookeeper = request.getfixturevalue("zookeeper")  # the real server of tests/conftest.py
        url = f"zk://{zookeeper.connect_string}/{name}"  # a fresh chroot per test
        with connect_url(f"zk://{zookeeper.connect_string}") as admin:
            admin.ensure_path(f"/{name}")

    def open_session() -> MetadataStore:
        store = connect_url(url)
        opened.append(store)
        return store

    try:
        yield open_session
    finally:
        for store in opened:
            store.close()
        if directory is not None:
            shutil.rmtree(directory, ignore_errors=True)
        elif request.param == "memory":
            from impl.metadata.memory import forget_server

            forget_server(name)
