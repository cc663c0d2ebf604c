"""Data and child watches fire once, with ZooKeeper's event types, on every backend.

"Once" is checked with a sentinel: after the second mutation we trigger a fresh watch
on another node and wait for it; each backend delivers a session's events in order,
so by then a second firing of the first watch would have arrived.
"""

from __future__ import annotations

import pytest

from impl.metadata.store import Check, Create, EventType, MetadataStore, MultiFailed, SetData, WatchedEvent

from .events import Inbox


def sentinel(watcher: MetadataStore, writer: MetadataStore, path: str = "/sentinel") -> None:
    """Deliver one event through `watcher` after everything `writer` did so far."""
    inbox: Inbox[WatchedEvent] = Inbox()
    assert watcher.exists(path, watch=inbox) is None
    writer.create(path)
    assert inbox.wait_for(1) == [WatchedEvent(EventType.CREATED, path)]
    writer.delete(path)


def test_data_watch_from_get_fires_once_on_change(sessions):
    a, b = sessions
    a.create("/n", b"0")
    inbox: Inbox[WatchedEvent] = Inbox()
    a.get("/n", watch=inbox)
    b.set("/n", b"1")
    assert inbox.wait_for(1) == [WatchedEvent(EventType.CHANGED, "/n")]
    b.set("/n", b"2")
    sentinel(a, b)
    assert inbox.items == [WatchedEvent(EventType.CHANGED, "/n")]


def test_exists_watch_on_missing_node_fires_created(sessions):
    a, b = sessions
    inbox: Inbox[WatchedEvent] = Inbox()
    assert a.exists("/later", watch=inbox) is None
    b.create("/later", b"x")
    assert inbox.wait_for(1) == [WatchedEvent(EventType.CREATED, "/later")]
    b.set("/later", b"y")
    sentinel(a, b)
    assert inbox.items == [WatchedEvent(EventType.CREATED, "/later")]


def test_child_watch_fires_once_on_child_change_not_on_data_change(sessions):
    a, b = sessions
    a.create("/p")
    inbox: Inbox[WatchedEvent] = Inbox()
    assert a.children("/p", watch=inbox) == []
    b.set("/p", b"data does not trigger a child watch")
    b.create("/p/c1")
    assert inbox.wait_for(1) == [WatchedEvent(EventType.CHILD, "/p")]
    b.create("/p/c2")
    sentinel(a, b)
    assert inbox.items == [WatchedEvent(EventType.CHILD, "/p")]
    # A new child watch sees a removal too.
    assert a.children("/p", watch=inbox) == ["c1", "c2"]
    b.delete("/p/c1")
    assert inbox.wait_for(2)[1] == WatchedEvent(EventType.CHILD, "/p")


def test_delete_fires_data_and_child_watches_as_deleted(sessions):
    a, b = sessions
    a.create("/gone", b"x")
    data_inbox: Inbox[WatchedEvent] = Inbox()
    child_inbox: Inbox[WatchedEvent] = Inbox()
    a.get("/gone", watch=data_inbox)
    a.children("/gone", watch=child_inbox)
    b.delete("/gone")
    assert data_inbox.wait_for(1) == [WatchedEvent(EventType.DELETED, "/gone")]
    assert child_inbox.wait_for(1) == [WatchedEvent(EventType.DELETED, "/gone")]
    sentinel(a, b)
    assert len(data_inbox.items) == len(child_inbox.items) == 1


def test_ephemeral_vanishing_with_its_session_fires_watches(sessions):
    a, b = sessions
    a.create("/members")
    b.create("/members/b", ephemeral=True)
    data_inbox: Inbox[WatchedEvent] = Inbox()
    child_inbox: Inbox[WatchedEvent] = Inbox()
    a.exists("/members/b", watch=data_inbox)
    assert a.children("/members", watch=child_inbox) == ["b"]
    b.close()
    assert data_inbox.wait_for(1) == [WatchedEvent(EventType.DELETED, "/members/b")]
    assert child_inbox.wait_for(1) == [WatchedEvent(EventType.CHILD, "/members")]
    assert a.children("/members") == []


def test_watch_on_missing_node_is_not_left_by_get_or_children(sessions):
    a, b = sessions
    inbox: Inbox[WatchedEvent] = Inbox()
    for read in (a.get, a.children):
        try:
            read("/absent", watch=inbox)
            raise AssertionError("reading a missing node must raise NoNode")
        except Exception as e:  # noqa: BLE001 - the type is checked just below
            assert type(e).__name__ == "NoNode"
    b.create("/absent")
    b.create("/absent/child")
    sentinel(a, b)
    assert inbox.items == []


def test_a_multi_fires_the_watches_of_each_of_its_ops(sessions):
    a, b = sessions
    a.create("/p", b"0")
    data_inbox: Inbox[WatchedEvent] = Inbox()
    child_inbox: Inbox[WatchedEvent] = Inbox()
    a.get("/p", watch=data_inbox)
    a.children("/p", watch=child_inbox)
    b.multi([Check("/p", 0), Create("/p/c"), SetData("/p", b"1", 0)])
    assert data_inbox.wait_for(1) == [WatchedEvent(EventType.CHANGED, "/p")]
    assert child_inbox.wait_for(1) == [WatchedEvent(EventType.CHILD, "/p")]
    # A failed multi changes nothing and so fires nothing.
    a.get("/p", watch=data_inbox)
    with pytest.raises(MultiFailed):
        b.multi([SetData("/p", b"2"), Check("/p", 99)])
    sentinel(a, b)
    assert len(data_inbox.items) == 1
