"""The pure in-memory model of the metadata store contract (`memory://name`).

No I/O, no threads, no clocks: a `MemoryServer` holds the tree and the sessions,
and `MemoryServer.connect()` opens a `MemoryStore` client session on it. Every
answer is deterministic, so the conformance suite and hypothesis can replay it.
Watches fire synchronously, on the caller's thread, after the mutation is applied.

ZooKeeper facts honoured here (checked against a real 3.8 server by the contract suite):
  - a node's visible `cversion` counts child creations *and* deletions, but the
    sequential suffix is the number of child *creations* before this one (the
    server's create path keeps its own counter that deletions do not bump);
  - a multi applies all ops, or none: later ops see the effect of earlier ones, and
    every op in it gets the same zxid;
  - closing or expiring a session deletes its ephemeral nodes in one transaction.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from impl.metadata.store import (
    ANY_VERSION,
    BadVersion,
    Check,
    Create,
    Delete,
    EventType,
    InvalidArgument,
    MetadataError,
    MetadataStore,
    MultiFailed,
    NoChildrenForEphemerals,
    NodeExists,
    NoNode,
    NotEmpty,
    Op,
    OpResult,
    SessionExpired,
    SessionListener,
    SessionState,
    SetData,
    Stat,
    WatchedEvent,
    Watcher,
    parent_of,
    validate_data,
    validate_path,
)

log = logging.getLogger(__name__)


@dataclass
class Znode:
    data: bytes
    version: int
    cversion: int
    child_creations: int  # ZooKeeper's sequential-name counter (deletions do not bump it)
    czxid: int
    mzxid: int
    ephemeral_owner: int
    children: frozenset[str] = frozenset()

    def stat(self) -> Stat:
        return Stat(
            version=self.version,
            cversion=self.cversion,
            czxid=self.czxid,
            mzxid=self.mzxid,
            ephemeral_owner=self.ephemeral_owner,
            data_length=len(self.data),
            num_children=len(self.children),
        )


def child_name(path: str) -> str:
    return path.rsplit("/", 1)[1]


def validate_op(op: Op) -> None:
    """Reject malformed ops before anything is applied (every backend does this first)."""
    if not isinstance(op, Check | Create | SetData | Delete):
        raise InvalidArgument(f"not a multi op: {op!r}; use Check, Create, SetData or Delete")
    if isinstance(op, Create) and op.sequential and op.path.endswith("/") and op.path != "/":
        validate_path(op.path + "0")  # ZooKeeper allows "/parent/" + sequence suffix
    else:
        validate_path(op.path)
    if isinstance(op, Create | SetData):
        validate_data(op.path, op.data)
    if isinstance(op, Check | SetData | Delete) and (not isinstance(op.version, int) or op.version < ANY_VERSION):
        raise InvalidArgument(f"version for {op.path} must be an int >= -1, not {op.version!r}", op.path)


class Transaction:
    """A copy-on-write overlay on the tree: ops apply here, commit() publishes them."""

    def __init__(self, nodes: dict[str, Znode], zxid: int, session_id: int) -> None:
        self._nodes = nodes
        self._changed: dict[str, Znode | None] = {}
        self.zxid = zxid
        self.session_id = session_id
        self.events: list[WatchedEvent] = []

    def node(self, path: str) -> Znode | None:
        if path in self._changed:
            return self._changed[path]
        return self._nodes.get(path)

    def _writable(self, path: str) -> Znode:
        node = self.node(path)
        assert node is not None
        copy = replace(node)
        self._changed[path] = copy
        return copy

    def _versioned(self, path: str, expected_version: int, what: str) -> Znode:
        node = self.node(path)
        if node is None:
            raise NoNode(f"cannot {what} {path}: it does not exist", path)
        if expected_version != ANY_VERSION and expected_version != node.version:
            raise BadVersion(
                f"cannot {what} {path}: expected version {expected_version} but it is at {node.version}; "
                "re-read it and retry",
                path,
            )
        return node

    def apply(self, op: Op) -> OpResult:
        if isinstance(op, Check):
            self._versioned(op.path, op.version, "check")
            return True
        if isinstance(op, Create):
            return self.create(op)
        if isinstance(op, SetData):
            self._versioned(op.path, op.version, "set")
            node = self._writable(op.path)
            node.data = bytes(op.data)
            node.version += 1
            node.mzxid = self.zxid
            self.events.append(WatchedEvent(EventType.CHANGED, op.path))
            return node.stat()
        self.delete(op.path, op.version)
        return True

    def create(self, op: Create) -> str:
        if op.path == "/" and not op.sequential:
            raise NodeExists("cannot create /: the root always exists", "/")
        parent_path = parent_of(op.path)  # "/a/" + sequential: the parent is "/a"
        parent = self.node(parent_path)
        if parent is None:
            raise NoNode(f"cannot create {op.path}: parent {parent_path} does not exist; create it first", op.path)
        path = f"{op.path}{parent.child_creations:010d}" if op.sequential else op.path
        if self.node(path) is not None:
            raise NodeExists(f"cannot create {path}: it already exists", path)
        if parent.ephemeral_owner != 0:
            raise NoChildrenForEphemerals(
                f"cannot create {path}: parent {parent_path} is ephemeral and cannot have children", path
            )
        parent = self._writable(parent_path)
        parent.children = parent.children | {child_name(path)}
        parent.cversion += 1
        parent.child_creations += 1
        self._changed[path] = Znode(
            data=bytes(op.data),
            version=0,
            cversion=0,
            child_creations=0,
            czxid=self.zxid,
            mzxid=self.zxid,
            ephemeral_owner=self.session_id if op.ephemeral else 0,
        )
        self.events += [WatchedEvent(EventType.CREATED, path), WatchedEvent(EventType.CHILD, parent_path)]
        return path

    def delete(self, path: str, expected_version: int) -> None:
        if path == "/":
            raise InvalidArgument("cannot delete /: the root always exists", "/")
        node = self._versioned(path, expected_version, "delete")
        if node.children:
            raise NotEmpty(f"cannot delete {path}: it has {len(node.children)} children; delete them first", path)
        parent_path = parent_of(path)
        parent = self._writable(parent_path)
        parent.children = parent.children - {child_name(path)}
        parent.cversion += 1
        self._changed[path] = None
        self.events += [WatchedEvent(EventType.DELETED, path), WatchedEvent(EventType.CHILD, parent_path)]

    def commit(self) -> None:
        for path, node in self._changed.items():
            if node is None:
                self._nodes.pop(path, None)
            else:
                self._nodes[path] = node


@dataclass
class SessionRecord:
    """The server's view of one client session."""

    session_id: int
    alive: bool = True
    data_watches: dict[str, dict[Watcher, None]] = field(default_factory=dict)
    child_watches: dict[str, dict[Watcher, None]] = field(default_factory=dict)
    listeners: list[SessionListener] = field(default_factory=list)


