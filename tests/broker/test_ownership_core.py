"""The ownership core alone (impl/broker/ownership_core.py): no store, no threads, no watches.

Each test feeds the core inputs and checks the outputs it asks for, then answers them by hand,
including every failure at every step and answers that come too late.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from impl.broker import ownership_core as core
from impl.broker.bundles import NamespaceBundle, namespace_bundles
from impl.broker.ownership_core import OwnershipCore
from impl.metadata.naming import NamespaceName
from impl.metadata.store import BadVersion, ConnectionLoss, InvalidArgument, NodeExists, NoNode, SessionExpired

ME, OTHER = 101, 202  # session ids: ours, another broker's
B0, B1, B2 = namespace_bundles(NamespaceName("public", "default"))[:3]
WRITES = (core.CreateOwnershipNode, core.DeleteOwnNode)


def new_core() -> OwnershipCore:
    return OwnershipCore("a:1", ME)


def acquired(c: OwnershipCore, bundle: NamespaceBundle, token: int = 1) -> None:
    """Run a successful acquire to its end."""
    assert c.step(core.Acquire(token, bundle)) == [core.CreateOwnershipNode(token, c.session, bundle, b"a:1", False)]
    assert c.step(core.NodeCreated(token, c.session)) == [core.WatchOwnNode(bundle.path, c.session, token)]
    assert c.step(core.NodeWatched(bundle.path, c.session, c.session_id, token)) == [core.CompleteRequest(token, True)]


def expired(c: OwnershipCore) -> list[core.Output]:
    return c.step(core.SessionExpiredEvent(c.session))


# --- AcquireOwnership ----------------------------------------------------------------------------


def test_acquire_creates_the_node_arms_the_watch_and_is_idempotent() -> None:
    c = new_core()
    acquired(c, B0)
    assert c.is_owned(B0.path) and c.owned_bundles() == [B0]
    assert c.step(core.Acquire(2, B0)) == [core.CompleteRequest(2, True)]  # owned already: no I/O


def test_the_namespaces_first_bundle_creates_the_parents_once() -> None:
    c = new_core()
    c.step(core.Acquire(1, B0))
    parents = core.CreateOwnershipNode(1, 0, B0, b"a:1", True)
    assert c.step(core.NodeCreateFailed(1, 0, NoNode("no parent"))) == [parents]
    error = NoNode("still no parent")
    assert c.step(core.NodeCreateFailed(1, 0, error)) == [core.FailRequest(1, error)]  # once only
    assert not c.is_owned(B0.path)


@pytest.mark.parametrize("with_parents", [False, True])
def test_node_exists_asks_whose_it_is(with_parents: bool) -> None:
    c = new_core()
    c.owners[B0.path] = "stale:1"
    c.step(core.Acquire(1, B0))
    if with_parents:
        c.step(core.NodeCreateFailed(1, 0, NoNode("no parent")))
    assert c.step(core.NodeCreateFailed(1, 0, NodeExists("taken"))) == [core.CheckOwnershipNode(1, 0, B0.path)]
    assert B0.path not in c.owners  # the cached owner is invalidated
    assert c.step(core.NodeChecked(1, 0, OTHER)) == [core.CompleteRequest(1, False)]
    assert not c.is_owned(B0.path)


def test_a_node_that_vanished_before_the_check_is_not_owned() -> None:
    c = new_core()
    c.step(core.Acquire(1, B0))
    c.step(core.NodeCreateFailed(1, 0, NodeExists("taken")))
    assert c.step(core.NodeChecked(1, 0, None)) == [core.CompleteRequest(1, False)]
    assert c.owned_bundles() == []


def test_our_own_node_from_an_unanswered_create_is_adopted() -> None:
    c = new_core()
    c.step(core.Acquire(1, B0))
    c.step(core.NodeCreateFailed(1, 0, NodeExists("ours, created by a create whose answer was lost")))
    assert c.step(core.NodeChecked(1, 0, ME)) == [core.WatchOwnNode(B0.path, 0, 1)]
    assert c.step(core.NodeWatched(B0.path, 0, ME, 1)) == [core.CompleteRequest(1, True)]
    assert c.is_owned(B0.path)


def test_create_and_check_failures_fail_the_acquire_with_the_stores_error() -> None:
    c = new_core()
    lost = ConnectionLoss("no answer")
    c.step(core.Acquire(1, B0))
    assert c.step(core.NodeCreateFailed(1, 0, lost)) == [core.FailRequest(1, lost)]
    c.step(core.Acquire(2, B0))
    c.step(core.NodeCreateFailed(2, 0, NodeExists("taken")))
    assert c.step(core.NodeCreateFailed(2, 0, lost)) == [core.FailRequest(2, lost)]  # the check failed
    assert c.owned_bundles() == [] and c.step(core.NodeCreated(2, 0)) == []  # over: later answers are stale


def test_an_acquire_whose_session_expired_meanwhile_fails_and_owns_nothing() -> None:
    c = new_core()
    c.step(core.Acquire(1, B0))
    assert expired(c) == []  # nothing owned yet: nothing lost
    [fail] = c.step(core.NodeCreated(1, 0))
    assert isinstance(fail, core.FailRequest) and isinstance(fail.error, SessionExpired)
    assert "lost the session" in str(fail.error) and c.owned_bundles() == []


def test_an_acquire_answered_after_a_reconnect_fails() -> None:
    c = new_core()
    c.step(core.Acquire(1, B0))
    c.step(core.NodeCreateFailed(1, 0, NodeExists("taken")))
    expired(c)
    c.step(core.Reconnect(9, 303))
    [fail] = c.step(core.NodeChecked(1, 0, ME))  # ours on the old session, which is gone
    assert isinstance(fail, core.FailRequest) and isinstance(fail.error, SessionExpired)
    assert c.owned_bundles() == []


def test_a_node_gone_before_the_watch_was_armed_is_a_loss() -> None:
    c = new_core()
    c.step(core.Acquire(1, B0))
    c.step(core.NodeCreated(1, 0))
    assert c.step(core.NodeWatched(B0.path, 0, None, 1)) == [
        core.BundlesLost((B0,), "its ownership node was removed"),
        core.CompleteRequest(1, False),
    ]


# --- RevalidateOwnership: watches, expiry, reconnection --------------------------------------------


def test_a_forced_unload_is_a_loss() -> None:
    c = new_core()
    acquired(c, B0)
    assert c.step(core.OwnNodeChanged(B0.path)) == [core.WatchOwnNode(B0.path, 0)]
    assert c.step(core.NodeWatched(B0.path, 0, ME)) == []  # changed but still ours: the watch is re-armed
    c.step(core.OwnNodeChanged(B0.path))
    assert c.step(core.NodeWatched(B0.path, 0, OTHER)) == [core.BundlesLost((B0,), "its ownership node was removed")]
    assert not c.is_owned(B0.path)
    assert c.step(core.OwnNodeChanged(B0.path)) == []  # not ours any more: nothing to check
    assert c.step(core.NodeWatched(B0.path, 0, None)) == []  # a duplicate answer reports nothing twice


def test_a_watch_that_could_not_be_armed_is_checked_on_reconnection() -> None:
    c = new_core()
    c.step(core.Acquire(1, B0))
    c.step(core.NodeCreated(1, 0))
    assert c.step(core.WatchFailed(B0.path, 0, ConnectionLoss("no answer"), 1)) == [
        core.Unverified(B0.path, "no answer"),
        core.CompleteRequest(1, True),
    ]
    assert c.step(core.SessionConnected(0)) == [core.WatchOwnNode(B0.path, 0)]
    assert c.unverified == set()
    assert c.step(core.NodeWatched(B0.path, 0, None)) == [core.BundlesLost((B0,), "its ownership node was removed")]
    assert c.step(core.SessionConnected(0)) == []  # checked once


def test_session_expiry_loses_every_bundle_at_once_and_never_writes_again() -> None:
    c = new_core()
    acquired(c, B2, 1)
    acquired(c, B0, 2)
    c.owners[B1.path] = "b:1"
    c.unverified.add(B0.path)
    assert expired(c) == [core.BundlesLost((B2, B0), "the metadata session expired")]
    assert c.expired and c.owned_bundles() == [] and c.owners == {} and c.unverified == set()
    assert expired(c) == []  # told twice: lost once
    outputs = [
        *c.step(core.Acquire(3, B1)),
        *c.step(core.Release(4, B0)),
        *c.step(core.Unload(5, B2)),
        *c.step(core.OwnNodeChanged(B0.path)),
        *c.step(core.SessionConnected(0)),
    ]
    assert not [out for out in outputs if isinstance(out, WRITES + (core.WatchOwnNode,))]
    [refused, released, unloaded] = outputs
    assert isinstance(refused, core.FailRequest) and isinstance(refused.error, SessionExpired)
    assert "4462" in str(refused.error)
    assert released == core.CompleteRequest(4) and unloaded == core.CompleteRequest(5, False)


def test_reconnect_starts_a_new_session_without_re_creating_nodes() -> None:
    c = new_core()
    [fail] = c.step(core.Reconnect(1, 303))
    assert isinstance(fail, core.FailRequest) and isinstance(fail.error, InvalidArgument)
    assert "still alive" in str(fail.error) and (c.session, c.session_id) == (0, ME)  # unchanged
    acquired(c, B0)
    expired(c)
    c.owners[B1.path] = "b:1"  # read on the expired session (not cached by owner_of, but make sure)
    assert c.step(core.Reconnect(2, 303)) == [core.CompleteRequest(2)]  # no CreateOwnershipNode
    assert (c.session, c.session_id, c.expired) == (1, 303, False)
    assert c.owned_bundles() == [] and c.owners == {}
    assert expired(c) == [] and c.expired  # the new session can expire too (it owns nothing)
    c.step(core.Reconnect(3, 404))
    assert c.step(core.SessionExpiredEvent(1)) == []  # a stale expiry: the old session's, already handled
    assert not c.expired


def test_stale_watch_answers_change_no_belief() -> None:
    c = new_core()
    acquired(c, B0)
    c.step(core.OwnNodeChanged(B0.path))
    expired(c)
    c.step(core.Reconnect(5, 303))
    acquired(c, B0, 6)
    assert c.step(core.NodeWatched(B0.path, 0, OTHER)) == []  # the old session's answer
    assert c.step(core.WatchFailed(B0.path, 0, ConnectionLoss("x"))) == []
    assert c.step(core.SessionConnected(0)) == []
    assert c.is_owned(B0.path) and c.unverified == set()


# --- ownerNode: who owns a bundle ----------------------------------------------------------------


def test_owner_of_answers_itself_caches_others_and_never_caches_unowned() -> None:
    c = new_core()
    assert c.step(core.OwnerOf(1, B1)) == [core.ReadOwner(1, 0, B1.path)]
    assert c.step(core.OwnerRead(1, 0, None)) == [core.CompleteRequest(1, None)]
    assert c.step(core.OwnerOf(2, B1)) == [core.ReadOwner(2, 0, B1.path)]  # "unowned" was not cached
    assert c.step(core.OwnerRead(2, 0, b"b:1")) == [core.CompleteRequest(2, "b:1")]
    assert c.step(core.OwnerOf(3, B1)) == [core.CompleteRequest(3, "b:1")]  # cached
    assert c.step(core.OwnerNodeChanged(B1.path)) == []
    assert c.step(core.OwnerOf(4, B1)) == [core.ReadOwner(4, 0, B1.path)]  # the watch invalidated it
    acquired(c, B0, 5)
    assert c.step(core.OwnerOf(6, B0)) == [core.CompleteRequest(6, "a:1")]


def test_an_owner_invalidated_during_its_read_is_answered_but_not_cached() -> None:
    c = new_core()
    c.step(core.OwnerOf(1, B1))
    c.step(core.OwnerNodeChanged(B1.path))  # the watch fired while the read was in flight
    assert c.step(core.OwnerRead(1, 0, b"b:1")) == [core.CompleteRequest(1, "b:1")]
    assert B1.path not in c.owners


def test_an_owner_read_on_a_session_that_expired_is_not_cached() -> None:
    c = new_core()
    c.step(core.OwnerOf(1, B1))
    expired(c)
    assert c.step(core.OwnerRead(1, 0, b"b:1")) == [core.CompleteRequest(1, "b:1")]
    assert c.owners == {}


def test_owner_read_failures_and_stale_answers() -> None:
    c = new_core()
    c.step(core.OwnerOf(1, B1))
    error = ConnectionLoss("no answer")
    assert c.step(core.OwnerReadFailed(1, 0, error)) == [core.FailRequest(1, error)]
    assert c.step(core.OwnerRead(1, 0, b"b:1")) == []  # the request is over
    assert c.step(core.OwnerReadFailed(7, 0, error)) == []  # nobody asked
    assert c.owners == {}
    c.step(core.OwnerOf(2, B1))
    assert c.step(core.OwnerRead(2, 0, b"\xff:1")) == [core.CompleteRequest(2, "\ufffd:1")]  # undecodable bytes


# --- giving bundles up ---------------------------------------------------------------------------


def test_release_deletes_our_node_by_version_without_telling_on_lost() -> None:
    c = new_core()
    acquired(c, B0)
    c.owners[B0.path] = "x:1"
    assert c.step(core.Release(2, B0)) == [core.ReadOwnNode(2, 0, B0.path)]
    assert not c.is_owned(B0.path)  # stops believing at once
    assert c.step(core.OwnNodeRead(2, 0, ME, 7)) == [core.DeleteOwnNode(2, 0, B0.path, 7)]
    epoch = c.epochs[B0.path]
    assert c.step(core.OwnNodeDeleted(2, 0)) == [core.CompleteRequest(2)]
    assert c.epochs[B0.path] == epoch + 1 and B0.path not in c.owners


def test_release_never_deletes_a_successors_node() -> None:
    c = new_core()
    acquired(c, B0)
    c.step(core.Release(2, B0))
    assert c.step(core.OwnNodeRead(2, 0, OTHER, 0)) == [core.CompleteRequest(2)]


def test_release_of_a_bundle_not_owned_is_a_no_op() -> None:
    c = new_core()
    assert c.step(core.Release(1, B0)) == [core.CompleteRequest(1)]
    assert c.step(core.Unload(2, B0)) == [core.CompleteRequest(2, False)]


@pytest.mark.parametrize("at_delete", [False, True])
@pytest.mark.parametrize("error", [NoNode("gone"), BadVersion("changed"), SessionExpired("expired")])
def test_release_absorbs_a_node_already_gone(at_delete: bool, error: Exception) -> None:
    c = new_core()
    acquired(c, B0)
    c.step(core.Release(2, B0))
    if at_delete:
        c.step(core.OwnNodeRead(2, 0, ME, 0))
    assert isinstance(error, (NoNode, BadVersion, SessionExpired))
    assert c.step(core.OwnNodeIoFailed(2, 0, error)) == [core.CompleteRequest(2)]


@pytest.mark.parametrize("at_delete", [False, True])
def test_release_fails_on_an_unanswered_read_or_delete(at_delete: bool) -> None:
    c = new_core()
    acquired(c, B0)
    c.step(core.Release(2, B0))
    if at_delete:
        c.step(core.OwnNodeRead(2, 0, ME, 0))
    epoch = c.epochs[B0.path]
    error = ConnectionLoss("no answer")
    assert c.step(core.OwnNodeIoFailed(2, 0, error)) == [core.FailRequest(2, error)]
    assert c.epochs[B0.path] == epoch and not c.is_owned(B0.path)


def test_unload_tells_on_lost_before_freeing_the_node() -> None:
    c = new_core()
    acquired(c, B0)
    assert c.step(core.Unload(2, B0)) == [core.BundlesLost((B0,), "unloaded"), core.ReadOwnNode(2, 0, B0.path)]
    c.step(core.OwnNodeRead(2, 0, ME, 3))
    assert c.step(core.OwnNodeDeleted(2, 0)) == [core.CompleteRequest(2, True)]
    error = ConnectionLoss("no answer")
    acquired(c, B1, 3)
    c.step(core.Unload(4, B1))
    assert c.step(core.OwnNodeIoFailed(4, 0, error)) == [core.FailRequest(4, error)]


# --- bad and stale input -------------------------------------------------------------------------


def test_answers_nobody_waits_for_are_ignored() -> None:
    c = new_core()
    acquired(c, B0)
    before = (dict(c.owned), dict(c.owners), dict(c.epochs))
    stale: list[core.Event] = [
        core.NodeCreated(1, 0),  # the acquire is over
        core.NodeCreateFailed(9, 0, NodeExists("x")),
        core.NodeChecked(9, 0, ME),
        core.OwnNodeRead(1, 0, ME, 0),  # an acquire's token, at the wrong step
        core.OwnNodeDeleted(9, 0),
        core.OwnNodeIoFailed(9, 0, NoNode("x")),
        core.OwnerRead(9, 0, b"b:1"),
        core.SessionConnected(5),
    ]
    for event in stale:
        assert c.step(event) == [], event
    c.step(core.Acquire(2, B1))
    assert c.step(core.NodeCreated(2, 1)) == []  # a session that is not the request's
    assert (dict(c.owned), dict(c.owners), dict(c.epochs)) == before


def test_an_event_of_another_type_is_a_type_error() -> None:
    @dataclass(frozen=True)
    class Unknown:
        token: int

    with pytest.raises(TypeError, match="not an ownership event"):
        new_core().step(Unknown(1))  # type: ignore[arg-type]
