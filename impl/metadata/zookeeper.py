"""The `zk://` backend: the metadata store contract on a real ZooKeeper, through kazoo.

`ZooKeeperStore.from_url("zk://127.0.0.1:2181,127.0.0.1:2182/chroot")` opens one session.
The chroot is created if missing. Paths and data are validated before anything is sent,
and kazoo's exceptions become the contract's typed errors, each naming the path.

Sessions: kazoo reconnects by itself after a connection loss (SUSPENDED, then CONNECTED
on the same session). When the server expires the session (kazoo's LOST), listeners are
told EXPIRED, the kazoo client is stopped, and every later call raises SessionExpired:
a client must never carry on under a new session as if it were the old one.

Watches are ZooKeeper's own one-shot watches. kazoo drops pending watches on a connection
loss (it does not re-send them like the Java client's SetWatches), so this backend does
that itself on reconnection: it re-reads each orphaned watch's node, fires the watch at
once if the node changed while disconnected (compared by mzxid, or pzxid for child
watches), and otherwise arms it again. Watches fire at most once either way.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Sequence
from typing import Any

from kazoo import exceptions as kz
from kazoo.client import KazooClient, KazooState
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import EventType as KazooEventType
from kazoo.protocol.states import WatchedEvent as KazooWatchedEvent
from kazoo.protocol.states import ZnodeStat
from kazoo.retry import KazooRetry

from impl.metadata.store import (
    ANY_VERSION,
    BadVersion,
    Check,
    ConnectionLoss,
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
    validate_data,
    validate_path,
)

URL_SCHEME = "zk://"
_EVENT_TYPES = {
    KazooEventType.CREATED: EventType.CREATED,
    KazooEventType.CHANGED: EventType.CHANGED,
    KazooEventType.DELETED: EventType.DELETED,
    KazooEventType.CHILD: EventType.CHILD,
}
_SESSION_STATES = {
    KazooState.CONNECTED: SessionState.CONNECTED,
    KazooState.SUSPENDED: SessionState.SUSPENDED,
    KazooState.LOST: SessionState.EXPIRED,
}
# kazoo exception -> (contract error, what happened)
_ERRORS: list[tuple[type[Exception], type[MetadataError], str]] = [
    (kz.BadVersionError, BadVersion, "the node is not at the expected version; re-read it and retry"),
    (kz.NoNodeError, NoNode, "the node (or, for create, its parent) does not exist"),
    (kz.NodeExistsError, NodeExists, "the node already exists"),
    (kz.NotEmptyError, NotEmpty, "the node has children; delete them first"),
    (kz.NoChildrenForEphemeralsError, NoChildrenForEphemerals, "the parent is ephemeral and cannot have children"),
    (kz.SessionExpiredError, SessionExpired, "the session expired; open a new store"),
    (kz.ConnectionClosedError, SessionExpired, "the session is closed; open a new store"),
    (
        kz.ConnectionLoss,
        ConnectionLoss,
        "the connection to ZooKeeper was lost; the operation may or may not have applied",
    ),
    (KazooTimeoutError, ConnectionLoss, "no answer from ZooKeeper in time; the operation may or may not have applied"),
    (kz.BadArgumentsError, InvalidArgument, "ZooKeeper rejected the arguments"),
]


def parse_url(url: str) -> tuple[str, str]:
    """`zk://h:p[,h:p...][/chroot]` -> (hosts, chroot or '')."""
    if not isinstance(url, str) or not url.startswith(URL_SCHEME):
        raise InvalidArgument(f"not a ZooKeeper URL: {url!r}; use zk://HOST:PORT[,HOST:PORT...][/CHROOT]")
    rest = url[len(URL_SCHEME) :]
    hosts, _, chroot = rest.partition("/")
    if not hosts:
        raise InvalidArgument(f"ZooKeeper URL names no server: {url!r}; use zk://127.0.0.1:2181/chroot")
    chroot = "/" + chroot.rstrip("/") if chroot.strip("/") else ""
    if chroot:
        validate_path(chroot)
    return hosts, chroot


def to_stat(stat: ZnodeStat) -> Stat:
    return Stat(
        version=stat.version,
        cversion=stat.cversion,
        czxid=stat.czxid,
        mzxid=stat.mzxid,
        ephemeral_owner=stat.ephemeralOwner,
        data_length=stat.dataLength,
        num_children=stat.numChildren,
    )


def typed_error(error: Exception, operation: str, path: str) -> MetadataError:
    """The contract's error for a kazoo exception raised by `operation` on `path`."""
    for kazoo_type, ours, meaning in _ERRORS:
        if isinstance(error, kazoo_type):
            return ours(f"cannot {operation} {path}: {meaning}", path)
    return MetadataError(f"cannot {operation} {path}: ZooKeeper error {type(error).__name__}: {error}", path)


