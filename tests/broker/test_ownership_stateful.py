"""A stateful property test of the ownership cache against the in-memory store (fencing.tla's actions).

The memory store tells watchers and session listeners synchronously, so here a broker learns of
every change at once; then its beliefs must match the store exactly after every step:
believesOwner[b] <=> ownerNode = b (with b's current session), at most one believer per bundle,
and every bundle a broker stops owning other than by its own release() is reported to on_lost
exactly once. With ZooKeeper the beliefs may lag (fencing covers the gap); see test_ownership.py.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from impl.broker.bundles import NamespaceBundle, namespace_bundles
from impl.broker.ownership import OwnershipCache
from impl.metadata.memory import MemoryServer
from impl.metadata.naming import NamespaceName
from impl.metadata.store import NoNode, SessionExpired

BROKERS = ["a:1", "b:1", "c:1"]
BUNDLES = list(namespace_bundles(NamespaceName("public", "default"), 2))
brokers = st.sampled_from(range(len(BROKERS)))
bundles = st.sampled_from(BUNDLES)


class OwnershipMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.server = MemoryServer()
        self.reported: list[list[NamespaceBundle]] = [[] for _ in BROKERS]
        self.caches = [
            OwnershipCache(self.server.connect(), address, on_lost=self.reported[i].extend)
            for i, address in enumerate(BROKERS)
        ]

    def holder(self, bundle: NamespaceBundle) -> int | None:
        """The session id holding the bundle's node (the spec's ownerNode), or None."""
        node = self.server.nodes.get(bundle.path)
        return None if node is None else node.ephemeral_owner

    def step(self, action: Callable[[], object], released: tuple[int, NamespaceBundle] | None = None) -> None:
        """Run one action and check that every bundle that left a broker was reported (or released)."""
        before = [set(c.owned_bundles()) for c in self.caches]
        marks = [len(r) for r in self.reported]
        action()
        for i, cache in enumerate(self.caches):
            left = before[i] - set(cache.owned_bundles())
            expected = {b for b in left if (i, b) != released}
            new_reports = self.reported[i][marks[i] :]
            assert sorted(new_reports) == sorted(expected), (BROKERS[i], new_reports, expected)

    @rule(i=brokers, bundle=bundles)
    def acquire(self, i: int, bundle: NamespaceBundle) -> None:
        cache = self.caches[i]
        free_or_ours = self.holder(bundle) in (None, cache.store.session_id)

        def act() -> None:
            try:
                assert cache.try_acquire(bundle) == free_or_ours
            except SessionExpired:
                assert cache.expired

        self.step(act)

    @rule(i=brokers, bundle=bundles)
    def release(self, i: int, bundle: NamespaceBundle) -> None:
        self.step(lambda: self.caches[i].release(bundle), released=(i, bundle))

    @rule(i=brokers, bundle=bundles)
    def unload(self, i: int, bundle: NamespaceBundle) -> None:
        self.step(lambda: self.caches[i].unload(bundle))

    @rule(i=brokers, bundle=bundles)
    def forced_unload_by(self, i: int, bundle: NamespaceBundle) -> None:
        """Broker i deletes the bundle's node, whoever holds it (an admin unload)."""
        cache = self.caches[i]
        if cache.expired:
            return

        def act() -> None:
            with contextlib.suppress(NoNode):
                cache.store.delete(bundle.path)

        self.step(act)

    @rule(i=brokers)
    def expire_session(self, i: int) -> None:
        self.step(self.caches[i].store.expire_session)

    @precondition(lambda self: any(c.expired for c in self.caches))
    @rule(i=brokers)
    def reconnect(self, i: int) -> None:
        if self.caches[i].expired:
            self.caches[i].reconnect(self.server.connect())

    @invariant()
    def beliefs_match_the_store(self) -> None:
        for bundle in BUNDLES:
            believers = [c for c in self.caches if c.is_owned(bundle)]
            assert len(believers) <= 1
            holder = self.holder(bundle)
            if believers:
                assert holder == believers[0].store.session_id  # believesOwner => ownerNode = b
            elif holder is not None:
                raise AssertionError(f"{bundle} is held by session {holder}, whose broker does not believe it owns it")
            for cache in self.caches:
                if not cache.expired:
                    expected = None if not believers else believers[0].broker_address
                    assert cache.owner_of(bundle) == expected

    @invariant()
    def expired_brokers_own_nothing(self) -> None:
        for cache in self.caches:
            if cache.expired:
                assert cache.owned_bundles() == []


OwnershipMachine.TestCase.settings = settings(max_examples=150, stateful_step_count=30, deadline=None)
test_ownership_machine = OwnershipMachine.TestCase
