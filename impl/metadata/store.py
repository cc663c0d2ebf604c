"""The metadata store contract: ZooKeeper's semantics, one interface, three backends.

Backends (selected by URL in `impl.metadata.connect`):
  - `zk://host:port[,host:port...][/chroot]`: a real ZooKeeper through kazoo;
  - `embedded:///path/to/dir`: durable SQLite store for standalone and tests;
  - `memory://name`: the pure in-memory model (no I/O) for conformance and hypothesis.

A `MetadataStore` object is one client *session*. Every backend must give the same
answers for every operation below; the contract test suite checks this against a
plain reference model and against a real ZooKeeper.

Semantics (as ZooKeeper 3.8):
  - Paths are absolute, `/`-separated, no trailing slash (except the root `/`), no
    empty, `.` or `..` components, no NUL. The root always exists.
  - Data is bytes, at most `MAX_DATA_BYTES`; larger data raises `InvalidArgument`
    before anything is sent, so every backend fails identically.
  - Versions: a node is created with `version == 0`; every `set` increments it.
    `expected_version == ANY_VERSION` (-1) skips the check; otherwise a mismatch
    raises `BadVersion`. `cversion` counts child creations and deletions.
  - `create(sequential=True)` appends the parent's `cversion` at the time of the
    create, zero-padded to 10 digits (`/a/n-` -> `/a/n-0000000003`).
  - Ephemeral nodes belong to the creating session, vanish when it closes or
    expires, and cannot have children (`NoChildrenForEphemerals`).
  - Watches are one-shot callbacks, ZooKeeper style: a data watch (set by `get` or
    `exists`) fires once on CREATED, CHANGED or DELETED of that path; a child watch
    (set by `children`) fires once on CHILD (a child added or removed) or DELETED.
    Callbacks run on a backend thread (or synchronously in the pure model) and must
    not block.
  - Session listeners are told of state changes: CONNECTED, SUSPENDED (connection
    lost, session may still be alive) and EXPIRED (ephemerals are gone; the client
    must never act on the old session again: BookKeeper issue 4462). A component renews with
    `impl.metadata.renewal.SessionRenewer`, which retries until a new session is adopted.
  - Deadlines: no operation waits for ever. The zk:// backend raises ConnectionLoss when ZooKeeper
    has not answered within its operation timeout (default max(2 x session timeout, 10 s)); the
    embedded backend when the database stays locked for 60 s (SQLite's busy timeout); the memory
    model never waits.
"""

from __future__ import annotations

import contextlib
import enum
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass

ANY_VERSION = -1
# ZooKeeper's default jute.maxbuffer is 1 MiB for the whole packet; leave room for
# the path and framing so that a value accepted here is accepted by a real server.
MAX_DATA_BYTES = 1024 * 1024 - 1024


# --- errors -------------------------------------------------------------------


