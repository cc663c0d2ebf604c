"""The bookie registry: ephemeral nodes under /ledgers/available (BookKeeper's layout).

A writable bookie holds /ledgers/available/<bookie-id>, a read-only one
/ledgers/available/readonly/<bookie-id>; both are ephemeral, so a bookie whose
session closes or expires drops out of the cluster by itself. The node's data is a
small JSON object: {"bookie_id": ..., "readonly": ..., "rack": ..., "properties": {...}}. Its
"properties" are in the spirit of BookKeeper's BookieServiceInfo (whose properties map the bookie
fills from its configuration): "nettyMaxFrameSizeBytes", the largest entry the bookie takes, as a
decimal string, so that brokers can check their largest entry against it. A reader ignores keys it
does not know, and a node without a property (an older bookie) reads as None.

Membership watches turn ZooKeeper's one-shot child watches into a stream: the
callback is told of the current (writable, read-only) sets at once and again every
time either set changes; the watches are re-armed on every firing.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from impl.metadata import layout
from impl.metadata.ledger import BookieId
from impl.metadata.store import (
    Create,
    Delete,
    MetadataError,
    MetadataStore,
    MultiFailed,
    NodeExists,
    NoNode,
    WatchedEvent,
)


class BookieAlreadyRegistered(MetadataError):
    """Another live session holds this bookie id's registration node."""

    code = "BookieException.MetadataStoreException"


class BookieNotRegistered(MetadataError):
    code = "BookieException.MetadataStoreException"


@dataclass(frozen=True)
class BookieInfo:
    bookie_id: BookieId
    readonly: bool
    rack: str | None
    http_url: str | None = None  # the bookie's HTTP service (/metrics, info), when it runs one
    # BookKeeper's nettyMaxFrameSizeBytes as the bookie published it; None: not published (an older bookie)
    netty_max_frame_size_bytes: int | None = None


# The property of a registration that carries the bookie's frame limit (BookKeeper's setting's name).
NETTY_MAX_FRAME_SIZE_BYTES = "nettyMaxFrameSizeBytes"


@dataclass(frozen=True)
class Membership:
    writable: frozenset[BookieId]
    readonly: frozenset[BookieId]


MembershipCallback = Callable[[Membership], None]


class MembershipWatch:
    """A live membership subscription; `cancel()` stops further callbacks."""

    def __init__(self, registry: BookieRegistry, callback: MembershipCallback) -> None:
        self._registry = registry
        self._callback = callback
        self._lock = threading.Lock()
        self._last: Membership | None = None
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True

    def _on_event(self, _event: WatchedEvent) -> None:
        self.refresh()

    def refresh(self) -> None:
        """Re-read both sets, re-arming the child watches, and report a change."""
        if self.cancelled:
            return
        with self._lock:
            try:
                membership = self._registry._membership(watch=self._on_event)
            except MetadataError:
                # Session gone (closed/expired): the store drops our watches too; nothing left to report.
                return
            if membership == self._last or self.cancelled:
                return
            self._last = membership
        self._callback(membership)


