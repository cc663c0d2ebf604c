"""One TCP connection to a broker (the shell around impl/client/connection.py).

A reader thread decodes the broker's frames, steps the core with each and routes its outputs:
answers complete the waiting request's future, receipts and messages go to the producer or consumer
registered under their id, and a broker's CLOSE_PRODUCER / CLOSE_CONSUMER or the loss of the
connection tells them to attach again. Writes are serialized by a lock.
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, Protocol

from impl.client import connection as core
from impl.client.errors import ClientError, ConnectionLost
from impl.protocol import pulsar_api_pb2 as api
from impl.protocol.frames import FrameDecoder, FrameError

log = logging.getLogger(__name__)

READ_CHUNK = 256 * 1024


class Handler(Protocol):
    """A producer or consumer attached to a connection."""

    def on_event(self, event: core.Output) -> None: ...

    def on_detached(self) -> None:
        """The broker closed it, or the connection was lost: attach again (or give up)."""


def parse_address(url: str) -> tuple[str, int]:
    rest = url.split("://", 1)[-1].rstrip("/")
    host, _, port = rest.rpartition(":")
    if not host or not port.isdigit():
        raise ClientError(f"bad broker URL {url!r}; use pulsar://HOST:PORT")
    return host, int(port)


# A token, or what gives a fresh one each time it is called (asked again when the broker challenges
# expired credentials), as the official clients' AuthenticationToken takes.
Token = str | Callable[[], str]


def token_of(token: Token | None) -> str | None:
    return token() if callable(token) else token


class BrokerConnection:
    def __init__(
        self, url: str, timeout_s: float, token: Token | None = None, connect_timeout_s: float | None = None
    ) -> None:
        """`timeout_s`: how long a request waits for its answer by default; `connect_timeout_s`: how
        long to wait for the TCP connection and CONNECTED (default `timeout_s`)."""
        self.url = url
        self.token = token
        self.timeout_s = timeout_s
        self.core = core.ClientConnection()
        self._futures: dict[int, Future[api.BaseCommand]] = {}
        self._handlers: dict[tuple[str, int], Handler] = {}
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._connected: Future[core.Connected] = Future()
        self.open = True
        host, port = parse_address(url)
        connect_timeout_s = connect_timeout_s or timeout_s
        try:
            self.sock = socket.create_connection((host, port), timeout=connect_timeout_s)
        except OSError as e:
            raise ConnectionLost(f"cannot connect to {url}: {e}") from e
        self.sock.settimeout(None)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._reader = threading.Thread(target=self._read_loop, name=f"pulsar-conn-{port}", daemon=True)
        self._reader.start()
        with self._lock:
            outputs = self.core.step(core.Connect(token_of(token)))
        self._perform(outputs)
        try:
            self._connected.result(connect_timeout_s)
        except FutureTimeout:
            self.close()
            raise ConnectionLost(f"{url} did not answer CONNECT within {connect_timeout_s}s") from None

    # ---- requests ------------------------------------------------------------------------------

    def write(self, data: bytes) -> None:
        try:
            with self._write_lock:
                self.sock.sendall(data)
        except OSError as e:
            self.close()
            raise ConnectionLost(f"connection to {self.url} lost: {e}") from e

    def call(self, type_: int, message: Any, timeout_s: float | None = None) -> api.BaseCommand:
        """Send a request and wait for its answer; a refusal raises ClientError with its ServerError."""
        future: Future[api.BaseCommand] = Future()
        with self._lock:
            if not self.open:
                raise ConnectionLost(f"connection to {self.url} is closed")
            (sent,) = self.core.step(core.Request(type_, message))
            assert isinstance(sent, core.WriteRequest)  # a request's only output is its frame
            request_id = sent.request_id
            self._futures[request_id] = future
        self.write(sent.data)
        try:
            return future.result(timeout_s or self.timeout_s)
        except FutureTimeout:
            with self._lock:
                self._futures.pop(request_id, None)
                self.core.step(core.RequestTimedOut(request_id))
            raise ClientError(f"{self.url} did not answer within {timeout_s or self.timeout_s}s") from None

    def attach(self, kind: str, handler_id: int, handler: Handler) -> None:
        with self._lock:
            self._handlers[(kind, handler_id)] = handler

    def detach(self, kind: str, handler_id: int) -> None:
        with self._lock:
            self._handlers.pop((kind, handler_id), None)

    # ---- the broker's frames -------------------------------------------------------------------

    def _read_loop(self) -> None:
        decoder = FrameDecoder()
        reason = "closed by the broker"
        try:
            while self.open:
                data = self.sock.recv(READ_CHUNK)
                if not data:
                    break
                for frame in decoder.feed(data):
                    with self._lock:
                        outputs = self.core.step(core.FrameReceived(frame))
                    self._perform(outputs)
        except (OSError, FrameError, core.ProtocolViolation) as e:
            reason = str(e)
        finally:
            self._lost(reason)

    def _perform(self, outputs: list[core.Output]) -> None:
        for out in outputs:
            self._route(out)

    def _route(self, out: core.Output) -> None:
        if isinstance(out, core.Connected):
            self._connected.set_result(out)
        elif isinstance(out, core.Answered | core.Refused):
            with self._lock:
                future = self._futures.pop(out.request_id, None)
            if future is None:
                return
            if isinstance(out, core.Answered):
                future.set_result(out.command)
            else:
                future.set_exception(ClientError(out.message, out.error))
        elif isinstance(out, core.Write):
            self.write(out.data)
        elif isinstance(out, core.Challenged):
            # Fresh credentials: the supplier's new token (a fixed token can only be sent again).
            fresh = token_of(self.token) or ""
            with self._lock:
                answer = self.core.step(core.AnswerChallenge(fresh))
            self._perform(answer)
        elif isinstance(out, core.Receipt | core.SendFailed | core.ProducerClosed):
            self._to("producer", out.producer_id, out)
        elif isinstance(out, core.Delivered | core.ConsumerClosed | core.ActiveChanged):
            self._to("consumer", out.consumer_id, out)

    def _to(self, kind: str, handler_id: int, out: core.Output) -> None:
        with self._lock:
            handler = self._handlers.get((kind, handler_id))
            if isinstance(out, core.ProducerClosed | core.ConsumerClosed):
                self._handlers.pop((kind, handler_id), None)
        if handler is None:
            return
        if isinstance(out, core.ProducerClosed | core.ConsumerClosed):
            handler.on_detached()
        else:
            handler.on_event(out)

    def _lost(self, reason: str) -> None:
        with self._lock:
            self.open = False
            unanswered = self.core.step(core.ConnectionClosed())
            waiting = [o.request_id for o in unanswered if isinstance(o, core.Unanswered)]
            futures = [f for f in (self._futures.pop(i, None) for i in waiting) if f is not None]
            handlers, self._handlers = list(self._handlers.values()), {}
        if not self._connected.done():
            self._connected.set_exception(ConnectionLost(f"{self.url}: {reason}"))
        for future in futures:
            future.set_exception(ConnectionLost(f"connection to {self.url} lost: {reason}"))
        for handler in handlers:
            handler.on_detached()
        with contextlib.suppress(OSError):
            self.sock.close()

    def close(self) -> None:
        self.open = False
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
