"""Force a node's ZooKeeper session to expire, from outside the node and without its help.

A node's session is found through the ephemeral nodes it holds: a bookie's registration
/ledgers/available[/readonly]/<host:port>, a broker's /loadbalance/brokers/<host:port> and its
bundle ownerships under /namespace (their stat's `ephemeralOwner` is the session id).

To end that session we open a second connection *on the same session* and close it: the server
then closes the session, deletes its ephemerals, and the node's next contact is answered
"session expired" -- exactly what a real expiry (a long GC pause, a partition) does to it.
Attaching needs the session password, which ZooKeeper does not keep secret from someone who
knows the session id: the server derives it as `new java.util.Random(id ^ 0xB3415C00).nextBytes(16)`
(ZooKeeperServer.generatePasswd, 3.4 to 3.9). We recompute it here; if a future server changes
the derivation the attach fails with "session expired" and we say so instead of pretending.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass

from kazoo.client import KazooClient
from kazoo.exceptions import KazooException, NoNodeError
from kazoo.handlers.threading import KazooTimeoutError

from impl.metadata import layout

SUPER_SECRET = 0xB3415C00  # ZooKeeperServer.superSecret
_MASK48 = (1 << 48) - 1


class SessionExpiryError(Exception):
    """The node's session could not be found or ended; the message says why."""


def java_random_bytes(seed: int, n: int) -> bytes:
    """java.util.Random(seed).nextBytes(n), bit for bit (a 48-bit linear congruential generator)."""
    multiplier, addend = 0x5DEECE66D, 0xB
    state = (seed ^ multiplier) & _MASK48
    out = bytearray()
    while len(out) < n:
        state = (state * multiplier + addend) & _MASK48
        word = state >> 16  # next(32); nextBytes takes its bytes low-order first
        for _ in range(min(4, n - len(out))):
            out.append(word & 0xFF)
            word >>= 8
    return bytes(out)


def session_password(session_id: int) -> bytes:
    return java_random_bytes((session_id ^ SUPER_SECRET) & ((1 << 64) - 1), 16)


@dataclass(frozen=True)
class Ephemeral:
    path: str
    owner: int  # session id


def split_zk_url(url: str) -> tuple[str, str]:
    """zk://HOSTS/CHROOT -> (hosts, chroot)."""
    if not url.startswith("zk://"):
        raise SessionExpiryError(f"session expiry needs a ZooKeeper metadata store (zk://...), not {url!r}")
    hosts, _, chroot = url[len("zk://") :].partition("/")
    return hosts, ("/" + chroot).rstrip("/")


class ZooKeeperAdmin:
    """A short-lived kazoo session on the cluster's ZooKeeper (the chroot applied by hand)."""

    def __init__(self, metadata_url: str, timeout_s: float = 10.0) -> None:
        self.hosts, self.chroot = split_zk_url(metadata_url)
        self.timeout_s = timeout_s
        self.client = KazooClient(hosts=self.hosts, timeout=timeout_s)
        try:
            self.client.start(timeout=timeout_s)
        except (KazooTimeoutError, KazooException):
            self.client.close()
            raise SessionExpiryError(f"ZooKeeper at {self.hosts} did not answer within {timeout_s:.0f}s") from None

    def close(self) -> None:
        with contextlib.suppress(KazooException):
            self.client.stop()
            self.client.close()

    def __enter__(self) -> ZooKeeperAdmin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _ephemeral(self, path: str) -> Ephemeral | None:
        try:
            _, stat = self.client.get(self.chroot + path)
        except NoNodeError:
            return None
        return Ephemeral(path, stat.ephemeralOwner) if stat.ephemeralOwner else None

    def _children(self, path: str) -> list[str]:
        try:
            return sorted(self.client.get_children(self.chroot + path))
        except NoNodeError:
            return []

    def registration(self, role: str, address: str) -> Ephemeral | None:
        """The node's registration znode (bookie: writable or read-only; broker: /loadbalance/brokers)."""
        if role == "bookie":
            return self._ephemeral(layout.bookie_path(address)) or self._ephemeral(
                layout.bookie_path(address, readonly=True)
            )
        if role == "broker":
            return self._ephemeral(layout.broker_path(address))
        return None

    def bundles_owned_by(self, session_id: int) -> list[str]:
        """Bundle ownership nodes (/namespace/<tenant>/<ns>/<range>) held by this session."""
        owned = []
        for tenant in self._children(layout.NAMESPACE_ROOT):
            for namespace in self._children(f"{layout.NAMESPACE_ROOT}/{tenant}"):
                base = f"{layout.NAMESPACE_ROOT}/{tenant}/{namespace}"
                for bundle in self._children(base):
                    eph = self._ephemeral(f"{base}/{bundle}")
                    if eph is not None and eph.owner == session_id:
                        owned.append(f"{tenant}/{namespace}/{bundle}")
        return owned

    def expire(self, session_id: int) -> None:
        """Attach to `session_id` with its derived password and close it: the server ends the session."""
        twin = KazooClient(
            hosts=self.hosts, timeout=self.timeout_s, client_id=(session_id, session_password(session_id))
        )
        try:
            twin.start(timeout=self.timeout_s)
        except KazooTimeoutError:
            raise SessionExpiryError(
                f"could not attach to session 0x{session_id:x} within {self.timeout_s:.0f}s (already expired, "
                "or this ZooKeeper derives session passwords differently)"
            ) from None
        finally:
            with contextlib.suppress(KazooException):
                twin.stop()  # stop() sends closeSession: the session ends for its owner too
                twin.close()


def expire_node_session(metadata_url: str, role: str, address: str) -> int:
    """End the ZooKeeper session that registered the node at `address`; returns the session id."""
    try:
        return _expire_node_session(metadata_url, role, address)
    except KazooException as e:
        raise SessionExpiryError(f"ZooKeeper failed while expiring the session of {role} {address}: {e!r}") from None


def _expire_node_session(metadata_url: str, role: str, address: str) -> int:
    with ZooKeeperAdmin(metadata_url) as zk:
        registration = zk.registration(role, address)
        if registration is None:
            raise SessionExpiryError(
                f"{role} {address} holds no registration node in ZooKeeper (its session already expired, "
                "or it is down); nothing to expire"
            )
        zk.expire(registration.owner)
        if zk.registration(role, address) == registration:
            raise SessionExpiryError(
                f"session 0x{registration.owner:x} of {role} {address} is still alive after closing it"
            )
        return registration.owner
