"""Sessions (close, expiry, listeners) and bad input, on every backend."""

from __future__ import annotations

import pytest

from impl.metadata.store import (
    MAX_DATA_BYTES,
    BadVersion,
    Check,
    Create,
    InvalidArgument,
    MetadataStore,
    MultiFailed,
    NoChildrenForEphemerals,
    NodeExists,
    NoNode,
    NotEmpty,
    SessionExpired,
    SessionState,
    SetData,
)

from .events import Inbox


def still_usable(store: MetadataStore, path: str = "/still-usable") -> None:
    store.create(path, b"ok")
    assert store.get(path)[0] == b"ok"
    assert store.set(path, b"ok2", 0).version == 1
    store.delete(path, 1)
    assert store.exists(path) is None


def test_expiry_deletes_ephemerals_tells_listeners_and_fences_the_old_session(sessions):
    a, b = sessions
    b.create("/eph", b"mine", ephemeral=True)
    b.create("/persistent", b"stays")
    assert a.exists("/eph").ephemeral_owner == b.session_id
    states: Inbox[SessionState] = Inbox()
    b.add_session_listener(states)
    b.expire_session()
    assert SessionState.EXPIRED in states.wait_for(1)
    assert a.exists("/eph") is None
    assert a.get("/persistent")[0] == b"stays"
    for call in (lambda: b.get("/persistent"), lambda: b.set("/persistent", b"x"), lambda: b.create("/new")):
        with pytest.raises(SessionExpired):
            call()
    assert a.exists("/new") is None
    still_usable(a)


def test_close_deletes_ephemerals_and_is_idempotent(sessions):
    a, b = sessions
    b.create("/e1", ephemeral=True)
    b.create("/e2", ephemeral=True)
    b.close()
    b.close()
    assert a.children("/") == []
    still_usable(a)


def test_invalid_paths_are_rejected_before_anything_changes(sessions):
    a, _ = sessions
    for bad in ["relative", "/trailing/", "/double//slash", "/dot/./x", "/dotdot/../x", "/nul\x00byte", ""]:
        with pytest.raises(InvalidArgument) as raised:
            a.create(bad, b"x")
        assert repr(bad) in str(raised.value), "the error must name the offending path"
        with pytest.raises(InvalidArgument):
            a.get(bad)
        with pytest.raises(InvalidArgument):
            a.set(bad, b"x")
        with pytest.raises(InvalidArgument):
            a.delete(bad)
    assert a.children("/") == []
    still_usable(a)


def test_oversize_data_is_rejected_and_nothing_is_written(sessions):
    a, _ = sessions
    a.create("/big", b"small")
    too_big = b"x" * (MAX_DATA_BYTES + 1)
    with pytest.raises(InvalidArgument, match="limit"):
        a.set("/big", too_big)
    with pytest.raises(InvalidArgument, match="limit"):
        a.create("/big2", too_big)
    data, stat = a.get("/big")
    assert (data, stat.version) == (b"small", 0)
    assert a.exists("/big2") is None
    a.set("/big", b"y" * MAX_DATA_BYTES)  # exactly the limit is accepted
    assert a.get("/big")[1].data_length == MAX_DATA_BYTES
    still_usable(a)


def test_structural_errors_are_typed_and_name_the_path(sessions):
    a, b = sessions
    a.create("/parent")
    a.create("/parent/child", b"v0")
    with pytest.raises(NotEmpty) as raised:
        a.delete("/parent")
    assert raised.value.path == "/parent"
    with pytest.raises(NodeExists):
        a.create("/parent")
    with pytest.raises(NoNode):
        a.create("/missing/child")
    with pytest.raises(NoNode):
        a.delete("/missing")
    with pytest.raises(NoNode):
        a.set("/missing", b"x")
    with pytest.raises(BadVersion) as bad_version:
        a.set("/parent/child", b"v1", expected_version=3)
    assert bad_version.value.path == "/parent/child"
    with pytest.raises(BadVersion):
        a.delete("/parent/child", expected_version=1)
    b.create("/eph", ephemeral=True)
    with pytest.raises(NoChildrenForEphemerals):
        a.create("/eph/child")
    with pytest.raises(NoChildrenForEphemerals):
        b.create("/eph/child", sequential=True)
    # The failed multi applied nothing, and names its failing op.
    with pytest.raises(MultiFailed) as failed:
        a.multi([Create("/in-multi"), SetData("/parent/child", b"x", 7), Check("/parent", 0)])
    assert failed.value.index == 1 and isinstance(failed.value.cause, BadVersion)
    assert a.exists("/in-multi") is None
    assert a.get("/parent/child") == (b"v0", a.exists("/parent/child"))
    assert a.get("/parent/child")[1].version == 0
    a.delete("/parent/child", 0)
    a.delete("/parent", 0)
    still_usable(a)
    still_usable(b, "/still-usable-b")