class MetadataError(Exception):
    """Base of every metadata store error. `path` is the node concerned, if any."""

    code = "METADATA_ERROR"

    def __init__(self, message: str, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class BadVersion(MetadataError):
    """A conditional write or delete named a version the node no longer has."""

    code = "BADVERSION"


class NoNode(MetadataError):
    """The node (or, for create, its parent) does not exist."""

    code = "NONODE"


class NodeExists(MetadataError):
    """create() of a path that already exists."""

    code = "NODEEXISTS"


class NotEmpty(MetadataError):
    """delete() of a node that still has children."""

    code = "NOTEMPTY"


class NoChildrenForEphemerals(MetadataError):
    """create() under an ephemeral node."""

    code = "NOCHILDRENFOREPHEMERALS"


class SessionExpired(MetadataError):
    """The session is gone: its ephemeral nodes were deleted; open a new store."""

    code = "SESSIONEXPIRED"


class ConnectionLoss(MetadataError):
    """The connection dropped mid-operation: the operation may or may not have applied."""

    code = "CONNECTIONLOSS"


class InvalidArgument(MetadataError):
    """A malformed path, oversize data, or a malformed request; nothing was changed."""

    code = "BADARGUMENTS"


# --- values ---------------------------------------------------------------------


@dataclass(frozen=True)
class Stat:
    """ZooKeeper's node stat, restricted to what every backend can answer identically.

    czxid/mzxid are transaction ids (monotonic per store), not wall-clock times,
    so the pure model stays deterministic.
    """

    version: int
    cversion: int
    czxid: int
    mzxid: int
    ephemeral_owner: int  # session id of the owner, 0 for persistent nodes
    data_length: int
    num_children: int


class EventType(enum.Enum):
    CREATED = "created"
    CHANGED = "changed"
    DELETED = "deleted"
    CHILD = "child"


@dataclass(frozen=True)
class WatchedEvent:
    type: EventType
    path: str


class SessionState(enum.Enum):
    CONNECTED = "connected"
    SUSPENDED = "suspended"
    EXPIRED = "expired"


Watcher = Callable[[WatchedEvent], None]
SessionListener = Callable[[SessionState], None]


# --- multi ----------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    path: str
    version: int


@dataclass(frozen=True)
class Create:
    path: str
    data: bytes = b""
    ephemeral: bool = False
    sequential: bool = False


@dataclass(frozen=True)
class SetData:
    path: str
    data: bytes
    version: int = ANY_VERSION


@dataclass(frozen=True)
class Delete:
    path: str
    version: int = ANY_VERSION


Op = Check | Create | SetData | Delete
# multi() results, one per op: Check -> True, Create -> created path, SetData -> Stat, Delete -> True
OpResult = bool | str | Stat


class MultiFailed(MetadataError):
    """multi() applied nothing: op number `index` failed with `cause`."""

    code = "MULTIFAILED"

    def __init__(self, index: int, cause: MetadataError) -> None:
        super().__init__(f"multi op {index} failed, nothing applied: {cause}", cause.path)
        self.index = index
        self.cause = cause


# --- the contract -----------------------------------------------------------------


class MetadataStore(ABC):
    """One client session on a metadata store. See the module docstring for semantics."""

    @property
    @abstractmethod
    def session_id(self) -> int:
        """This session's id (non-zero); the `ephemeral_owner` of its ephemeral nodes."""

    @abstractmethod
    def create(self, path: str, data: bytes = b"", ephemeral: bool = False, sequential: bool = False) -> str:
        """Create a node; returns its actual path (with the sequence suffix if sequential).

        Raises NodeExists, NoNode (parent missing), NoChildrenForEphemerals, InvalidArgument.
        """

    @abstractmethod
    def get(self, path: str, watch: Watcher | None = None) -> tuple[bytes, Stat]:
        """Data and stat of a node. Raises NoNode. `watch` is a one-shot data watch."""

    @abstractmethod
    def set(self, path: str, data: bytes, expected_version: int = ANY_VERSION) -> Stat:
        """Conditional write. Raises BadVersion, NoNode, InvalidArgument."""

    @abstractmethod
    def delete(self, path: str, expected_version: int = ANY_VERSION) -> None:
        """Conditional delete. Raises BadVersion, NoNode, NotEmpty."""

    @abstractmethod
    def exists(self, path: str, watch: Watcher | None = None) -> Stat | None:
        """Stat or None. `watch` fires on the node's creation, change or deletion."""

    @abstractmethod
    def children(self, path: str, watch: Watcher | None = None) -> list[str]:
        """Child names (not paths), sorted. Raises NoNode. `watch` is a one-shot child watch."""

    @abstractmethod
    def multi(self, ops: Sequence[Op]) -> list[OpResult]:
        """Apply all ops atomically, or none: raises MultiFailed naming the first failing op."""

    @abstractmethod
    def add_session_listener(self, listener: SessionListener) -> None:
        """Be told of this session's state changes (SUSPENDED, CONNECTED, EXPIRED)."""

    @abstractmethod
    def expire_session(self) -> None:
        """Fault injection: make the server expire this session now (ephemerals vanish,
        listeners get EXPIRED, later calls raise SessionExpired)."""

    @abstractmethod
    def close(self) -> None:
        """End the session cleanly: its ephemeral nodes are deleted. Idempotent."""

    # Conveniences shared by every backend.

    def ensure_path(self, path: str) -> None:
        """Create `path` and any missing ancestors as empty persistent nodes."""
        parts = [p for p in path.split("/") if p]
        current = ""
        for part in parts:
            current += "/" + part
            if self.exists(current) is None:
                with contextlib.suppress(NodeExists):
                    self.create(current)

    def __enter__(self) -> MetadataStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def validate_path(path: str) -> None:
    """Raise InvalidArgument unless `path` is a well-formed absolute ZooKeeper path."""
    if not isinstance(path, str) or not path.startswith("/"):
        raise InvalidArgument(f"path must be absolute (start with '/'): {path!r}", str(path))
    if path == "/":
        return
    if path.endswith("/"):
        raise InvalidArgument(f"path must not end with '/': {path!r}", path)
    if "\x00" in path:
        raise InvalidArgument(f"path must not contain NUL: {path!r}", path)
    for part in path.split("/")[1:]:
        if part in ("", ".", ".."):
            raise InvalidArgument(f"path has an empty, '.' or '..' component: {path!r}", path)


def validate_data(path: str, data: bytes) -> None:
    """Raise InvalidArgument unless `data` is bytes of at most MAX_DATA_BYTES."""
    if not isinstance(data, bytes | bytearray):
        raise InvalidArgument(f"data for {path} must be bytes, not {type(data).__name__}", path)
    if len(data) > MAX_DATA_BYTES:
        raise InvalidArgument(
            f"data for {path} is {len(data)} bytes; the limit is {MAX_DATA_BYTES} (ZooKeeper's 1 MiB packet)",
            path,
        )


def parent_of(path: str) -> str:
    """The parent path of a non-root path."""
    head = path.rsplit("/", 1)[0]
    return head or "/"
