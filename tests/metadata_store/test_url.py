"""URL dispatch: which backend each URL opens, and clear errors for the rest."""

from __future__ import annotations

import pytest

from impl.metadata import connect
from impl.metadata.embedded import EmbeddedStore
from impl.metadata.memory import MemoryStore, forget_server
from impl.metadata.store import InvalidArgument


def test_memory_urls_share_one_server_per_name():
    a, b, other = connect("memory://url-test"), connect("memory://url-test"), connect("memory://")
    try:
        assert isinstance(a, MemoryStore)
        a.create("/shared", b"x")
        assert b.get("/shared")[0] == b"x"
        assert other.exists("/shared") is None
        assert a.session_id != b.session_id
    finally:
        for store in (a, b, other):
            store.close()
        forget_server("url-test")


def test_embedded_url_opens_a_durable_store(tmp_path):
    store = connect(f"embedded://{tmp_path}/meta", session_timeout_s=5.0)
    try:
        assert isinstance(store, EmbeddedStore)
        assert (tmp_path / "meta").is_dir()
    finally:
        store.close()


@pytest.mark.parametrize(
    "url",
    ["", "/just/a/path", "http://x", "embedded://relative/dir", "embedded://", "memory://a/b", "zk://", "zk://nohost"],
)
def test_malformed_urls_name_the_accepted_forms(url):
    with pytest.raises(InvalidArgument) as raised:
        connect(url)
    message = str(raised.value)
    assert repr(url) in message and ("memory://" in message or "embedded:///" in message or "zk://" in message)
