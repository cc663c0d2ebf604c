"""A BookieTransport over real bookies: one pipelined connection per bookie, a deadline per request.

Every request sent is answered exactly once: with the bookie's response, or with None
("no answer") when the deadline passes first, the connection breaks, or the transport is
closed. Whichever of those comes first claims the request; later ones are dropped, so a
response arriving after its deadline never reaches a core twice.

Threads: no thread per request. By default every bookie connection of the transport is a framed
connection (impl/bookie/client/framed_channel.py) on one asyncio event loop thread, which delivers
the responses; `channel_factory` can supply other channels (e.g. the threaded gRPC `BookieChannel`,
one stream thread per bookie). Deadlines are kept by
one timer thread, which works because every request has the same timeout, so deadlines expire
in the order the requests were sent (a deque, not a heap). For the same reason sending never
wakes the timer: idle, it waits one timeout at most, and a request sent meanwhile is due after.

Bookies of the transport's own process (`local_bookies`, a standalone's) are reached without a socket, through
impl/bookie/client/local_channel.py's channels, under the same deadlines and answer contract.

A bookie id is its address ("127.0.0.1:PORT"). A channel is opened on first use and
dropped as soon as its connection fails: the next request opens a fresh one, so a restarted
bookie is reachable again immediately.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, Protocol, cast

from impl.bookie.channel import Callback, Result
from impl.bookie.client.framed_channel import FramedBookieChannel
from impl.bookie.client.io_loop import IoLoop
from impl.bookie.client.local_channel import LocalBookiesRegistry, LocalChannels
from impl.bookie.protocol import (
    AddRequest,
    AddResponse,
    ErrorCode,
    ReadLacRequest,
    ReadLacResponse,
    ReadRequest,
    ReadResponse,
    Request,
    Response,
    WriteLacResponse,
)
from impl.metadata.ledger import BookieId

log = logging.getLogger(__name__)

Answer = Callable[[Any], None]
DEFAULT_REQUEST_TIMEOUT_S = 5.0


class _Pending:
    """One request awaiting its single answer; also the channel's callback for it (no closure each)."""

    __slots__ = ("transport", "bookie", "request", "on_answer", "deadline", "channel")

    def __init__(
        self, transport: PipelinedTransport, bookie: BookieId, request: Request, on_answer: Answer, deadline: float
    ) -> None:
        self.transport = transport
        self.bookie = bookie
        self.request = request
        self.on_answer = on_answer
        self.deadline = deadline
        self.channel: Channel | None = None  # set when handed to a channel

    def claim(self) -> bool:
        """True exactly once: for whoever answers first (response, deadline, failure or close). The
        token is this request's key in the transport's `_unanswered`; dict.pop is atomic, so exactly
        one claimer gets it, with no lock, and no token object per request for the cycle collector."""
        return self.transport._unanswered.pop(self, False)

    @property
    def answered(self) -> bool:
        return self not in self.transport._unanswered

    def __call__(self, result: Result) -> None:
        """The channel's answer: a response, a stream-level error code, or the stream's end."""
        if isinstance(result, ConnectionError):
            log.debug("bookie %s: no answer to %s: %s", self.bookie, _name(self), result)
            if self.channel is not None:
                self.transport._drop_channel(self.bookie, self.channel)
            self.answer(None)
        elif isinstance(result, ErrorCode):
            self.answer(_typed_error(self.request, result))
        else:
            self.answer(result)

    def answer(self, response: Response | None) -> None:
        if not self.claim():
            return  # already answered (deadline passed first): a late response is dropped
        try:
            self.on_answer(response)
        except Exception:
            # A failing callback is a bug in a shell. The caller is a connection's I/O thread or the timer,
            # which must keep serving other requests, so log it loudly instead of killing them.
            log.exception("answer handler failed for %s from bookie %s", _name(self), self.bookie)


def _name(pending: _Pending) -> str:
    """A request's name for logs, without its (possibly large) entry body."""
    request = pending.request
    entry = getattr(request, "entry_id", None)
    suffix = "" if entry is None else f" entry {entry}"
    return f"{type(request).__name__} ledger {request.ledger_id}{suffix}"


def _typed_error(request: Request, code: ErrorCode) -> Response:
    """A stream-level error code (the bookie could not parse the request) as the request's response type."""
    if isinstance(request, AddRequest):
        return AddResponse(request.ledger_id, request.entry_id, code)
    if isinstance(request, ReadRequest):
        return ReadResponse(request.ledger_id, request.entry_id, code)
    if isinstance(request, ReadLacRequest):
        return ReadLacResponse(request.ledger_id, code)
    return WriteLacResponse(request.ledger_id, code)


class Channel(Protocol):
    """What the transport needs of a bookie connection (FramedBookieChannel and BookieChannel have it)."""

    def send_many(
        self, requests: Sequence[tuple[Request, Callback]], encoded: dict[int, bytes] | None = None
    ) -> None: ...

    def close(self) -> None: ...