class MemoryServer:
    """The tree, the zxid counter and the sessions of one in-memory metadata store."""

    def __init__(self) -> None:
        self.nodes: dict[str, Znode] = {
            "/": Znode(data=b"", version=0, cversion=0, child_creations=0, czxid=0, mzxid=0, ephemeral_owner=0)
        }
        self.zxid = 0
        self.sessions: dict[int, SessionRecord] = {}
        self._next_session_id = 1
        # Not a thread of our own: a lock so that shells calling from several threads stay safe.
        self._lock = threading.RLock()

    def connect(self) -> MemoryStore:
        with self._lock:
            session = SessionRecord(self._next_session_id)
            self._next_session_id += 1
            self.sessions[session.session_id] = session
        return MemoryStore(self, session)

    # --- called by MemoryStore -------------------------------------------------

    def session(self, session_id: int) -> SessionRecord:
        session = self.sessions.get(session_id)
        if session is None or not session.alive:
            raise SessionExpired(
                f"session {session_id:#x} is closed or expired; its ephemeral nodes are gone; open a new store"
            )
        return session

    def transact(self, session_id: int, ops: Sequence[Op]) -> list[OpResult]:
        """Apply ops atomically; raises MultiFailed(index, cause) and changes nothing on failure."""
        for index, op in enumerate(ops):
            try:
                validate_op(op)
            except MetadataError as cause:
                raise MultiFailed(index, cause) from cause
        with self._lock:
            self.session(session_id)
            txn = Transaction(self.nodes, self.zxid + 1, session_id)
            results: list[OpResult] = []
            for index, op in enumerate(ops):
                try:
                    results.append(txn.apply(op))
                except MetadataError as cause:
                    raise MultiFailed(index, cause) from cause
            self._commit(txn)
            fired = self._collect_watches(txn.events)
        self._fire(fired)
        return results

    def read(
        self, session_id: int, path: str, watcher: Watcher | None = None, child: bool = False, on_missing: bool = False
    ) -> Znode | None:
        """The node at `path` (or None), leaving `watcher` in the same atomic step.

        Like ZooKeeper, a watch is left on a missing node only by exists() (`on_missing`),
        never by a get() or children() that fails with NoNode.
        """
        validate_path(path)
        with self._lock:
            session = self.session(session_id)
            node = self.nodes.get(path)
            if watcher is not None and (node is not None or on_missing):
                table = session.child_watches if child else session.data_watches
                table.setdefault(path, {})[watcher] = None
            return node

    def end_session(self, session_id: int, expired: bool) -> None:
        """Close or expire a session: its ephemerals vanish in one transaction, its watches are dropped."""
        with self._lock:
            session = self.sessions.get(session_id)
            if session is None or not session.alive:
                return
            session.alive = False
            session.data_watches.clear()
            session.child_watches.clear()
            txn = Transaction(self.nodes, self.zxid + 1, session_id)
            owned = sorted(p for p, n in self.nodes.items() if n.ephemeral_owner == session_id)
            for path in owned:
                txn.delete(path, ANY_VERSION)
            if owned:
                self._commit(txn)
            fired = self._collect_watches(txn.events)
            listeners = list(session.listeners) if expired else []
            del self.sessions[session_id]
        self._fire(fired)
        for listener in listeners:
            listener(SessionState.EXPIRED)

    # --- internals -----------------------------------------------------------------

    def _commit(self, txn: Transaction) -> None:
        txn.commit()
        self.zxid = txn.zxid

    def _collect_watches(self, events: list[WatchedEvent]) -> list[tuple[Watcher, WatchedEvent]]:
        fired: list[tuple[Watcher, WatchedEvent]] = []
        for event in events:
            for session in self.sessions.values():
                if event.type in (EventType.CREATED, EventType.CHANGED, EventType.DELETED):
                    fired += [(w, event) for w in session.data_watches.pop(event.path, {})]
                if event.type in (EventType.CHILD, EventType.DELETED):
                    fired += [(w, event) for w in session.child_watches.pop(event.path, {})]
        return fired

    @staticmethod
    def _fire(fired: list[tuple[Watcher, WatchedEvent]]) -> None:
        for watcher, event in fired:
            try:
                watcher(event)
            except Exception:  # the write succeeded: a failing callback must not make it look failed
                log.exception("watch callback %r failed on %s", watcher, event)


