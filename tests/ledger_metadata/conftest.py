"""`connect`: opens sessions on one fresh store per test, through the URL dispatcher, for each backend."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator

import pytest

from impl.metadata.store import MetadataStore
from impl.metadata.url import connect as connect_url

Connect = Callable[[], MetadataStore]


@pytest.fixture(params=["memory", "embedded"])
def connect(request: pytest.FixtureRequest) -> Iterator[Connect]:
    opened: list[MetadataStore] = []
    directory = None
    if request.param == "memory":
        name = f"ledger-metadata-{uuid.uuid4().hex}"
        url = f"memory://{name}"
    else:
        directory = tempfile.mkdtemp(prefix="pulsar-ref-ledger-metadata-")
        url = f"embedded://{directory}"

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
        else:
            from impl.metadata.memory import forget_server

            forget_server(name)
