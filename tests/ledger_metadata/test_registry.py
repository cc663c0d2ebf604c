from __future__ import annotations

import json
import threading

import pytest

from impl.metadata import layout
from impl.metadata.registry import BookieAlreadyRegistered, BookieNotRegistered, BookieRegistry, Membership
from tests.ledger_metadata.conftest import Connect


class Recorder:
    def __init__(self) -> None:
        self.seen: list[Membership] = []
        self.changed = threading.Condition()

    def __call__(self, membership: Membership) -> None:
        with self.changed:
            self.seen.append(membership)
            self.changed.notify_all()

    def wait_for(self, writable: set[str], readonly: set[str]) -> None:
        wanted = Membership(frozenset(writable), frozenset(readonly))
        with self.changed:
            assert self.changed.wait_for(lambda: bool(self.seen) and self.seen[-1] == wanted, timeout=30), self.seen


def test_register_readonly_move_unregister(connect: Connect) -> None:
    registry = BookieRegistry(connect())
    registry.register("10.0.0.1:3181", rack="/rack-a")
    registry.register("10.0.0.2:3181", readonly=True)
    assert registry.writable_bookies() == {"10.0.0.1:3181"}
    assert registry.readonly_bookies() == {"10.0.0.2:3181"}
    assert registry.bookie_info("10.0.0.1:3181").rack == "/rack-a"
    stat = registry.store.exists(layout.bookie_path("10.0.0.1:3181"))
    assert stat is not None and stat.ephemeral_owner == registry.store.session_id

    registry.set_readonly("10.0.0.1:3181", True)
    assert registry.writable_bookies() == frozenset()
    assert registry.readonly_bookies() == {"10.0.0.1:3181", "10.0.0.2:3181"}
    info = registry.bookie_info("10.0.0.1:3181")
    assert info.readonly and info.rack == "/rack-a"  # the move keeps the rack
    registry.set_readonly("10.0.0.1:3181", False)
    assert registry.writable_bookies() == {"10.0.0.1:3181"}

    with pytest.raises(BookieAlreadyRegistered, match="already registered"):
        BookieRegistry(connect()).register("10.0.0.1:3181")
    registry.unregister("10.0.0.1:3181")
    registry.unregister("10.0.0.2:3181")
    assert registry.membership() == Membership(frozenset(), frozenset())
    with pytest.raises(BookieNotRegistered):
        registry.unregister("10.0.0.1:3181")
    with pytest.raises(BookieNotRegistered):
        registry.set_readonly("10.0.0.1:3181", True)


def test_a_bookie_publishes_its_frame_limit_and_older_nodes_still_read(connect: Connect) -> None:
    """The frame limit is a property of the registration, as BookieServiceInfo's properties are
    (strings); a node without it, or with one unreadable, reads as not published."""
    registry = BookieRegistry(connect())
    registry.register("10.0.0.1:3181", netty_max_frame_size_bytes=65536)
    data, _ = registry.store.get(layout.bookie_path("10.0.0.1:3181"))
    assert json.loads(data)["properties"] == {"nettyMaxFrameSizeBytes": "65536"}
    assert registry.bookie_info("10.0.0.1:3181").netty_max_frame_size_bytes == 65536
    registry.set_readonly("10.0.0.1:3181", True)  # the move keeps it
    assert registry.bookie_info("10.0.0.1:3181").netty_max_frame_size_bytes == 65536
    registry.register("10.0.0.2:3181")
    assert registry.bookie_info("10.0.0.2:3181").netty_max_frame_size_bytes is None
    older = {"bookie_id": "10.0.0.3:3181", "readonly": False, "rack": "/r"}  # as bookies wrote it before
    registry.store.create(layout.bookie_path("10.0.0.3:3181"), json.dumps(older).encode(), ephemeral=True)
    odd = {**older, "bookie_id": "10.0.0.4:3181", "properties": {"nettyMaxFrameSizeBytes": "²"}}
    registry.store.create(layout.bookie_path("10.0.0.4:3181"), json.dumps(odd).encode(), ephemeral=True)
    for bookie in ("10.0.0.3:3181", "10.0.0.4:3181"):
        info = registry.bookie_info(bookie)
        assert info.rack == "/r" and info.netty_max_frame_size_bytes is None


def test_registration_vanishes_with_its_session_and_watchers_are_told(connect: Connect) -> None:
    observer = BookieRegistry(connect())
    recorder = Recorder()
    watch = observer.watch_membership(recorder)
    recorder.wait_for(set(), set())

    bookie_a, bookie_b = connect(), connect()
    BookieRegistry(bookie_a).register("a:3181")
    recorder.wait_for({"a:3181"}, set())
    BookieRegistry(bookie_b).register("b:3181", readonly=True)
    recorder.wait_for({"a:3181"}, {"b:3181"})
    BookieRegistry(bookie_b).set_readonly("b:3181", False)
    recorder.wait_for({"a:3181", "b:3181"}, set())

    bookie_a.close()  # a clean close deletes the ephemeral node
    recorder.wait_for({"b:3181"}, set())
    assert observer.writable_bookies() == {"b:3181"}
    bookie_b.expire_session()  # so does an expiry
    recorder.wait_for(set(), set())

    # the re-armed watches report changes only: no two consecutive reports are equal
    assert all(x != y for x, y in zip(recorder.seen, recorder.seen[1:], strict=False))
    watch.cancel()
    count = len(recorder.seen)
    BookieRegistry(connect()).register("c:3181")
    assert observer.writable_bookies() == {"c:3181"}
    assert len(recorder.seen) == count  # cancelled: no more callbacks


def test_register_after_expiry_waits_out_a_dead_sessions_node(connect: Connect) -> None:
    crashed = connect()
    BookieRegistry(crashed).register("a:3181")
    restarted = BookieRegistry(connect())
    waited: list[bool] = []
    # a node still owned by a live session is not waited out forever
    with pytest.raises(BookieAlreadyRegistered, match="already registered"):
        restarted.register_after_expiry("a:3181", wait_s=0.3, on_wait=lambda: waited.append(True))
    assert waited == [True]

    expiry = threading.Timer(0.5, crashed.expire_session)  # the crashed run's session expires meanwhile
    expiry.start()
    try:
        restarted.register_after_expiry("a:3181", wait_s=30)
    finally:
        expiry.join()
    stat = restarted.store.exists(layout.bookie_path("a:3181"))
    assert stat is not None and stat.ephemeral_owner == restarted.store.session_id
