"""Pick a metadata store backend by URL.

Accepted forms:
  memory://NAME                        the pure in-memory model; NAME shared within the process ("" = private)
  embedded:///ABSOLUTE/DIR             durable SQLite store in DIR (created if missing)
  zk://HOST:PORT[,HOST:PORT...][/CHROOT]   a real ZooKeeper through kazoo
"""

from __future__ import annotations

import re

from impl.metadata.store import InvalidArgument, MetadataStore

ACCEPTED_FORMS = "memory://NAME, embedded:///ABSOLUTE/DIR or zk://HOST:PORT[,HOST:PORT...][/CHROOT]"
_HOST_PORT = re.compile(r"^[A-Za-z0-9_.\-\[\]:]+:\d{1,5}$")
DEFAULT_SESSION_TIMEOUT_S = 10.0


def connect(url: str, session_timeout_s: float = DEFAULT_SESSION_TIMEOUT_S) -> MetadataStore:
    """Open one client session on the metadata store named by `url` (see the module docstring)."""
    if not isinstance(url, str) or "://" not in url:
        raise InvalidArgument(f"not a metadata store URL: {url!r}; use {ACCEPTED_FORMS}")
    if not session_timeout_s > 0:
        raise InvalidArgument(f"session timeout must be > 0 seconds, not {session_timeout_s!r}")
    scheme, rest = url.split("://", 1)
    if scheme == "memory":
        if "/" in rest:
            raise InvalidArgument(f"memory URL names a server, not a path: {url!r}; use memory://NAME")
        from impl.metadata.memory import server_named

        return server_named(rest).connect()
    if scheme == "embedded":
        if not rest.startswith("/") or rest == "/":
            raise InvalidArgument(
                f"embedded URL needs an absolute directory (three slashes): {url!r}; use embedded:///ABSOLUTE/DIR"
            )
        from impl.metadata.embedded import EmbeddedStore

        return EmbeddedStore(rest, session_timeout_s=session_timeout_s)
    if scheme == "zk":
        hosts = rest.split("/", 1)[0]
        if not hosts or not all(_HOST_PORT.match(h) for h in hosts.split(",")):
            raise InvalidArgument(f"zk URL needs HOST:PORT[,HOST:PORT...]: {url!r}; use zk://127.0.0.1:2181/chroot")
        from impl.metadata.zookeeper import ZooKeeperStore  # written separately; import only when used

        store: MetadataStore = ZooKeeperStore.from_url(url, session_timeout_s=session_timeout_s)
        return store
    raise InvalidArgument(f"unknown metadata store scheme {scheme!r} in {url!r}; use {ACCEPTED_FORMS}")