class MemoryStore(MetadataStore):
    """One client session on a MemoryServer."""

    def __init__(self, server: MemoryServer, session: SessionRecord) -> None:
        self.server = server
        self._session = session

    @property
    def session_id(self) -> int:
        return self._session.session_id

    def _one(self, op: Op) -> OpResult:
        try:
            return self.server.transact(self.session_id, [op])[0]
        except MultiFailed as failed:
            raise failed.cause from None

    def create(self, path: str, data: bytes = b"", ephemeral: bool = False, sequential: bool = False) -> str:
        result = self._one(Create(path, data, ephemeral, sequential))
        assert isinstance(result, str)
        return result

    def get(self, path: str, watch: Watcher | None = None) -> tuple[bytes, Stat]:
        node = self.server.read(self.session_id, path, watch)
        if node is None:
            raise NoNode(f"cannot get {path}: it does not exist", path)
        return node.data, node.stat()

    def set(self, path: str, data: bytes, expected_version: int = ANY_VERSION) -> Stat:
        result = self._one(SetData(path, data, expected_version))
        assert isinstance(result, Stat)
        return result

    def delete(self, path: str, expected_version: int = ANY_VERSION) -> None:
        self._one(Delete(path, expected_version))

    def exists(self, path: str, watch: Watcher | None = None) -> Stat | None:
        node = self.server.read(self.session_id, path, watch, on_missing=True)
        return None if node is None else node.stat()

    def children(self, path: str, watch: Watcher | None = None) -> list[str]:
        node = self.server.read(self.session_id, path, watch, child=True)
        if node is None:
            raise NoNode(f"cannot list children of {path}: it does not exist", path)
        return sorted(node.children)

    def multi(self, ops: Sequence[Op]) -> list[OpResult]:
        return self.server.transact(self.session_id, list(ops))

    def add_session_listener(self, listener: SessionListener) -> None:
        with self.server._lock:
            self._session.listeners.append(listener)

    def expire_session(self) -> None:
        self.server.end_session(self.session_id, expired=True)

    def close(self) -> None:
        self.server.end_session(self.session_id, expired=False)


# `memory://name` shares one server per name within a process (tests, standalone).
_SERVERS: dict[str, MemoryServer] = {}
_SERVERS_LOCK = threading.Lock()


def server_named(name: str) -> MemoryServer:
    """The process-wide MemoryServer called `name`, created on first use; "" gives a fresh private one."""
    if not name:
        return MemoryServer()
    with _SERVERS_LOCK:
        return _SERVERS.setdefault(name, MemoryServer())


def forget_server(name: str) -> None:
    """Drop a named server from the registry (tests that want a clean slate)."""
    with _SERVERS_LOCK:
        _SERVERS.pop(name, None)
