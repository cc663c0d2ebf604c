"""In-process bookies reached without a socket: BookKeeper's local transport (its `LocalBookiesRegistry`).

A standalone runs its bookies in the broker's process (impl/broker/standalone.py). Reaching them over a
connection on loopback costs, per request, its encoding, hand-overs between Python threads, a
request-reader thread on the bookie's side and the parse of the reply. A `LocalBookieChannel`
hands the request objects straight to the in-process `Bookie.submit_many`, on the caller's thread, as
BookKeeper's client does with a bookie of its own JVM (`enableLocalTransport`). Only the transport
changes: the bookie's core, journal (an add is answered only after its journal fsync), storage and
metadata are the same, and so is its port, which keeps serving other clients.

The answer contract is `BookieChannel.send_many`'s: each callback runs exactly once, with the bookie's
reply, or with a ConnectionError when the bookie is down (killed or not started) or goes down before it
answers. Replies are never answered on the caller's thread inside `send_many`, even when the bookie
produces them there (a read, a refusal): each goes, in the order the bookie produced it, to the answering
thread of the transport's `LocalChannels`, which runs the callbacks as the I/O loop runs a connection's, the
replies produced together as the answers of one stream message (`channel.run_answers`).

A `LocalBookiesRegistry` names the in-process bookies by id; the owner marks each `up` with its
`Bookie` when it starts and `down` before it stops it (a kill as a graceful stop): from `down` on, requests
get a ConnectionError, and every request waiting on the bookie gets one at once, as a broken connection
gives them; replies the stopped bookie still produces (its journal drains on close) are dropped.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
from collections.abc import Callable, Sequence
from typing import Protocol

from impl.bookie.channel import Callback, Result, run_answers
from impl.bookie.client.io_loop import answering_thread
from impl.bookie.protocol import Request, Response
from impl.bookie.replies import StreamReply

log = logging.getLogger(__name__)

MAX_ROUND = 512  # answers run as one round (one stream message's worth) at most


class LocalBookie(Protocol):
    """What the channel needs of an in-process bookie (impl/bookie/server.py's `Bookie`)."""

    def submit_many(self, requests: Sequence[tuple[Request, Callable[[Response], None]]]) -> None: ...


class LocalBookiesRegistry:
    """The in-process bookies by id, each up (with its `Bookie`) or down."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._bookies: dict[str, LocalBookie | None] = {}
        self._channels: dict[str, set[LocalBookieChannel]] = {}

    def __contains__(self, bookie_id: str) -> bool:
        return bookie_id in self._bookies

    def add(self, bookie_id: str) -> None:
        """An in-process bookie, down until `up`: reached through this registry, never over a socket."""
        with self._lock:
            self._bookies.setdefault(bookie_id, None)

    def up(self, bookie_id: str, bookie: LocalBookie) -> None:
        """The bookie serves from now on."""
        with self._lock:
            self._bookies[bookie_id] = bookie
            self._channels.setdefault(bookie_id, set())

    def down(self, bookie_id: str) -> None:
        """The bookie stops serving: refuse its requests from now on and fail those it has not answered."""
        with self._lock:
            self._bookies[bookie_id] = None
            channels = list(self._channels.get(bookie_id, ()))
        for channel in channels:
            channel.fail(ConnectionError(f"bookie {bookie_id} is down"))

    def bookie(self, bookie_id: str) -> LocalBookie | None:
        return self._bookies.get(bookie_id)

    def _attach(self, channel: LocalBookieChannel) -> None:
        with self._lock:
            self._channels.setdefault(channel.bookie_id, set()).add(channel)

    def _detach(self, channel: LocalBookieChannel) -> None:
        with self._lock:
            self._channels.get(channel.bookie_id, set()).discard(channel)


class _Answerer:
    """The one thread that answers the requests of a transport's local channels, in the order queued."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[list[tuple[Callback, Result]] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="bookie-local", daemon=True)
        self._thread.start()

    def put(self, answers: list[tuple[Callback, Result]]) -> None:
        if answers:
            self._queue.put(answers)

    def _run(self) -> None:
        with answering_thread():
            while True:
                answers = self._queue.get()
                if answers is None:
                    return
                while len(answers) < MAX_ROUND:  # what was queued meanwhile is one round with them
                    try:
                        more = self._queue.get_nowait()
                    except queue.Empty:
                        break
                    if more is None:
                        self._queue.put(None)
                        break
                    answers += more
                run_answers(answers)

    def close(self) -> None:
        self._queue.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=10)


