"""A child process for the embedded store's crash and multi-process tests.

  python -m tests.metadata_store.embedded_writer log DIR        acknowledged multi writes until killed
  python -m tests.metadata_store.embedded_writer ephemeral DIR  hold an ephemeral node until expired
  python -m tests.metadata_store.embedded_writer increment DIR N   N conditional increments of /counter

Each acknowledgement is printed (and flushed) only after the store returned.
"""

from __future__ import annotations

import contextlib
import hashlib
import sys
import time

from impl.metadata.embedded import EmbeddedStore
from impl.metadata.store import BadVersion, Create, NodeExists, NoNode, SessionExpired, SetData

PAYLOAD_BYTES = 4096


def payload(i: int) -> bytes:
    """A recognisable, position-dependent payload: a torn write cannot match it."""
    block = hashlib.sha256(f"entry-{i}".encode()).digest()
    return (block * (PAYLOAD_BYTES // len(block) + 1))[:PAYLOAD_BYTES]


def log_writes(directory: str) -> None:
    store = EmbeddedStore(directory, session_timeout_s=2.0)
    store.ensure_path("/log")
    try:
        data, _ = store.get("/counter")
        i = int(data)
    except NoNode:
        with contextlib.suppress(NodeExists):
            store.create("/counter", b"0")
        i = 0
    print("ready", flush=True)
    while True:
        i += 1
        store.multi([SetData("/counter", str(i).encode()), Create(f"/log/{i:08d}", payload(i))])
        print(i, flush=True)


def say(line: str) -> None:
    """One whole line per write: print() writes the text and its newline separately, so lines printed by the
    listener's thread and the main thread at the same moment could run together."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def hold_ephemeral(directory: str) -> None:
    """Hold /alive; once the session is found expired, report the listener and the error, then exit."""
    store = EmbeddedStore(directory, session_timeout_s=1.0)
    store.add_session_listener(lambda state: say(f"listener {state.name}"))
    store.create("/alive", ephemeral=True)
    print("ready", flush=True)
    while True:
        time.sleep(0.1)
        try:
            store.exists("/alive")
        except SessionExpired:
            say("raised SessionExpired")
            store.close()
            return


def increments(directory: str, count: int) -> None:
    store = EmbeddedStore(directory, session_timeout_s=10.0)
    with contextlib.suppress(NodeExists):  # the writers race to create it on a fresh directory
        store.create("/counter", b"0")
    written = conflicts = 0
    for _ in range(count):
        data, stat = store.get("/counter")
        try:
            store.set("/counter", str(int(data) + 1).encode(), stat.version)
            written += 1
        except BadVersion:
            conflicts += 1
    store.close()
    print(written, conflicts, flush=True)


if __name__ == "__main__":
    mode, target = sys.argv[1], sys.argv[2]
    if mode == "log":
        log_writes(target)
    elif mode == "ephemeral":
        hold_ephemeral(target)
    else:
        increments(target, int(sys.argv[3]))
