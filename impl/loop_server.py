"""A TCP server on an asyncio event loop of its own thread: what the broker's pulsar:// listener, the
proxy's and every web service share. The socket is bound at construction (so its URL is known before
anything serves) and listens once `start` runs; `stop` closes the server, lets the owner close its
connections on the loop, and ends the thread."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import ssl
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

log = logging.getLogger(__name__)

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


def no_delay(writer: asyncio.StreamWriter) -> None:
    """Turn Nagle's algorithm off on a stream's TCP socket: every frame leaves when it is written."""
    sock = writer.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class LoopServer:
    def __init__(
        self, host: str, port: int, name: str, purpose: str = "clients", tls: ssl.SSLContext | None = None
    ) -> None:
        try:
            self.sock = socket.create_server((host, port), backlog=128)
        except OSError as e:
            raise OSError(f"cannot listen for {purpose} on {host}:{port}: {e}; pick a free port or use 0") from e
        self.host, self.port = self.sock.getsockname()[:2]
        self.name = name
        self.tls = tls  # when set, every connection starts with a TLS handshake
        self.loop = asyncio.new_event_loop()
        self._server: asyncio.AbstractServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def start(self, handle: Handler, tick: tuple[float, Callable[[], None]] | None = None) -> None:
        """Serve each connection with `handle`; call tick[1] every tick[0] seconds on the loop."""
        started = threading.Event()

        def every(interval: float, action: Callable[[], None]) -> None:
            action()
            self.loop.call_later(interval, every, interval, action)

        def run() -> None:
            asyncio.set_event_loop(self.loop)

            async def accepted(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                # The listening socket is created without a TCP protocol number, so asyncio does not set
                # TCP_NODELAY on what it accepts: without it Nagle holds each small reply until the
                # client's delayed ACK (~40 ms), which was most of a delivery's latency.
                no_delay(writer)
                await handle(reader, writer)

            async def serve() -> None:
                self._server = await asyncio.start_server(accepted, sock=self.sock, ssl=self.tls)
                if tick is not None:
                    self.loop.call_later(tick[0], every, *tick)

            self.loop.run_until_complete(serve())
            started.set()
            self.loop.run_forever()

        self._thread = threading.Thread(target=run, name=f"{self.name}-{self.port}", daemon=True)
        self._thread.start()
        started.wait(10)

    def stop(self, closing: Callable[[], None] = lambda: None) -> None:
        """Stop accepting, run `closing` on the loop (close the connections), end the loop's thread."""
        if self._thread is None:
            self.sock.close()
            return

        async def shut() -> None:
            if self._server is not None:
                self._server.close()
            closing()

        with contextlib.suppress(Exception):  # the loop died already: nothing left to close
            asyncio.run_coroutine_threadsafe(shut(), self.loop).result(5)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(5)


class Connection(Protocol):
    async def serve(self) -> None: ...

    def tick(self, now: float) -> None: ...

    def close(self, reason: str) -> None: ...


class ConnectionListener:
    """A LoopServer whose connections are objects (`connection` makes one per client) that serve, keep
    time once a second and close when the listener stops."""

    def __init__(
        self, host: str, port: int, name: str, purpose: str, tick_s: float = 1.0, tls: ssl.SSLContext | None = None
    ) -> None:
        self.server = LoopServer(host, port, name, purpose, tls)
        self.host, self.port, self.loop = self.server.host, self.server.port, self.server.loop
        self.tick_s = tick_s
        self.connections: set[Connection] = set()
        self.max_connections = 0  # 0: no limit
        self.max_connections_per_ip = 0
        self._per_ip: dict[str, int] = {}
        self._open = 0

    def limit_connections(self, total: int, per_ip: int) -> None:
        """Close connections past `total` open ones, or past `per_ip` from one address, as soon as they
        are accepted (before a byte is read): a flood of idle connections cannot grow memory unbounded."""
        self.max_connections, self.max_connections_per_ip = total, per_ip

    def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> Connection:
        raise NotImplementedError

    def serve(self) -> None:
        self.server.start(self._accept, (self.tick_s, self._tick))

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer = writer.get_extra_info("peername")
        ip = str(peer[0]) if peer else "?"
        refusal = None
        if self.max_connections and self._open >= self.max_connections:
            refusal = f"{self._open} connections open, the limit is {self.max_connections}"
        elif self.max_connections_per_ip and self._per_ip.get(ip, 0) >= self.max_connections_per_ip:
            refusal = f"{self._per_ip[ip]} connections open from {ip}, the limit is {self.max_connections_per_ip}"
        if refusal is not None:
            log.warning("%s: refusing a connection from %s: %s", self.server.name, ip, refusal)
            writer.close()
            return
        self._open += 1
        self._per_ip[ip] = self._per_ip.get(ip, 0) + 1
        try:
            connection = self.connection(reader, writer)
            self.connections.add(connection)
            try:
                await connection.serve()
            finally:
                self.connections.discard(connection)
        finally:
            self._open -= 1
            self._per_ip[ip] -= 1
            if not self._per_ip[ip]:
                del self._per_ip[ip]

    def _tick(self) -> None:
        now = time.monotonic()
        for connection in list(self.connections):
            connection.tick(now)

    def stop_serving(self, reason: str) -> None:
        def close_connections() -> None:
            for connection in list(self.connections):
                connection.close(reason)

        self.server.stop(close_connections)