class LocalChannels:
    """The channel factory of one transport: a `LocalBookieChannel` to a bookie the registry names, the
    `remote` factory's channel (a framed connection) to any other; one answering thread for the local ones."""

    def __init__(self, registry: LocalBookiesRegistry, remote: Callable[[str], object]) -> None:
        self.registry = registry
        self.remote = remote
        self._answerer = _Answerer()

    def __call__(self, bookie_id: str) -> object:
        if bookie_id in self.registry:
            return LocalBookieChannel(bookie_id, self.registry, self._answerer)
        return self.remote(bookie_id)

    def close(self) -> None:
        """Stop the answering thread, after what its channels' close queued."""
        self._answerer.close()


class LocalBookieChannel:
    """Requests to one in-process bookie, handed to its `submit_many`; see the module docstring."""

    def __init__(self, bookie_id: str, registry: LocalBookiesRegistry, answerer: _Answerer) -> None:
        self.bookie_id = bookie_id
        self.registry = registry
        self._answerer = answerer
        self._tags = itertools.count(1)
        self._lock = threading.Lock()  # guards _callbacks and _closed
        self._callbacks: dict[int, Callback] = {}
        self._closed = False
        registry._attach(self)

    def send_many(self, requests: Sequence[tuple[Request, Callback]], encoded: dict[int, bytes] | None = None) -> None:
        """Hand the requests to the bookie in order; each callback runs once, on the answering thread.
        `encoded` (a connection's shared serializations) is not needed here."""
        if not requests:
            return
        tagged = [(next(self._tags), request, callback) for request, callback in requests]
        with self._lock:
            closed = self._closed
            if not closed:
                for tag, _, callback in tagged:
                    self._callbacks[tag] = callback
        if closed:
            error = ConnectionError(f"channel to bookie {self.bookie_id} closed")
            self._answerer.put([(callback, error) for _, _, callback in tagged])
            return
        # Looked up after the callbacks are in: a `down` from here on fails them, one before it is seen.
        bookie = self.registry.bookie(self.bookie_id)
        if bookie is None:
            self._fail_tags(tagged, ConnectionError(f"bookie {self.bookie_id} is down"))
            return
        try:
            bookie.submit_many([(request, StreamReply(self, tag)) for tag, request, _ in tagged])
        except Exception as exc:  # a bookie closing under us (its journal refuses): as a broken stream
            log.debug("bookie %s refused requests: %s", self.bookie_id, exc)
            self._fail_tags(tagged, ConnectionError(f"bookie {self.bookie_id}: {exc}"))

    def _fail_tags(self, tagged: list[tuple[int, Request, Callback]], error: ConnectionError) -> None:
        with self._lock:
            failed = [self._callbacks.pop(tag, None) for tag, _, _ in tagged]
            self._answerer.put([(callback, error) for callback in failed if callback is not None])

    def deliver_many(self, replies: Sequence[tuple[int, Response]]) -> None:
        """The bookie's replies (a `ReplyStream`), from whichever thread produced them: claimed by tag, then
        queued to the answering thread in this order. A tag already failed (the bookie went down) is dropped."""
        with self._lock:  # claimed and queued under one lock: queued in the order claimed
            callbacks = self._callbacks
            claimed = [(callbacks.pop(tag, None), response) for tag, response in replies]
            self._answerer.put([(callback, response) for callback, response in claimed if callback is not None])

    def fail(self, error: ConnectionError) -> None:
        """Every request not yet answered gets `error` (the bookie went down)."""
        with self._lock:
            failed, self._callbacks = self._callbacks, {}
            self._answerer.put([(callback, error) for callback in failed.values()])

    def close(self) -> None:
        """Refuse further requests; those waiting get a ConnectionError. Does not block."""
        with self._lock:
            self._closed = True
        self.registry._detach(self)
        self.fail(ConnectionError(f"channel to bookie {self.bookie_id} closed"))