def _validate_op(op: Op) -> None:
    if not isinstance(op, Check | Create | SetData | Delete):
        raise InvalidArgument(f"not a multi op: {op!r}; use Check, Create, SetData or Delete")
    if isinstance(op, Create) and op.sequential and op.path.endswith("/") and op.path != "/":
        validate_path(op.path + "0")  # ZooKeeper allows "/parent/" + sequence suffix
    else:
        validate_path(op.path)
    if isinstance(op, Create | SetData):
        validate_data(op.path, op.data)
    if isinstance(op, Check | SetData | Delete):
        _validate_version(op.path, op.version)


def _validate_version(path: str, version: int) -> None:
    if not isinstance(version, int) or isinstance(version, bool) or version < ANY_VERSION:
        raise InvalidArgument(f"version for {path} must be an int >= -1, not {version!r}", path)


class _ArmedWatch:
    """One contract watch handed to kazoo: fires the caller's watch at most once.

    `zxid` is what the read that set it saw (mzxid of the node, None if absent; pzxid for a
    child watch), so that a watch kazoo dropped can be checked against the node after reconnection.
    """

    def __init__(self, store: ZooKeeperStore, path: str, child: bool, watch: Watcher) -> None:
        self.store, self.path, self.child, self.watch = store, path, child, watch
        self.zxid: int | None = None
        self._fired = False
        self._fire_lock = threading.Lock()  # kazoo's callback thread and the re-arm thread may race

    def __call__(self, event: KazooWatchedEvent) -> None:
        if event.type == KazooEventType.NONE:
            if not self._fired:
                self.store._orphan(self)
            return
        ours = _EVENT_TYPES.get(event.type)
        if ours is not None:
            self.fire(ours)

    def fire(self, event_type: EventType) -> None:
        with self._fire_lock:
            if self._fired:
                return
            self._fired = True
        self.watch(WatchedEvent(event_type, self.path))


def _reconnecting() -> KazooRetry:
    """Reconnect attempts without end, at least every second (plus up to 0.4 s of jitter). kazoo's default
    backoff doubles up to an hour: after a server restart of a few seconds its next attempt could come
    after the session timeout, and the session expired although the server was back in time. The first
    attempt comes after ~10 ms, not 100: a dropped connection (a moved session, `expire_session`, a server
    that closed it) is most often met by a server that answers at once, and the doubling soon spaces out
    the attempts at one that does not."""
    return KazooRetry(max_tries=-1, delay=0.01, backoff=2, max_delay=1.0)