class BookieRegistry:
    def __init__(self, store: MetadataStore) -> None:
        self.store = store
        self._prepared = False

    def _prepare(self) -> None:
        if not self._prepared:
            self.store.ensure_path(layout.READONLY)  # also creates /ledgers/available
            self._prepared = True

    def register(
        self,
        bookie_id: BookieId,
        readonly: bool = False,
        rack: str | None = None,
        http_url: str | None = None,
        netty_max_frame_size_bytes: int | None = None,
    ) -> None:
        """Announce this bookie with an ephemeral node owned by this store session; a bookie publishes
        its frame limit (`netty_max_frame_size_bytes`) there for the brokers to check."""
        self._prepare()
        path = layout.bookie_path(bookie_id, readonly)
        data = _registration(bookie_id, readonly, rack, http_url, netty_max_frame_size_bytes)
        try:
            self.store.create(path, data, ephemeral=True)
        except NodeExists as e:
            raise BookieAlreadyRegistered(
                f"bookie {bookie_id} is already registered at {path}; if a previous run of this bookie "
                "crashed, wait for its session to expire, otherwise give this bookie another id",
                path,
            ) from e

    def register_after_expiry(
        self,
        bookie_id: BookieId,
        readonly: bool = False,
        rack: str | None = None,
        http_url: str | None = None,
        netty_max_frame_size_bytes: int | None = None,
        *,
        wait_s: float,
        on_wait: Callable[[], None] | None = None,
    ) -> None:
        """`register`, but a node left by a previous session (a crashed run of this bookie) is
        waited out for up to `wait_s` seconds, as a BookKeeper bookie waits at start for its old
        registration to expire; `on_wait` is called once if it has to wait. A node that is still
        there after `wait_s` (another live bookie with this id) raises BookieAlreadyRegistered."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                self.register(bookie_id, readonly, rack, http_url, netty_max_frame_size_bytes)
                return
            except BookieAlreadyRegistered:
                if time.monotonic() >= deadline:
                    raise
                if on_wait is not None:
                    on_wait()
                    on_wait = None
                time.sleep(0.1)

    def set_readonly(self, bookie_id: BookieId, readonly: bool) -> None:
        """Move this bookie's registration between the writable and read-only sets, atomically."""
        info = self.bookie_info(bookie_id)
        if info.readonly == readonly:
            return
        source = layout.bookie_path(bookie_id, info.readonly)
        target = layout.bookie_path(bookie_id, readonly)
        data = _registration(bookie_id, readonly, info.rack, info.http_url, info.netty_max_frame_size_bytes)
        try:
            self.store.multi([Delete(source), Create(target, data, ephemeral=True)])
        except MultiFailed as e:
            raise BookieNotRegistered(
                f"could not move bookie {bookie_id} from {source} to {target}: {e.cause}; register it again", target
            ) from e

    def unregister(self, bookie_id: BookieId) -> None:
        """Remove this bookie's registration (whichever set it is in). Raises BookieNotRegistered."""
        for readonly in (False, True):
            try:
                self.store.delete(layout.bookie_path(bookie_id, readonly))
                return
            except NoNode:
                continue
        raise BookieNotRegistered(f"bookie {bookie_id} is not registered; nothing to unregister")

    def bookie_info(self, bookie_id: BookieId) -> BookieInfo:
        for readonly in (False, True):
            path = layout.bookie_path(bookie_id, readonly)
            try:
                data, _ = self.store.get(path)
            except NoNode:
                continue
            return BookieInfo(bookie_id, readonly, _rack_of(data), _text(data, "http_url"), _frame_size_of(data))
        raise BookieNotRegistered(f"bookie {bookie_id} is not registered (no node under {layout.AVAILABLE})")

    def all_bookies(self) -> list[BookieInfo]:
        """Every registered bookie, writable or read-only, by id (one that leaves meanwhile is left out)."""
        membership = self.membership()
        found = []
        for bookie_id in sorted(membership.writable | membership.readonly, key=str):
            try:
                found.append(self.bookie_info(bookie_id))
            except BookieNotRegistered:
                continue
        return found

    def writable_bookies(self) -> frozenset[BookieId]:
        return self._membership().writable

    def readonly_bookies(self) -> frozenset[BookieId]:
        return self._membership().readonly

    def membership(self) -> Membership:
        return self._membership()

    def watch_membership(self, callback: MembershipCallback) -> MembershipWatch:
        """Call `callback(Membership)` now and whenever the writable or read-only set changes."""
        self._prepare()
        subscription = MembershipWatch(self, callback)
        subscription.refresh()
        return subscription

    def _membership(self, watch: Callable[[WatchedEvent], None] | None = None) -> Membership:
        self._prepare()
        writable = self.store.children(layout.AVAILABLE, watch)
        readonly = self.store.children(layout.READONLY, watch)
        return Membership(
            writable=frozenset(name for name in writable if name != "readonly"),
            readonly=frozenset(readonly),
        )


def _registration(
    bookie_id: BookieId, readonly: bool, rack: str | None, http_url: str | None, frame_size: int | None
) -> bytes:
    doc: dict[str, object] = {"bookie_id": bookie_id, "readonly": readonly, "rack": rack}
    if http_url:
        doc["http_url"] = http_url
    if frame_size is not None:
        # A string, as BookieServiceInfo's properties are (map<string, string>).
        doc["properties"] = {NETTY_MAX_FRAME_SIZE_BYTES: str(frame_size)}
    return json.dumps(doc, sort_keys=True).encode()


def _field(data: bytes, name: str) -> object:
    try:
        return json.loads(data.decode()).get(name)
    except (ValueError, AttributeError):
        return None  # a node written by other tooling: registered, the field unknown


def _text(data: bytes, name: str) -> str | None:
    value = _field(data, name)
    return value if isinstance(value, str) else None


def _frame_size_of(data: bytes) -> int | None:
    properties = _field(data, "properties")
    value = properties.get(NETTY_MAX_FRAME_SIZE_BYTES) if isinstance(properties, dict) else None
    if isinstance(value, str) and value.isdecimal() and int(value) > 0:
        return int(value)
    return None  # not published, or unreadable: the reader assumes a default


def _rack_of(data: bytes) -> str | None:
    return _text(data, "rack")
