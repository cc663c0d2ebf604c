"""Topic ownership's pure core: which bundles this broker owns (spec/fencing.tla `believesOwner`).

A broker owns a bundle while its metadata session holds the ephemeral node
/namespace/<tenant>/<ns>/0x<lo>_0x<hi> with the broker's address as data. `OwnershipCore` decides;
it does no I/O, arms no watch and takes no lock. The shell (impl/broker/ownership.py's
`OwnershipCache`) feeds it typed inputs through one function, `step(event) -> list[Output]`, performs
the outputs against the metadata store and feeds their answers back. Every output that touches the
store names the `session` (a number the core bumps at each reconnection) it must be performed on,
and its answer carries that number back: an answer of an older session is stale and changes no
belief.

  AcquireOwnership   Acquire(token, bundle): already owned -> CompleteRequest(True); else
                     CreateOwnershipNode -> NodeCreated, or NodeCreateFailed: NoNode (the
                     namespace's first bundle) -> the same create with its parents, once; NodeExists
                     -> CheckOwnershipNode -> NodeChecked: ours (an earlier create applied although
                     its answer was lost) or CompleteRequest(False). Owning: WatchOwnNode (arms the
                     watch that notices a forced unload) -> CompleteRequest(still owned).
  believesOwner      `is_owned`, `owned_bundles`
  ownerNode          OwnerOf(token, bundle): ours, a cached owner, or ReadOwner (the read arms a
                     watch) -> OwnerRead: an owner is cached unless a watch fired during the read;
                     "unowned" is never cached. OwnerNodeChanged (that watch) invalidates.
  ExpireSession      SessionExpired(session): every bundle is lost at once (BundlesLost), the
                     owners' cache is dropped, and nothing is written on that session again
                     (BookKeeper issue 4462): Acquire fails with SessionExpired until Reconnect.
  Reconnect          Reconnect(token, session_id): a new session; the old beliefs are gone and no
                     node is re-created from them (the broker acquires afresh through lookup).
  RevalidateOwnership  always its "lost" branch: on expiry (above), and when our node is deleted or
                     taken (OwnNodeChanged, the watch -> WatchOwnNode -> NodeWatched not ours ->
                     BundlesLost: a forced unload). A watch that could not be armed (WatchFailed)
                     leaves the node unverified; SessionConnected checks it again.
  release            Release(token, bundle): stop believing, then (session alive) ReadOwnNode ->
                     DeleteOwnNode(version) only if the node is still ours -> CompleteRequest.
                     No BundlesLost: the broker gave it up itself.
  unload             Unload(token, bundle): BundlesLost([bundle]) first (topics close), then as
                     release; CompleteRequest(True), or CompleteRequest(False) if not owned.

Bad input and failures: a release or unload of a bundle not owned is a documented no-op
(CompleteRequest); a Reconnect while the session is alive fails with InvalidArgument and changes
nothing; a store error the rules do not absorb fails the request with that error (FailRequest);
an answer whose token or session is not the one waiting is ignored; an event of another type
raises TypeError.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from impl.metadata.store import BadVersion, InvalidArgument, MetadataError, NodeExists, NoNode, SessionExpired


class Bundle(Protocol):
    """What the core needs of a bundle: its ownership node's path (impl/broker/bundles.py's NamespaceBundle)."""

    @property
    def path(self) -> str: ...


# ---- inputs -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Acquire:
    """AcquireOwnership: own `bundle` now (already, or by creating its node)."""

    token: int
    bundle: Bundle


@dataclass(frozen=True)
class Release:
    """Give the bundle up (the broker unloaded its topics): delete our node; no BundlesLost."""

    token: int
    bundle: Bundle


@dataclass(frozen=True)
class Unload:
    """Unload gracefully: stop believing, BundlesLost, then free the node."""

    token: int
    bundle: Bundle


@dataclass(frozen=True)
class OwnerOf:
    """Who owns the bundle (the broker's address, or None)."""

    token: int
    bundle: Bundle


@dataclass(frozen=True)
class Reconnect:
    """Continue on a new session (`session_id`: its id, the ephemeral owner of its nodes)."""

    token: int
    session_id: int


@dataclass(frozen=True)
class SessionExpiredEvent:
    """The store reported session `session` EXPIRED: its ephemeral nodes are gone."""

    session: int


@dataclass(frozen=True)
class SessionConnected:
    """The store reported session `session` CONNECTED (again): check the unverified nodes."""

    session: int


@dataclass(frozen=True)
class NodeCreated:
    token: int
    session: int


@dataclass(frozen=True)
class NodeCreateFailed:
    """NodeExists: someone holds it; NoNode: its parents are missing; else the error fails the acquire."""

    token: int
    session: int
    error: MetadataError


@dataclass(frozen=True)
class NodeChecked:
    """CheckOwnershipNode's answer: the node's ephemeral owner (a session id), or None if there is none."""

    token: int
    session: int
    holder: int | None


@dataclass(frozen=True)
class OwnNodeChanged:
    """The watch on our ownership node fired (deleted or changed), or the node is to be checked again."""

    path: str


@dataclass(frozen=True)
class NodeWatched:
    """WatchOwnNode's answer (the watch is armed): the node's ephemeral owner, or None if it is gone."""

    path: str
    session: int
    holder: int | None
    token: int | None = None


@dataclass(frozen=True)
class WatchFailed:
    """WatchOwnNode got no answer, so no watch is armed either."""

    path: str
    session: int
    error: MetadataError
    token: int | None = None


@dataclass(frozen=True)
class OwnNodeRead:
    """ReadOwnNode's answer: the node's ephemeral owner and version."""

    token: int
    session: int
    holder: int
    version: int


@dataclass(frozen=True)
class OwnNodeDeleted:
    token: int
    session: int


@dataclass(frozen=True)
class OwnNodeIoFailed:
    """ReadOwnNode or DeleteOwnNode failed with `error`."""

    token: int
    session: int
    error: MetadataError


@dataclass(frozen=True)
class OwnerRead:
    """ReadOwner's answer: the node's data (the owner's address), or None if there is no node."""

    token: int
    session: int
    data: bytes | None


@dataclass(frozen=True)
class OwnerReadFailed:
    token: int
    session: int
    error: MetadataError


@dataclass(frozen=True)
class OwnerNodeChanged:
    """The watch armed by ReadOwner fired: the cached owner of `path` is stale."""

    path: str


Event = (
    Acquire
    | Release
    | Unload
    | OwnerOf
    | Reconnect
    | SessionExpiredEvent
    | SessionConnected
    | NodeCreated
    | NodeCreateFailed
    | NodeChecked
    | OwnNodeChanged
    | NodeWatched
    | WatchFailed
    | OwnNodeRead
    | OwnNodeDeleted
    | OwnNodeIoFailed
    | OwnerRead
    | OwnerReadFailed
    | OwnerNodeChanged
)


# ---- outputs ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CreateOwnershipNode:
    """Create `bundle.path`, ephemeral, holding `data` (first its parents if `with_parents`);
    answer NodeCreated or NodeCreateFailed."""

    token: int
    session: int
    bundle: Bundle
    data: bytes
    with_parents: bool


@dataclass(frozen=True)
class CheckOwnershipNode:
    """exists(path), no watch; answer NodeChecked or NodeCreateFailed (its error fails the acquire)."""

    token: int
    session: int
    path: str


@dataclass(frozen=True)
class WatchOwnNode:
    """exists(path) arming a watch that feeds OwnNodeChanged; answer NodeWatched or WatchFailed."""

    path: str
    session: int
    token: int | None = None


@dataclass(frozen=True)
class ReadOwnNode:
    """get(path), no watch; answer OwnNodeRead or OwnNodeIoFailed."""

    token: int
    session: int
    path: str


@dataclass(frozen=True)
class DeleteOwnNode:
    """delete(path, version); answer OwnNodeDeleted or OwnNodeIoFailed."""

    token: int
    session: int
    path: str
    version: int


@dataclass(frozen=True)
class ReadOwner:
    """get(path) arming a watch that feeds OwnerNodeChanged; answer OwnerRead or OwnerReadFailed."""

    token: int
    session: int
    path: str


@dataclass(frozen=True)
class BundlesLost:
    """The bundles left this broker other than by Release (the shell calls on_lost)."""

    bundles: tuple[Bundle, ...]
    why: str


@dataclass(frozen=True)
class Unverified:
    """Our node could not be checked (no watch armed): it is checked again on reconnection. For the log."""

    path: str
    reason: str


@dataclass(frozen=True)
class CompleteRequest:
    """The request is done: Acquire -> owned (bool), OwnerOf -> address or None, Unload -> whether it
    was owned, Release and Reconnect -> None."""

    token: int
    result: bool | str | None = None


@dataclass(frozen=True)
class FailRequest:
    token: int
    error: MetadataError


Output = (
    CreateOwnershipNode
    | CheckOwnershipNode
    | WatchOwnNode
    | ReadOwnNode
    | DeleteOwnNode
    | ReadOwner
    | BundlesLost
    | Unverified
    | CompleteRequest
    | FailRequest
)


# ---- requests in flight -------------------------------------------------------------------------


class Stage(enum.Enum):
    CREATING = "creating"
    CREATING_WITH_PARENTS = "creating-with-parents"
    CHECKING = "checking"  # NodeExists: is the node ours after all?
    WATCHING = "watching"  # owned: arming the watch on our node
    READING_OWN = "reading-own"  # release/unload: is the node still ours?
    DELETING_OWN = "deleting-own"
    READING_OWNER = "reading-owner"


@dataclass
class _Request:
    stage: Stage
    session: int  # the session the request runs on
    session_id: int
    bundle: Bundle
    epoch: int = 0  # READING_OWNER: the owner cache's epoch of the path when the read started
    result: bool | None = None  # Unload's answer, once the node is freed


@dataclass
class OwnershipCore:
    """One broker's ownership of bundles (pure core); see the module docstring."""

    broker_address: str
    session_id: int  # the current session's id: the ephemeral owner of our nodes
    session: int = 0  # bumped by every Reconnect
    expired: bool = False
    owned: dict[str, Bundle] = field(default_factory=dict)  # path -> bundle: believesOwner (in order)
    owners: dict[str, str] = field(default_factory=dict)  # path -> another broker, until a watch fires
    epochs: dict[str, int] = field(default_factory=dict)  # bumped by every invalidation of owners[path]
    unverified: set[str] = field(default_factory=set)  # our nodes whose watch could not be armed
    _requests: dict[int, _Request] = field(default_factory=dict)

    # ---- queries (no I/O) ----------------------------------------------------------------------

    def is_owned(self, path: str) -> bool:
        return path in self.owned

    def owned_bundles(self) -> list[Bundle]:
        return list(self.owned.values())

    # ---- the one entry point -------------------------------------------------------------------

    def step(self, event: Event) -> list[Output]:
        handler = _HANDLERS.get(type(event))
        if handler is None:
            raise TypeError(f"not an ownership event: {event!r}")
        return handler(self, event)

    def _waiting(self, token: int, session: int, *stages: Stage) -> _Request | None:
        """The request `token`, if it waits for this answer (else the answer is stale)."""
        request = self._requests.get(token)
        if request is None or request.session != session or request.stage not in stages:
            return None
        return request

    def _invalidate(self, path: str) -> None:
        self.owners.pop(path, None)
        self.epochs[path] = self.epochs.get(path, 0) + 1

    def _fail(self, token: int, error: MetadataError) -> list[Output]:
        self._requests.pop(token, None)
        return [FailRequest(token, error)]

    def _complete(self, token: int, result: bool | str | None = None) -> list[Output]:
        self._requests.pop(token, None)
        return [CompleteRequest(token, result)]

    # ---- AcquireOwnership ----------------------------------------------------------------------

    def _acquire(self, e: Acquire) -> list[Output]:
        path = e.bundle.path
        if self.expired:
            return [
                FailRequest(
                    e.token,
                    SessionExpired(
                        f"cannot acquire {e.bundle}: the metadata session of broker {self.broker_address} expired "
                        "and is never written again (BookKeeper issue 4462); reconnect() with a new session first",
                        path,
                    ),
                )
            ]
        if path in self.owned:
            return [CompleteRequest(e.token, True)]
        self._requests[e.token] = _Request(Stage.CREATING, self.session, self.session_id, e.bundle)
        return [CreateOwnershipNode(e.token, self.session, e.bundle, self.broker_address.encode(), False)]

    def _node_created(self, e: NodeCreated) -> list[Output]:
        request = self._waiting(e.token, e.session, Stage.CREATING, Stage.CREATING_WITH_PARENTS)
        if request is None:
            return []
        return self._own(e.token, request)

    def _node_create_failed(self, e: NodeCreateFailed) -> list[Output]:
        request = self._waiting(e.token, e.session, Stage.CREATING, Stage.CREATING_WITH_PARENTS, Stage.CHECKING)
        if request is None:
            return []
        if request.stage is Stage.CREATING and isinstance(e.error, NoNode):
            # The first bundle of this namespace ever owned: create the parents, then retry once.
            request.stage = Stage.CREATING_WITH_PARENTS
            data = self.broker_address.encode()
            return [CreateOwnershipNode(e.token, request.session, request.bundle, data, True)]
        if request.stage is not Stage.CHECKING and isinstance(e.error, NodeExists):
            path = request.bundle.path
            self._invalidate(path)
            request.stage = Stage.CHECKING
            return [CheckOwnershipNode(e.token, request.session, path)]
        return self._fail(e.token, e.error)

    def _node_checked(self, e: NodeChecked) -> list[Output]:
        request = self._waiting(e.token, e.session, Stage.CHECKING)
        if request is None:
            return []
        if e.holder is None or e.holder != request.session_id:
            return self._complete(e.token, False)
        # Ours already: an earlier create applied although its answer was lost (ConnectionLoss).
        return self._own(e.token, request)

    def _own(self, token: int, request: _Request) -> list[Output]:
        bundle = request.bundle
        if request.session != self.session or self.expired:
            # The session died right after the create: the node went with it.
            error = SessionExpired(
                f"lost the session while acquiring {bundle}; reconnect and look up again", bundle.path
            )
            return self._fail(token, error)
        path = bundle.path
        self.owned[path] = bundle
        self._invalidate(path)
        request.stage = Stage.WATCHING
        return [WatchOwnNode(path, self.session, token)]  # arms the watch that notices a forced unload

    # ---- RevalidateOwnership: is our node still ours? ------------------------------------------

    def _own_node_changed(self, e: OwnNodeChanged) -> list[Output]:
        if e.path not in self.owned or self.expired:
            return []
        return [WatchOwnNode(e.path, self.session)]

    def _watch_answered(self, token: int | None, session: int) -> list[Output]:
        """An acquire waiting for its watch completes with whether the bundle is still owned."""
        if token is None:
            return []
        request = self._waiting(token, session, Stage.WATCHING)
        if request is None:
            return []
        return self._complete(token, request.bundle.path in self.owned)

    def _node_watched(self, e: NodeWatched) -> list[Output]:
        outputs: list[Output] = []
        if e.session == self.session and e.holder != self.session_id:
            bundle = self.owned.pop(e.path, None)
            if bundle is not None:
                outputs.append(BundlesLost((bundle,), "its ownership node was removed"))
        return outputs + self._watch_answered(e.token, e.session)

    def _watch_failed(self, e: WatchFailed) -> list[Output]:
        outputs: list[Output] = []
        if e.session == self.session and not self.expired:
            # No answer, so no watch either: look again once the session reconnects (or expires: all lost).
            self.unverified.add(e.path)
            outputs.append(Unverified(e.path, str(e.error)))
        return outputs + self._watch_answered(e.token, e.session)

    def _session_connected(self, e: SessionConnected) -> list[Output]:
        if e.session != self.session:
            return []
        unverified, self.unverified = self.unverified, set()
        return [out for path in sorted(unverified) for out in self._own_node_changed(OwnNodeChanged(path))]

    # ---- ExpireSession and Reconnect -----------------------------------------------------------

    def _session_expired(self, e: SessionExpiredEvent) -> list[Output]:
        if e.session != self.session or self.expired:
            return []
        self.expired = True
        lost = tuple(self.owned.values())
        self.owned.clear()
        self.owners.clear()
        self.unverified.clear()
        return [BundlesLost(lost, "the metadata session expired")] if lost else []

    def _reconnect(self, e: Reconnect) -> list[Output]:
        if not self.expired:
            error = InvalidArgument("reconnect() is for after the session expired; this cache's session is still alive")
            return [FailRequest(e.token, error)]
        self.session += 1
        self.session_id = e.session_id
        self.expired = False
        self.owners.clear()
        return [CompleteRequest(e.token)]

    # ---- ownerNode: who owns a bundle ----------------------------------------------------------

    def _owner_of(self, e: OwnerOf) -> list[Output]:
        path = e.bundle.path
        if path in self.owned:
            return [CompleteRequest(e.token, self.broker_address)]
        if path in self.owners:
            return [CompleteRequest(e.token, self.owners[path])]
        request = _Request(Stage.READING_OWNER, self.session, self.session_id, e.bundle, self.epochs.get(path, 0))
        self._requests[e.token] = request
        return [ReadOwner(e.token, self.session, path)]

    def _owner_read(self, e: OwnerRead) -> list[Output]:
        request = self._waiting(e.token, e.session, Stage.READING_OWNER)
        if request is None:
            return []
        if e.data is None:
            return self._complete(e.token, None)  # "unowned" is never cached
        owner = e.data.decode("utf-8", errors="replace")
        path = request.bundle.path
        # Keep it only if no watch fired since the read armed it, on a session that still delivers watches.
        if self.epochs.get(path, 0) == request.epoch and request.session == self.session and not self.expired:
            self.owners[path] = owner
        return self._complete(e.token, owner)

    def _owner_read_failed(self, e: OwnerReadFailed) -> list[Output]:
        if self._waiting(e.token, e.session, Stage.READING_OWNER) is None:
            return []
        return self._fail(e.token, e.error)

    def _owner_node_changed(self, e: OwnerNodeChanged) -> list[Output]:
        self._invalidate(e.path)
        return []

    # ---- giving bundles up ---------------------------------------------------------------------

    def _release(self, e: Release) -> list[Output]:
        if self.owned.pop(e.bundle.path, None) is None or self.expired:
            return [CompleteRequest(e.token)]  # not ours, or the node went with the expired session
        return self._free(e.token, e.bundle, None)

    def _unload(self, e: Unload) -> list[Output]:
        if self.owned.pop(e.bundle.path, None) is None:
            return [CompleteRequest(e.token, False)]
        lost: list[Output] = [BundlesLost((e.bundle,), "unloaded")]
        if self.expired:
            return [*lost, CompleteRequest(e.token, True)]
        return lost + self._free(e.token, e.bundle, True)

    def _free(self, token: int, bundle: Bundle, result: bool | None) -> list[Output]:
        self._requests[token] = _Request(Stage.READING_OWN, self.session, self.session_id, bundle, result=result)
        return [ReadOwnNode(token, self.session, bundle.path)]

    def _own_node_read(self, e: OwnNodeRead) -> list[Output]:
        request = self._waiting(e.token, e.session, Stage.READING_OWN)
        if request is None:
            return []
        if e.holder != request.session_id:  # never delete a successor's node
            return self._freed(e.token, request)
        request.stage = Stage.DELETING_OWN
        return [DeleteOwnNode(e.token, e.session, request.bundle.path, e.version)]

    def _own_node_deleted(self, e: OwnNodeDeleted) -> list[Output]:
        request = self._waiting(e.token, e.session, Stage.DELETING_OWN)
        if request is None:
            return []
        return self._freed(e.token, request)

    def _own_node_io_failed(self, e: OwnNodeIoFailed) -> list[Output]:
        request = self._waiting(e.token, e.session, Stage.READING_OWN, Stage.DELETING_OWN)
        if request is None:
            return []
        if isinstance(e.error, (NoNode, BadVersion, SessionExpired)):
            # Already gone, changed under us (not our node any more), or gone with the session.
            return self._freed(e.token, request)
        return self._fail(e.token, e.error)

    def _freed(self, token: int, request: _Request) -> list[Output]:
        self._invalidate(request.bundle.path)
        return self._complete(token, request.result)


_HANDLERS: dict[type, Callable[[OwnershipCore, Any], list[Output]]] = {
    Acquire: OwnershipCore._acquire,
    Release: OwnershipCore._release,
    Unload: OwnershipCore._unload,
    OwnerOf: OwnershipCore._owner_of,
    Reconnect: OwnershipCore._reconnect,
    SessionExpiredEvent: OwnershipCore._session_expired,
    SessionConnected: OwnershipCore._session_connected,
    NodeCreated: OwnershipCore._node_created,
    NodeCreateFailed: OwnershipCore._node_create_failed,
    NodeChecked: OwnershipCore._node_checked,
    OwnNodeChanged: OwnershipCore._own_node_changed,
    NodeWatched: OwnershipCore._node_watched,
    WatchFailed: OwnershipCore._watch_failed,
    OwnNodeRead: OwnershipCore._own_node_read,
    OwnNodeDeleted: OwnershipCore._own_node_deleted,
    OwnNodeIoFailed: OwnershipCore._own_node_io_failed,
    OwnerRead: OwnershipCore._owner_read,
    OwnerReadFailed: OwnershipCore._owner_read_failed,
    OwnerNodeChanged: OwnershipCore._owner_node_changed,
}