class PipelinedTransport:
    """`send(bookie, request, on_answer)` over BookieChannel streams; see the module docstring."""

    def __init__(
        self,
        *,
        timeout_s: float = DEFAULT_REQUEST_TIMEOUT_S,
        channel_factory: Callable[[str], Channel] | None = None,
        local_bookies: LocalBookiesRegistry | None = None,
    ) -> None:
        """`local_bookies`: the in-process bookies, reached without a socket (impl/bookie/client/local_channel.py);
        every other bookie through `channel_factory` (by default a framed connection on the transport's IoLoop)."""
        if not timeout_s > 0:
            raise ValueError(f"request timeout must be positive, got {timeout_s}")
        self.timeout_s = timeout_s
        self._io: IoLoop | None = None
        if channel_factory is None:
            io = self._io = IoLoop()

            def channel_factory(address: str) -> Channel:
                return FramedBookieChannel(address, io)

        self._local: LocalChannels | None = None
        if local_bookies is not None:
            self._local = LocalChannels(local_bookies, channel_factory)
            channel_factory = cast("Callable[[str], Channel]", self._local)
        self._channel_factory = channel_factory
        self._channels: dict[BookieId, Channel] = {}
        self._lock = threading.Lock()
        self._deadlines: deque[_Pending] = deque()
        self._unanswered: dict[_Pending, bool] = {}  # requests not yet claimed (see _Pending.claim)
        self._wakeup = threading.Condition(self._lock)
        self._closed = False
        self._timer = threading.Thread(target=self._expire_deadlines, name="bookie-deadlines", daemon=True)
        self._timer.start()

    # ---- sending ----------------------------------------------------------------------------------

    def send(self, bookie: BookieId, request: Any, on_answer: Answer) -> None:
        self.send_many([(bookie, request, on_answer)])

    def send_many(self, sends: Sequence[tuple[BookieId, Any, Answer]]) -> None:
        """`send` for each, with one lock round for all and one hand-over per bookie's channel
        (the requests of one call to a bookie leave in as few stream messages as fit)."""
        deadline = time.monotonic() + self.timeout_s
        pendings = [_Pending(self, bookie, request, on_answer, deadline) for bookie, request, on_answer in sends]
        self._unanswered.update(dict.fromkeys(pendings, True))  # claimable from here on
        by_channel: dict[BookieId, tuple[Channel, list[tuple[Request, Callback]]]] = {}
        with self._lock:
            closed = self._closed
            if not closed:
                deadlines = self._deadlines
                while deadlines and deadlines[0].answered:
                    deadlines.popleft()  # answered before their deadline: forget them now, not when it passes
                # No wake-up of the timer: its longest wait is one timeout, so it wakes by these deadlines
                # (each one timeout from now) at the latest; a wake-up here was a thread hand-over per send.
                deadlines.extend(pendings)
                for pending in pendings:
                    entry = by_channel.get(pending.bookie)
                    if entry is None:
                        entry = by_channel[pending.bookie] = (self._channel(pending.bookie), [])
                    pending.channel = entry[0]
                    entry[1].append((pending.request, pending))
        if closed:
            for pending in pendings:
                log.debug("transport closed: no answer to %s for bookie %s", _name(pending), pending.bookie)
                pending.answer(None)
            return
        encoded: dict[int, bytes] = {}  # an add to Qw bookies is serialized once (`pendings` holds the requests)
        for channel, requests in by_channel.values():
            channel.send_many(requests, encoded)

    def _channel(self, bookie: BookieId) -> Channel:
        """The bookie's channel, opened on first use (caller holds the lock)."""
        channel = self._channels.get(bookie)
        if channel is None:
            channel = self._channel_factory(bookie)
            self._channels[bookie] = channel
        return channel

    # ---- answering ---------------------------------------------------------------------------------

    def _drop_channel(self, bookie: BookieId, channel: Channel) -> None:
        """Forget a channel whose stream failed; the next request to this bookie opens a new one."""
        with self._lock:
            if self._channels.get(bookie) is not channel:
                return  # already replaced
            del self._channels[bookie]
        # Closing fails whatever was submitted to it meanwhile (answered None by each `_Pending`).
        channel.close()

    def _expire_deadlines(self) -> None:
        while True:
            expired: list[_Pending] = []
            with self._lock:
                while not self._closed:
                    while self._deadlines and self._deadlines[0].answered:
                        self._deadlines.popleft()
                    if not self._deadlines:
                        self._wakeup.wait(self.timeout_s)  # a request sent meanwhile is due after this wait ends
                        continue
                    now = time.monotonic()
                    while self._deadlines and self._deadlines[0].deadline <= now:
                        expired.append(self._deadlines.popleft())
                    if expired:
                        break
                    self._wakeup.wait(self._deadlines[0].deadline - now)
                if self._closed:
                    expired.extend(self._deadlines)
                    self._deadlines.clear()
            for pending in expired:
                if not pending.answered:
                    log.debug("bookie %s: no answer in %.1fs to %s", pending.bookie, self.timeout_s, _name(pending))
                pending.answer(None)
            if self._closed:
                return

    # ---- closing ------------------------------------------------------------------------------------

    def close(self) -> None:
        """Close every channel; requests still waiting are answered None. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            channels = list(self._channels.values())
            self._channels.clear()
            self._wakeup.notify()
        for channel in channels:
            channel.close()
        if self._local is not None:
            self._local.close()  # after the channels' close: their waiters are answered
        if self._io is not None:
            self._io.close()  # after the channels' close (queued before the stop): their waiters are answered
        if threading.current_thread() is not self._timer:
            self._timer.join(timeout=10)

    def __enter__(self) -> PipelinedTransport:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