class ZooKeeperStore(MetadataStore):
    """One ZooKeeper session (a started KazooClient), optionally under a chroot."""

    def __init__(
        self, hosts: str, chroot: str = "", session_timeout_s: float = 10.0, op_timeout_s: float | None = None
    ) -> None:
        if not session_timeout_s > 0:
            raise InvalidArgument(f"session timeout must be > 0 seconds, not {session_timeout_s!r}")
        if op_timeout_s is not None and not op_timeout_s > 0:
            raise InvalidArgument(f"operation timeout must be > 0 seconds, not {op_timeout_s!r}")
        self.hosts = hosts
        self.chroot = chroot
        self.session_timeout_s = session_timeout_s
        # Every operation's deadline: one that gets no answer for this long raises ConnectionLoss (ZooKeeper
        # unreachable, stopped or too slow; the operation may or may not have applied).
        self._op_timeout_s = op_timeout_s if op_timeout_s is not None else max(2 * session_timeout_s, 10.0)
        self._listeners: list[SessionListener] = []
        self._lock = threading.Lock()
        self._expired = threading.Event()
        self._closed = False
        self._expiring = False
        self._orphaned: list[_ArmedWatch] = []
        self._client = KazooClient(hosts=hosts, timeout=session_timeout_s, connection_retry=_reconnecting())
        try:
            self._client.start(timeout=max(session_timeout_s, 15.0))
        except KazooTimeoutError:
            self._client.close()
            raise ConnectionLoss(
                f"no ZooKeeper answered at {hosts} within {max(session_timeout_s, 15.0):.0f}s; "
                "is it running? (pulsar-ref zk start --dir DIR)"
            ) from None
        client_id = self._client.client_id
        assert client_id is not None
        self._session_id: int = client_id[0]
        self._session_password: bytes = client_id[1]
        if chroot:
            # Create the chroot from the root, then put the client under it.
            try:
                self._client.ensure_path(chroot)
            except (kz.KazooException, KazooTimeoutError) as error:
                self._stop_client()
                raise typed_error(error, "create the chroot", chroot) from None
            self._client.chroot = chroot
        self._client.add_listener(self._on_state)

    @classmethod
    def from_url(cls, url: str, session_timeout_s: float = 10.0, op_timeout_s: float | None = None) -> ZooKeeperStore:
        """Open a session on `zk://HOST:PORT[,HOST:PORT...][/CHROOT]`."""
        hosts, chroot = parse_url(url)
        return cls(hosts, chroot, session_timeout_s, op_timeout_s)

    @property
    def session_id(self) -> int:
        return self._session_id

    # --- sessions ------------------------------------------------------------------

    def _on_state(self, state: KazooState) -> None:
        """kazoo's connection thread: translate, and on expiry retire this store for good."""
        ours = _SESSION_STATES[state]
        if self._closed or self._expired.is_set():
            return
        if ours is SessionState.SUSPENDED and self._expiring:
            return  # our own fault injection moved the connection; only its outcome, EXPIRED, is news
        with self._lock:
            listeners = list(self._listeners)
        for listener in listeners:
            with contextlib.suppress(Exception):
                listener(ours)
        if ours is SessionState.CONNECTED and self._orphaned:
            self._schedule_rearm()
        if ours is SessionState.EXPIRED:
            self._expired.set()
            # Stop kazoo from opening a fresh session; not from its own thread.
            threading.Thread(target=self._stop_client, name="zk-expired-stop", daemon=True).start()

    def _stop_client(self) -> None:
        with contextlib.suppress(Exception):
            self._client.stop()
            self._client.close()

    def add_session_listener(self, listener: SessionListener) -> None:
        with self._lock:
            self._listeners.append(listener)

    def expire_session(self) -> None:
        """Open a second connection on this session and close it: the server ends the session,
        deletes its ephemerals, and this client sees it expired."""
        self._check_open("expire the session of", self.chroot or "/")
        self._expiring = True
        twin = KazooClient(
            hosts=self.hosts,
            timeout=self.session_timeout_s,
            client_id=self._twin_id(),
            connection_retry=_reconnecting(),
        )
        try:
            twin.start(timeout=max(self.session_timeout_s, 15.0))
        finally:
            twin.stop()
            twin.close()
        # The original connection was moved to the twin; its reconnect finds the session gone.
        if not self._expired.wait(self._op_timeout_s):
            raise ConnectionLoss(f"session 0x{self._session_id:x} did not report expiry in time")

    def _twin_id(self) -> tuple[int, bytes]:
        return (self._session_id, self._session_password)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._stop_client()

    def _check_open(self, operation: str, path: str) -> None:
        if self._closed:
            raise SessionExpired(f"cannot {operation} {path}: this store was closed; open a new one", path)
        if self._expired.is_set():
            raise SessionExpired(
                f"cannot {operation} {path}: session 0x{self._session_id:x} expired; open a new store", path
            )

    def _wait(self, operation: str, path: str, async_call: Callable[[], Any]) -> Any:
        self._check_open(operation, path)
        try:
            return async_call().get(timeout=self._op_timeout_s)
        except (kz.KazooException, KazooTimeoutError) as error:
            raise self._session_error(operation, path, error) from None

    def _session_error(self, operation: str, path: str, error: Exception) -> MetadataError:
        if self._closed or self._expired.is_set():
            self._check_open(operation, path)  # raises the SessionExpired naming the cause
        return typed_error(error, operation, path)

    def _watcher(self, watch: Watcher | None, path: str, child: bool) -> _ArmedWatch | None:
        return None if watch is None else _ArmedWatch(self, path, child, watch)

    def _orphan(self, armed: _ArmedWatch) -> None:
        """kazoo dropped this watch (connection loss): re-arm it once connected again."""
        with self._lock:
            self._orphaned.append(armed)
        if self._client.connected:
            self._schedule_rearm()

    def _schedule_rearm(self) -> None:
        threading.Thread(target=self._rearm, name="zk-rearm-watches", daemon=True).start()

    def _rearm(self) -> None:
        """What SetWatches does in the Java client: fire watches whose node changed, re-arm the rest."""
        with self._lock:
            orphaned, self._orphaned = self._orphaned, []
        for armed in orphaned:
            if self._closed or self._expired.is_set():
                return
            try:
                if armed.child:
                    try:
                        _, stat = self._client.get_children(armed.path, armed, include_data=True)
                    except kz.NoNodeError:
                        armed.fire(EventType.DELETED)
                        continue
                    if stat.pzxid != armed.zxid:
                        armed.fire(EventType.CHILD)
                    continue
                stat = self._client.exists(armed.path, armed)
                now = None if stat is None else stat.mzxid
                if now != armed.zxid:
                    if now is None:
                        armed.fire(EventType.DELETED)
                    else:
                        armed.fire(EventType.CREATED if armed.zxid is None else EventType.CHANGED)
            except (kz.KazooException, KazooTimeoutError):
                self._orphan(armed)  # lost again: the next CONNECTED retries
                return

    # --- operations ------------------------------------------------------------------

    def create(self, path: str, data: bytes = b"", ephemeral: bool = False, sequential: bool = False) -> str:
        _validate_op(Create(path, data, ephemeral, sequential))
        if path == "/" and not sequential:
            raise NodeExists("cannot create /: the root always exists", "/")
        created: str = self._wait(
            "create",
            path,
            lambda: self._client.create_async(path, bytes(data), ephemeral=ephemeral, sequence=sequential),
        )
        return created

    def get(self, path: str, watch: Watcher | None = None) -> tuple[bytes, Stat]:
        validate_path(path)
        armed = self._watcher(watch, path, child=False)
        data, stat = self._wait("get", path, lambda: self._client.get_async(path, armed))
        if armed is not None:
            armed.zxid = stat.mzxid
        return data or b"", to_stat(stat)

    def set(self, path: str, data: bytes, expected_version: int = ANY_VERSION) -> Stat:
        validate_path(path)
        validate_data(path, data)
        _validate_version(path, expected_version)
        return to_stat(self._wait("set", path, lambda: self._client.set_async(path, bytes(data), expected_version)))

    def delete(self, path: str, expected_version: int = ANY_VERSION) -> None:
        validate_path(path)
        _validate_version(path, expected_version)
        if path == "/":
            raise InvalidArgument("cannot delete /: the root always exists", "/")
        self._wait("delete", path, lambda: self._client.delete_async(path, expected_version))

    def exists(self, path: str, watch: Watcher | None = None) -> Stat | None:
        validate_path(path)
        armed = self._watcher(watch, path, child=False)
        stat = self._wait("stat", path, lambda: self._client.exists_async(path, armed))
        if armed is not None:
            armed.zxid = None if stat is None else stat.mzxid
        return None if stat is None else to_stat(stat)

    def children(self, path: str, watch: Watcher | None = None) -> list[str]:
        validate_path(path)
        armed = self._watcher(watch, path, child=True)
        names, stat = self._wait(
            "list children of", path, lambda: self._client.get_children_async(path, armed, include_data=True)
        )
        if armed is not None:
            armed.zxid = stat.pzxid
        return sorted(names)

    def multi(self, ops: Sequence[Op]) -> list[OpResult]:
        ops = list(ops)
        for op in ops:
            _validate_op(op)
        if not ops:
            return []
        for i, op in enumerate(ops):
            if isinstance(op, Create) and op.path == "/" and not op.sequential:
                raise MultiFailed(i, NodeExists("cannot create /: the root always exists", "/"))
            if isinstance(op, Delete) and op.path == "/":
                raise MultiFailed(i, InvalidArgument("cannot delete /: the root always exists", "/"))
        txn = self._client.transaction()
        for op in ops:
            if isinstance(op, Check):
                txn.check(op.path, op.version)
            elif isinstance(op, Create):
                txn.create(op.path, bytes(op.data), ephemeral=op.ephemeral, sequence=op.sequential)
            elif isinstance(op, SetData):
                txn.set_data(op.path, bytes(op.data), op.version)
            else:
                txn.delete(op.path, op.version)
        results = self._wait("apply a multi at", ops[0].path, txn.commit_async)
        for i, result in enumerate(results):
            if isinstance(result, Exception) and not isinstance(result, kz.RolledBackError | kz.RuntimeInconsistency):
                op = ops[i]
                verb = {Check: "check", Create: "create", SetData: "set", Delete: "delete"}[type(op)]
                raise MultiFailed(i, typed_error(result, verb, op.path))
        if any(isinstance(r, Exception) for r in results):
            raise MultiFailed(0, MetadataError(f"multi failed without a cause from ZooKeeper: {results!r}"))
        return [to_stat(r) if isinstance(r, ZnodeStat) else r for r in results]
