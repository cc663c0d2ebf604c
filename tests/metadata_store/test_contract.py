"""The contract suite: each backend against a plain reference model, by hypothesis.

The reference below is written from ZooKeeper's documented (and, for sequential
names, observed) behaviour and shares no code with impl/metadata/memory.py: a
checker that shares code with what it checks can share its bugs.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test

from impl.metadata.store import (
    ANY_VERSION,
    BadVersion,
    Check,
    Create,
    Delete,
    MetadataError,
    MetadataStore,
    MultiFailed,
    NoChildrenForEphemerals,
    NodeExists,
    NoNode,
    NotEmpty,
    Op,
    SessionExpired,
    SetData,
    Stat,
)

from .conftest import Backend, Connect

# --- the reference model ----------------------------------------------------------


@dataclass
class RefNode:
    data: bytes = b""
    version: int = 0
    cversion: int = 0  # child creations + deletions, as ZooKeeper reports it
    seq: int = 0  # ZooKeeper's sequential suffix: child creations only (observed on 3.8)
    owner: int = 0
    kids: set[str] = field(default_factory=set)


class RefError(Exception):
    def __init__(self, kind: type[MetadataError]) -> None:
        super().__init__(kind.__name__)
        self.kind = kind


def up(path: str) -> str:
    return path.rsplit("/", 1)[0] or "/"


class Reference:
    def __init__(self) -> None:
        self.tree: dict[str, RefNode] = {"/": RefNode()}

    def lookup(self, path: str, version: int) -> RefNode:
        if path not in self.tree:
            raise RefError(NoNode)
        node = self.tree[path]
        if version not in (ANY_VERSION, node.version):
            raise RefError(BadVersion)
        return node

    def create(self, path: str, data: bytes, ephemeral: bool, sequential: bool, session: int) -> str:
        parent_path = up(path)
        if parent_path not in self.tree:
            raise RefError(NoNode)
        parent = self.tree[parent_path]
        name = f"{path}{parent.seq:010d}" if sequential else path
        if name in self.tree:
            raise RefError(NodeExists)
        if parent.owner:
            raise RefError(NoChildrenForEphemerals)
        parent.kids.add(name)
        parent.cversion += 1
        parent.seq += 1
        self.tree[name] = RefNode(data=data, owner=session if ephemeral else 0)
        return name

    def set(self, path: str, data: bytes, version: int) -> RefNode:
        node = self.lookup(path, version)
        node.data = data
        node.version += 1
        return node

    def delete(self, path: str, version: int) -> None:
        node = self.lookup(path, version)
        if node.kids:
            raise RefError(NotEmpty)
        del self.tree[path]
        self.tree[up(path)].kids.discard(path)
        self.tree[up(path)].cversion += 1

    def multi(self, ops: list[Op], session: int) -> list[object]:
        saved = copy.deepcopy(self.tree)
        results: list[object] = []
        for index, op in enumerate(ops):
            try:
                if isinstance(op, Check):
                    self.lookup(op.path, op.version)
                    results.append(True)
                elif isinstance(op, Create):
                    results.append(self.create(op.path, op.data, op.ephemeral, op.sequential, session))
                elif isinstance(op, SetData):
                    results.append(copy.deepcopy(self.set(op.path, op.data, op.version)))
                else:
                    self.delete(op.path, op.version)
                    results.append(True)
            except RefError as e:
                self.tree = saved
                raise RefMultiError(index, e.kind) from None
        return results

    def end_session(self, session: int) -> None:
        for path in sorted(p for p, n in self.tree.items() if n.owner == session):
            self.delete(path, ANY_VERSION)


class RefMultiError(Exception):
    def __init__(self, index: int, kind: type[MetadataError]) -> None:
        super().__init__(f"{index}: {kind.__name__}")
        self.index = index
        self.kind = kind


# --- the machine ----------------------------------------------------------------------

NAMES = ["/a", "/b", "/a/x", "/a/y", "/b/x", "/a/x/z", "/a/y/z"]
SEQ_PREFIXES = ["/a/n-", "/q-", "/a/x/n-"]
datas = st.binary(max_size=6)
version_choices = st.sampled_from(["any", "current", "next", "zero"])
SESSIONS = 2


class ContractMachine(RuleBasedStateMachine):
    connect_namespace: Callable[[], Connect]  # set by the test per backend: a fresh namespace

    def __init__(self) -> None:
        super().__init__()
        self.connect: Connect = type(self).connect_namespace()
        self.ref = Reference()
        self.stores: list[MetadataStore] = [self.connect() for _ in range(SESSIONS)]

    def teardown(self) -> None:
        for store in self.stores:
            store.close()

    # helpers

    def paths(self) -> list[str]:
        return sorted(set(NAMES) | {p for p in self.ref.tree if p != "/"})

    def version(self, path: str, choice: str) -> int:
        current = self.ref.tree[path].version if path in self.ref.tree else 0
        return {"any": ANY_VERSION, "current": current, "next": current + 1, "zero": 0}[choice]

    def same_stat(self, path: str, stat: Stat, node: RefNode) -> None:
        assert (stat.version, stat.cversion, stat.data_length, stat.num_children) == (
            node.version,
            node.cversion,
            len(node.data),
            len(node.kids),
        ), f"{path}: {stat} vs reference {node}"
        assert stat.ephemeral_owner == node.owner, f"{path}: owner {stat.ephemeral_owner} vs {node.owner}"
        assert stat.czxid <= stat.mzxid

    def outcome(self, action: Callable[[], Any], expect: Callable[[], Any]) -> tuple[Any, Any]:
        """Run the reference first, then the store; both must succeed alike or fail with the same type."""
        try:
            expected = expect()
        except RefError as e:
            try:
                got = action()
            except MetadataError as err:
                assert type(err) is e.kind, f"expected {e.kind.__name__}, store raised {err!r}"
                return None, None
            raise AssertionError(f"expected {e.kind.__name__}, store returned {got!r}") from None
        return expected, action()

    # rules

    @rule(s=st.integers(0, SESSIONS - 1), data=st.data(), value=datas, ephemeral=st.booleans(), seq=st.booleans())
    def create(self, s: int, data: st.DataObject, value: bytes, ephemeral: bool, seq: bool) -> None:
        path = data.draw(st.sampled_from(SEQ_PREFIXES + NAMES if seq else self.paths()), label="path")
        store = self.stores[s]
        expected, got = self.outcome(
            lambda: store.create(path, value, ephemeral=ephemeral, sequential=seq),
            lambda: self.ref.create(path, value, ephemeral, seq, store.session_id),
        )
        assert got == expected

    @rule(s=st.integers(0, SESSIONS - 1), data=st.data(), value=datas, choice=version_choices)
    def set_data(self, s: int, data: st.DataObject, value: bytes, choice: str) -> None:
        path = data.draw(st.sampled_from(self.paths()), label="path")
        version = self.version(path, choice)
        expected, got = self.outcome(
            lambda: self.stores[s].set(path, value, version),
            lambda: copy.deepcopy(self.ref.set(path, value, version)),
        )
        if expected is not None:
            self.same_stat(path, got, expected)

    @rule(s=st.integers(0, SESSIONS - 1), data=st.data(), choice=version_choices)
    def delete(self, s: int, data: st.DataObject, choice: str) -> None:
        path = data.draw(st.sampled_from(self.paths()), label="path")
        version = self.version(path, choice)
        self.outcome(lambda: self.stores[s].delete(path, version), lambda: self.ref.delete(path, version))

    @rule(s=st.integers(0, SESSIONS - 1), data=st.data())
    def multi(self, s: int, data: st.DataObject) -> None:
        count = data.draw(st.integers(1, 3), label="ops")
        ops: list[Op] = []
        for _ in range(count):
            kind = data.draw(st.sampled_from(["check", "create", "set", "delete"]), label="kind")
            path = data.draw(st.sampled_from(self.paths()), label="path")
            version = self.version(path, data.draw(version_choices, label="version"))
            if kind == "check":
                ops.append(Check(path, version))
            elif kind == "create":
                seq = data.draw(st.booleans(), label="seq")
                if seq:
                    path = data.draw(st.sampled_from(SEQ_PREFIXES), label="prefix")
                ops.append(Create(path, data.draw(datas), data.draw(st.booleans(), label="ephemeral"), seq))
            elif kind == "set":
                ops.append(SetData(path, data.draw(datas), version))
            else:
                ops.append(Delete(path, version))
        store = self.stores[s]
        try:
            expected = self.ref.multi(ops, store.session_id)
        except RefMultiError as e:
            try:
                got = store.multi(ops)
            except MultiFailed as err:
                assert (err.index, type(err.cause)) == (e.index, e.kind), f"expected {e}, store raised {err!r}"
                return
            raise AssertionError(f"expected multi to fail at {e}, store returned {got!r}") from None
        got = store.multi(ops)
        assert len(got) == len(expected)
        for op, g, x in zip(ops, got, expected, strict=True):
            if isinstance(x, RefNode):
                assert isinstance(g, Stat)
                self.same_stat(op.path, g, x)
            else:
                assert g == x, f"{op}: store {g!r} vs reference {x!r}"

    @rule(s=st.integers(0, SESSIONS - 1), data=st.data())
    def read(self, s: int, data: st.DataObject) -> None:
        path = data.draw(st.sampled_from([*self.paths(), "/"]), label="path")
        self.compare(self.stores[s], path)

    @rule(s=st.integers(0, SESSIONS - 1), expire=st.booleans())
    def end_session(self, s: int, expire: bool) -> None:
        old = self.stores[s]
        if expire:
            old.expire_session()
        else:
            old.close()
        self.ref.end_session(old.session_id)
        try:
            old.exists("/")
            raise AssertionError("an ended session still answered")
        except SessionExpired:
            pass
        except MetadataError:
            assert not expire, "an expired session must raise SessionExpired"
        old.close()  # idempotent, and releases an expired store's resources
        self.stores[s] = self.connect()

    def compare(self, store: MetadataStore, path: str) -> None:
        node = self.ref.tree.get(path)
        stat = store.exists(path)
        if node is None:
            assert stat is None, f"{path} exists in the store but not in the reference"
            return
        assert stat is not None, f"{path} missing from the store"
        value, stat2 = store.get(path)
        assert value == node.data
        self.same_stat(path, stat2, node)
        names = store.children(path)
        assert names == sorted(k.rsplit("/", 1)[1] for k in node.kids), f"children of {path}"

    @invariant()
    def sessions_are_distinct(self) -> None:
        ids = [s.session_id for s in self.stores]
        assert len(set(ids)) == len(ids) and all(ids)

    @rule()
    def whole_tree_agrees(self) -> None:
        for path in sorted(self.ref.tree):
            self.compare(self.stores[0], path)


# Budgets: the whole metadata_store suite should finish in about three minutes on 2 cores.
BUDGET = {"memory": (300, 50), "embedded": (100, 40), "zk": (60, 40)}


def test_backend_matches_reference_model(backend: Backend) -> None:
    examples, steps = BUDGET[backend.name]

    class Machine(ContractMachine):
        connect_namespace = staticmethod(backend.fresh)

    run_state_machine_as_test(
        Machine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            database=None,
        ),
    )
