"""The embedded metadata store (`embedded:///abs/dir`): ZooKeeper's semantics over SQLite.

Durability: WAL journal with synchronous=FULL, so a write is on disk before it is
acknowledged and survives SIGKILL (or power loss) of the writer. Every write is one
`BEGIN IMMEDIATE` transaction, so several threads and several processes may share
one directory; versions, cversions and zxids live in the database and survive reopening.

Sessions are rows with a heartbeat and a timeout. Each client refreshes its row from
a heartbeat thread; any client reaps sessions whose heartbeat is older than their
timeout and deletes their ephemeral nodes. A client that finds its own row gone tells
its listeners EXPIRED and raises SessionExpired from then on.

Watches: every mutation appends (path, event) rows to a `changes` table in the same
transaction. A read that leaves a watch records the last change seq it saw; a
background thread follows the table and fires each watch once on the first matching
change after that seq (callbacks run on that thread and must not block).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from impl.metadata.memory import validate_op
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
    parent_of,
    validate_path,
)

log = logging.getLogger(__name__)

DB_FILE = "metadata.sqlite"
# Waiting for another writer's lock: generous, a writer holds it only for one transaction.
BUSY_TIMEOUT_MS = 60_000
WATCH_POLL_S = 0.01
# Change rows older than this are pruned; a watch only needs the rows after its read.
CHANGE_RETENTION_S = 120.0

SCHEMA = """
CREATE TABLE IF NOT EXISTS nodes (
    path TEXT PRIMARY KEY,
    parent TEXT NOT NULL,
    data BLOB NOT NULL,
    version INTEGER NOT NULL,
    cversion INTEGER NOT NULL,
    child_creations INTEGER NOT NULL,
    czxid INTEGER NOT NULL,
    mzxid INTEGER NOT NULL,
    ephemeral_owner INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS nodes_by_parent ON nodes(parent);
CREATE INDEX IF NOT EXISTS nodes_by_owner ON nodes(ephemeral_owner);
CREATE TABLE IF NOT EXISTS sessions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    heartbeat REAL NOT NULL,
    timeout REAL NOT NULL,
    pid INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS changes (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    path TEXT NOT NULL,
    event TEXT NOT NULL,
    at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS changes_by_time ON changes(at);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO counters VALUES ('zxid', 0);
INSERT OR IGNORE INTO nodes VALUES ('/', '', X'', 0, 0, 0, 0, 0, 0);
"""

NODE_COLUMNS = "data, version, cversion, child_creations, czxid, mzxid, ephemeral_owner"


@dataclass
class Row:
    data: bytes
    version: int
    cversion: int
    child_creations: int
    czxid: int
    mzxid: int
    ephemeral_owner: int
    num_children: int

    def stat(self) -> Stat:
        return Stat(
            version=self.version,
            cversion=self.cversion,
            czxid=self.czxid,
            mzxid=self.mzxid,
            ephemeral_owner=self.ephemeral_owner,
            data_length=len(self.data),
            num_children=self.num_children,
        )


@dataclass
class PendingWatch:
    path: str
    watcher: Watcher
    child: bool
    after_seq: int  # fire on the first matching change with a greater seq


class SessionGone(Exception):
    """Internal: this client's session row is missing (expired by a reaper or expire_session)."""


def open_db(path: Path) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None, check_same_thread=False)
    db.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
    # Switching to WAL can fail with "database is locked" without waiting on the busy handler while another
    # process opens the same file (seen with four bookies starting at once): retry until the busy timeout.
    deadline = time.monotonic() + BUSY_TIMEOUT_MS / 1000
    while True:
        try:
            db.execute("PRAGMA journal_mode=WAL")
            break
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or time.monotonic() >= deadline:
                db.close()
                raise
            time.sleep(0.01)
    db.execute("PRAGMA synchronous=FULL")
    return db


@contextlib.contextmanager
def write_txn(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    db.execute("BEGIN IMMEDIATE")
    try:
        yield db
    except BaseException:
        db.execute("ROLLBACK")
        raise
    db.execute("COMMIT")


@contextlib.contextmanager
def read_txn(db: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    db.execute("BEGIN")
    try:
        yield db
    finally:
        db.execute("COMMIT")


def fetch_node(db: sqlite3.Connection, path: str) -> Row | None:
    found = db.execute(f"SELECT {NODE_COLUMNS} FROM nodes WHERE path = ?", (path,)).fetchone()
    if found is None:
        return None
    (num_children,) = db.execute("SELECT COUNT(*) FROM nodes WHERE parent = ?", (path,)).fetchone()
    version, cversion, child_creations, czxid, mzxid, owner = found[1:]
    return Row(bytes(found[0]), version, cversion, child_creations, czxid, mzxid, owner, num_children)


def last_change(db: sqlite3.Connection) -> int:
    (seq,) = db.execute("SELECT COALESCE(MAX(seq), 0) FROM changes").fetchone()
    if seq == 0:  # the table may have been pruned empty: AUTOINCREMENT keeps the high-water mark here
        found = db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'changes'").fetchone()
        seq = found[0] if found else 0
    return int(seq)


class Writer:
    """Applies ops inside one write transaction, recording change rows for watches."""

    def __init__(self, db: sqlite3.Connection, session_id: int) -> None:
        self.db = db
        self.session_id = session_id
        (self.zxid,) = db.execute(
            "UPDATE counters SET value = value + 1 WHERE name = 'zxid' RETURNING value"
        ).fetchone()
        self.now = time.time()

    def event(self, path: str, event: EventType) -> None:
        self.db.execute("INSERT INTO changes (path, event, at) VALUES (?, ?, ?)", (path, event.value, self.now))

    def versioned(self, path: str, expected_version: int, what: str) -> Row:
        row = fetch_node(self.db, path)
        if row is None:
            raise NoNode(f"cannot {what} {path}: it does not exist", path)
        if expected_version != ANY_VERSION and expected_version != row.version:
            raise BadVersion(
                f"cannot {what} {path}: expected version {expected_version} but it is at {row.version}; "
                "re-read it and retry",
                path,
            )
        return row

    def apply(self, op: Op) -> OpResult:
        if isinstance(op, Check):
            self.versioned(op.path, op.version, "check")
            return True
        if isinstance(op, Create):
            return self.create(op)
        if isinstance(op, SetData):
            row = self.versioned(op.path, op.version, "set")
            self.db.execute(
                "UPDATE nodes SET data = ?, version = version + 1, mzxid = ? WHERE path = ?",
                (bytes(op.data), self.zxid, op.path),
            )
            self.event(op.path, EventType.CHANGED)
            row.data, row.version, row.mzxid = bytes(op.data), row.version + 1, self.zxid
            return row.stat()
        self.delete(op.path, op.version)
        return True

    def create(self, op: Create) -> str:
        if op.path == "/" and not op.sequential:
            raise NodeExists("cannot create /: the root always exists", "/")
        parent_path = parent_of(op.path)
        parent = fetch_node(self.db, parent_path)
        if parent is None:
            raise NoNode(f"cannot create {op.path}: parent {parent_path} does not exist; create it first", op.path)
        # ZooKeeper's sequential suffix counts child creations only (deletions bump cversion, not it).
        path = f"{op.path}{parent.child_creations:010d}" if op.sequential else op.path
        if fetch_node(self.db, path) is not None:
            raise NodeExists(f"cannot create {path}: it already exists", path)
        if parent.ephemeral_owner != 0:
            raise NoChildrenForEphemerals(
                f"cannot create {path}: parent {parent_path} is ephemeral and cannot have children", path
            )
        self.db.execute(
            "UPDATE nodes SET cversion = cversion + 1, child_creations = child_creations + 1 WHERE path = ?",
            (parent_path,),
        )
        self.db.execute(
            f"INSERT INTO nodes (path, parent, {NODE_COLUMNS}) VALUES (?, ?, ?, 0, 0, 0, ?, ?, ?)",
            (path, parent_path, bytes(op.data), self.zxid, self.zxid, self.session_id if op.ephemeral else 0),
        )
        self.event(path, EventType.CREATED)
        self.event(parent_path, EventType.CHILD)
        return path

    def delete(self, path: str, expected_version: int) -> None:
        if path == "/":
            raise InvalidArgument("cannot delete /: the root always exists", "/")
        row = self.versioned(path, expected_version, "delete")
        if row.num_children:
            raise NotEmpty(f"cannot delete {path}: it has {row.num_children} children; delete them first", path)
        parent_path = parent_of(path)
        self.db.execute("DELETE FROM nodes WHERE path = ?", (path,))
        self.db.execute("UPDATE nodes SET cversion = cversion + 1 WHERE path = ?", (parent_path,))
        self.event(path, EventType.DELETED)
        self.event(parent_path, EventType.CHILD)

    def end_session(self, session_id: int) -> None:
        """Delete a session's row and its ephemeral nodes (children of ephemerals cannot exist)."""
        owned = [p for (p,) in self.db.execute("SELECT path FROM nodes WHERE ephemeral_owner = ?", (session_id,))]
        for path in sorted(owned):
            self.delete(path, ANY_VERSION)
        self.db.execute("DELETE FROM sessions WHERE id = ?", (session_id,))


def reap_expired_sessions(db: sqlite3.Connection) -> list[int]:
    """End every session whose heartbeat is older than its timeout; returns their ids."""
    now = time.time()
    with write_txn(db):
        expired = [sid for (sid,) in db.execute("SELECT id FROM sessions WHERE heartbeat + timeout < ?", (now,))]
        if expired:
            writer = Writer(db, 0)
            for sid in expired:
                writer.end_session(sid)
        db.execute("DELETE FROM changes WHERE at < ?", (now - CHANGE_RETENTION_S,))
    return expired


class EmbeddedStore(MetadataStore):
    """One client session on the SQLite metadata store in `directory`."""

    def __init__(self, directory: str | os.PathLike[str], session_timeout_s: float = 10.0) -> None:
        if not session_timeout_s > 0:
            raise InvalidArgument(f"session timeout must be > 0 seconds, not {session_timeout_s!r}")
        self.directory = Path(directory)
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise InvalidArgument(f"cannot use {self.directory} as an embedded metadata directory: {e}") from e
        self.db_path = self.directory / DB_FILE
        self.session_timeout_s = session_timeout_s
        try:
            self._db = open_db(self.db_path)
        except sqlite3.Error as e:
            raise InvalidArgument(f"cannot open the embedded metadata store {self.db_path}: {e}") from e
        self._lock = threading.RLock()  # one connection per store, shared by the caller's threads
        with self._lock:
            with write_txn(self._db):
                for statement in SCHEMA.strip().split(";"):
                    if statement.strip():
                        self._db.execute(statement)
            reap_expired_sessions(self._db)
            with write_txn(self._db):
                (self._session_id,) = self._db.execute(
                    "INSERT INTO sessions (heartbeat, timeout, pid) VALUES (?, ?, ?) RETURNING id",
                    (time.time(), session_timeout_s, os.getpid()),
                ).fetchone()
        self._ended = False  # closed or expired: no more operations
        self._released = False  # close()/expire_session() ran: threads stopped, connection closed
        self._expired = False
        self._listeners: list[SessionListener] = []
        self._watches: list[PendingWatch] = []
        self._watch_cond = threading.Condition()
        self._stop = threading.Event()
        self._heartbeat = threading.Thread(
            target=self._heartbeat_loop, name=f"embedded-heartbeat-{self._session_id}", daemon=True
        )
        self._watcher = threading.Thread(
            target=self._watch_loop, name=f"embedded-watch-{self._session_id}", daemon=True
        )
        self._heartbeat.start()
        self._watcher.start()

    @property
    def session_id(self) -> int:
        return int(self._session_id)

    # --- session handling -----------------------------------------------------------

    def _check_alive(self) -> None:
        if self._expired:
            raise SessionExpired(
                f"session {self.session_id} expired: its ephemeral nodes are gone; open a new store", None
            )
        if self._ended:
            raise SessionExpired(f"session {self.session_id} is closed; open a new store", None)

    def _session_present(self, db: sqlite3.Connection) -> None:
        if db.execute("SELECT 1 FROM sessions WHERE id = ?", (self._session_id,)).fetchone() is None:
            raise SessionGone

    def _on_session_gone(self) -> SessionExpired:
        self._mark_expired()
        return SessionExpired(
            f"session {self.session_id} expired (no heartbeat within {self.session_timeout_s}s, or expired on "
            "purpose): its ephemeral nodes are gone; open a new store"
        )

    def _mark_expired(self) -> None:
        with self._lock:
            if self._ended:
                return
            self._ended = self._expired = True
            listeners = list(self._listeners)
        self._stop.set()
        with self._watch_cond:
            self._watches.clear()
            self._watch_cond.notify_all()
        for listener in listeners:
            listener(SessionState.EXPIRED)

    def _heartbeat_loop(self) -> None:
        db = open_db(self.db_path)
        interval = min(self.session_timeout_s / 3, 1.0)
        try:
            while not self._stop.wait(interval):
                try:
                    with write_txn(db):
                        beat = db.execute(
                            "UPDATE sessions SET heartbeat = ? WHERE id = ?", (time.time(), self._session_id)
                        )
                        alive = beat.rowcount == 1
                    if not alive:
                        self._mark_expired()
                        return
                    reap_expired_sessions(db)
                except sqlite3.Error:
                    continue  # a busy or vanished database: try again next beat
        finally:
            db.close()

    # --- watches ------------------------------------------------------------------------

    def _add_watch(self, watch: PendingWatch) -> None:
        with self._watch_cond:
            self._watches.append(watch)
            self._watch_cond.notify_all()

    @staticmethod
    def _matches(watch: PendingWatch, seq: int, path: str, event: EventType) -> bool:
        if watch.path != path or seq <= watch.after_seq:
            return False
        if watch.child:
            return event in (EventType.CHILD, EventType.DELETED)
        return event in (EventType.CREATED, EventType.CHANGED, EventType.DELETED)

    def _watch_loop(self) -> None:
        db = open_db(self.db_path)
        try:
            while not self._stop.is_set():
                with self._watch_cond:
                    if not self._watches:
                        self._watch_cond.wait(0.5)
                        continue
                    since = min(w.after_seq for w in self._watches)
                try:
                    changes = db.execute(
                        "SELECT seq, path, event FROM changes WHERE seq > ? ORDER BY seq", (since,)
                    ).fetchall()
                except sqlite3.Error:
                    changes = []
                fired: list[tuple[Watcher, WatchedEvent]] = []
                with self._watch_cond:
                    for seq, path, event_name in changes:
                        event = EventType(event_name)
                        for w in [w for w in self._watches if self._matches(w, seq, path, event)]:
                            if w not in self._watches:
                                continue
                            # Like ZooKeeper, the same watcher left twice on a path before it fires fires once.
                            self._watches = [
                                o
                                for o in self._watches
                                if not (o.path == w.path and o.child == w.child and o.watcher == w.watcher)
                                or o.after_seq >= seq
                            ]
                            fired.append((w.watcher, WatchedEvent(event, path)))
                    if changes:
                        for w in self._watches:
                            w.after_seq = max(w.after_seq, changes[-1][0])
                for watcher, watched in fired:
                    try:
                        watcher(watched)
                    except Exception:  # a failing callback must not stop delivery to the others
                        log.exception("watch callback %r failed on %s", watcher, watched)
                self._stop.wait(WATCH_POLL_S)
        finally:
            db.close()

    # --- operations -------------------------------------------------------------------

    def _transact(self, ops: Sequence[Op]) -> list[OpResult]:
        for index, op in enumerate(ops):
            try:
                validate_op(op)
            except MetadataError as cause:
                raise MultiFailed(index, cause) from cause
        try:
            with self._lock:  # released before listeners hear of an expiry: they may call close()
                self._check_alive()
                try:
                    with write_txn(self._db):
                        self._session_present(self._db)
                        writer = Writer(self._db, self._session_id)
                        results: list[OpResult] = []
                        for index, op in enumerate(ops):
                            try:
                                results.append(writer.apply(op))
                            except MetadataError as cause:
                                raise MultiFailed(index, cause) from cause
                except sqlite3.Error as e:
                    raise ConnectionLoss(f"embedded store {self.db_path}: {e}; nothing was applied, retry") from e
        except SessionGone:
            raise self._on_session_gone() from None
        return results

    def _one(self, op: Op) -> OpResult:
        try:
            return self._transact([op])[0]
        except MultiFailed as failed:
            raise failed.cause from None

    def _read(
        self, path: str, watch: Watcher | None, child: bool = False, on_missing: bool = False
    ) -> tuple[Row | None, list[str]]:
        validate_path(path)
        try:
            with self._lock:
                self._check_alive()
                try:
                    with read_txn(self._db):
                        self._session_present(self._db)
                        row = fetch_node(self._db, path)
                        names = (
                            [n for (n,) in self._db.execute("SELECT path FROM nodes WHERE parent = ?", (path,))]
                            if child and row is not None
                            else []
                        )
                        seen = last_change(self._db) if watch is not None else 0
                except sqlite3.Error as e:
                    raise ConnectionLoss(f"embedded store {self.db_path}: {e}; retry the read") from e
        except SessionGone:
            raise self._on_session_gone() from None
        if watch is not None and (row is not None or on_missing):
            self._add_watch(PendingWatch(path, watch, child, seen))
        return row, sorted(n.rsplit("/", 1)[1] for n in names)

    def create(self, path: str, data: bytes = b"", ephemeral: bool = False, sequential: bool = False) -> str:
        result = self._one(Create(path, data, ephemeral, sequential))
        assert isinstance(result, str)
        return result

    def get(self, path: str, watch: Watcher | None = None) -> tuple[bytes, Stat]:
        row, _ = self._read(path, watch)
        if row is None:
            raise NoNode(f"cannot get {path}: it does not exist", path)
        return row.data, row.stat()

    def set(self, path: str, data: bytes, expected_version: int = ANY_VERSION) -> Stat:
        result = self._one(SetData(path, data, expected_version))
        assert isinstance(result, Stat)
        return result

    def delete(self, path: str, expected_version: int = ANY_VERSION) -> None:
        self._one(Delete(path, expected_version))

    def exists(self, path: str, watch: Watcher | None = None) -> Stat | None:
        row, _ = self._read(path, watch, on_missing=True)
        return None if row is None else row.stat()

    def children(self, path: str, watch: Watcher | None = None) -> list[str]:
        row, names = self._read(path, watch, child=True)
        if row is None:
            raise NoNode(f"cannot list children of {path}: it does not exist", path)
        return names

    def multi(self, ops: Sequence[Op]) -> list[OpResult]:
        return self._transact(list(ops))

    def add_session_listener(self, listener: SessionListener) -> None:
        with self._lock:
            self._listeners.append(listener)

    def _end(self, expired: bool) -> None:
        with self._lock:
            if self._released:
                return
            self._released = True
            if not self._ended:
                with contextlib.suppress(sqlite3.Error), write_txn(self._db):
                    Writer(self._db, self._session_id).end_session(self._session_id)
        if expired:
            self._mark_expired()
        with self._lock:
            self._ended = True
        self._stop.set()
        with self._watch_cond:
            self._watches.clear()
            self._watch_cond.notify_all()
        for thread in (self._heartbeat, self._watcher):
            if thread is not threading.current_thread():
                thread.join()
        with self._lock:
            self._db.close()

    def expire_session(self) -> None:
        self._end(expired=True)

    def close(self) -> None:
        self._end(expired=False)
