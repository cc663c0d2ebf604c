"""The proxy's `pulsar://` listener: the asyncio shell around impl/proxy/connection.py.

One event loop thread serves every client connection. Lookups, partition counts and namespace
listings go to the brokers' web services on a small thread pool (impl/proxy/directory.py). A
proxied connection opens its own connection to the broker and, once the broker has answered
CONNECTED, two tasks copy bytes, one each way; when either side closes, both are closed, and the
client reconnects through the proxy (looking the topic up again, so it reaches a new owner).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import ssl
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

from impl.loop_server import ConnectionListener, no_delay
from impl.metadata.naming import InvalidTopicName
from impl.protocol import frames
from impl.protocol import pulsar_api_pb2 as api
from impl.protocol.session import AUTH_REFRESH_CHECK_S, Close, DoAuthenticate, Reply
from impl.proxy import connection as core
from impl.proxy.directory import BrokerDirectory, NoBroker
from impl.security.tokens import AuthenticationFailed, TokenAuthenticator, on_monotonic_clock
from impl.web.http import HttpError

log = logging.getLogger(__name__)

# A broker's HTTP refusal, as the binary protocol's error for the client (a broker answers a role
# without permission 401 too, as Pulsar does: see _ask).
_HTTP_ERRORS = {401: api.AuthenticationError, 403: api.AuthorizationError, 404: api.TopicNotFound}

TICK_S = 1.0
READ_CHUNK = 256 * 1024
CONNECT_TIMEOUT_S = 10.0


class ProxyListener(ConnectionListener):
    def __init__(
        self,
        directory: BrokerDirectory,
        host: str = "127.0.0.1",
        port: int = 0,
        authenticator: TokenAuthenticator | None = None,
        tls: ssl.SSLContext | None = None,
        auth_refresh_check_s: float = AUTH_REFRESH_CHECK_S,
    ) -> None:
        purpose = "Pulsar clients" + (" over TLS" if tls else "")
        super().__init__(host, port, "proxy-listener", purpose, TICK_S, tls)
        self.directory = directory
        self.authenticator = authenticator
        self.auth_refresh_check_s = auth_refresh_check_s
        self.pool = ThreadPoolExecutor(max_workers=8, thread_name_prefix="proxy-lookup")

    @property
    def service_url(self) -> str:
        return f"{'pulsar+ssl' if self.server.tls else 'pulsar'}://{self.host}:{self.port}"

    def connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> _ClientConnection:
        return _ClientConnection(self, reader, writer)

    def start(self) -> None:
        self.serve()

    def stop(self) -> None:
        self.stop_serving("the proxy is stopping")
        self.pool.shutdown(wait=False, cancel_futures=True)


class _ClientConnection:
    def __init__(self, listener: ProxyListener, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.listener = listener
        self.loop = listener.loop
        self.reader, self.writer = reader, writer
        self.core = core.ProxyConnection(
            authentication=listener.authenticator is not None, auth_refresh_check_s=listener.auth_refresh_check_s
        )
        self.credentials: dict[str, str] = {}  # the client's token, for the lookups asked on its behalf
        # Only CONNECT and lookups are decoded here (a proxied connection's frames are relayed as bytes).
        self.decoder = frames.FrameDecoder(frames.MAX_FRAME_BEFORE_CONNECTED)
        self.broker: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self.relaying = asyncio.Event()
        self.open = True
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.perform(self.core.step(core.ConnectionOpened(time.monotonic())))

    async def serve(self) -> None:
        try:
            while self.open and self.core.state is not core.State.RELAYING:
                data = await self.reader.read(READ_CHUNK)
                if not data:
                    return
                # Before CONNECT one frame at a time: what follows a proxied CONNECT is relayed untouched.
                try:
                    received = self.decoder.feed(data, max_frames=1)
                    while received and self.open:
                        self.perform(self.core.step(core.FrameReceived(received[0], time.monotonic())))
                        if self.core.state is not core.State.LOOKUPS:
                            break
                        received = self.decoder.feed(b"", max_frames=1)
                except frames.FrameError as e:
                    log.warning("closing the proxy connection from %s: %s", self.peer, e)
                    return
                if self.core.state is core.State.CONNECTING:
                    await self.relaying.wait()
            if self.open and self.broker is not None:
                await self._relay(self.broker)
        except (ConnectionError, OSError):
            pass
        finally:
            self.close("the client went away")

    def tick(self, now: float) -> None:
        self.perform(self.core.step(core.Tick(now)))

    def perform(self, outputs: list[core.Output]) -> None:
        for out in outputs:
            if isinstance(out, Reply):
                if self.open:
                    self.writer.write(frames.encode(out.command, out.payload))
            elif isinstance(out, Close):
                self.close(out.reason)
            elif isinstance(out, DoAuthenticate):
                self.perform(self.core.step(self._authenticate(out)))
            elif isinstance(out, core.DoLookup):
                lookup = functools.partial(self._looked_up, out.request_id, out.topic)
                self._ask(out.request_id, lookup, core.LookupFailed)
            elif isinstance(out, core.DoPartitions):
                partitions = functools.partial(self._partitions, out.request_id, out.topic)
                self._ask(out.request_id, partitions, core.PartitionsFailed)
            elif isinstance(out, core.DoTopics):
                topics = functools.partial(self._topics, out.request_id, out.namespace, out.mode)
                self._ask(out.request_id, topics, core.TopicsFailed)
            elif isinstance(out, core.DoConnectBroker):
                asyncio.ensure_future(self._connect_broker(out))
            elif isinstance(out, core.StartRelay):
                self.relaying.set()

    @property
    def directory(self) -> BrokerDirectory:
        return self.listener.directory

    def _authenticate(self, out: DoAuthenticate) -> core.Event:
        assert self.listener.authenticator is not None
        try:
            role, expires = self.listener.authenticator.authenticate_connect_until(out.method, out.data)
        except AuthenticationFailed as e:
            return core.AuthenticationFailed(str(e))
        # The latest good token (CONNECT's, then each refresh's) is the one the lookups carry.
        self.credentials = {"Authorization": f"Bearer {out.data.decode('utf-8', 'replace')}"}
        return core.Authenticated(role, on_monotonic_clock(expires))

    def _looked_up(self, request_id: int, topic: str) -> core.Event:
        return core.LookupDone(request_id, *self.directory.lookup(topic, self.credentials))

    def _partitions(self, request_id: int, topic: str) -> core.Event:
        return core.PartitionsDone(request_id, self.directory.partitions(topic, self.credentials))

    def _topics(self, request_id: int, namespace: str, mode: str) -> core.Event:
        return core.TopicsDone(request_id, tuple(self.directory.topics(namespace, self.credentials, mode)))

    def _ask(
        self, request_id: int, work: Callable[[], core.Event], failed: Callable[[int, int, str], core.Event]
    ) -> None:
        """Run `work` (it returns the answer, as the core's event) on the pool; a failure is answered with
        `failed`. The core is stepped back on the loop's thread, as every other event is."""

        def run() -> core.Event:
            try:
                return work()
            except (InvalidTopicName, ValueError) as e:
                return failed(request_id, api.InvalidTopicName, str(e))
            except HttpError as e:
                code = _HTTP_ERRORS.get(e.status, api.ServiceNotReady)
                if e.status == 401 and self.credentials:  # a token the proxy accepted: its role lacks the access
                    code = api.AuthorizationError
                return failed(request_id, code, e.reason)
            except NoBroker as e:
                return failed(request_id, api.ServiceNotReady, f"{e}; retry")

        future = self.loop.run_in_executor(self.listener.pool, run)
        future.add_done_callback(lambda f: self.perform(self.core.step(f.result())) if not f.cancelled() else None)

    async def _connect_broker(self, out: core.DoConnectBroker) -> None:
        """Connect to a registered broker only, hand it the client's CONNECT, pass its answer back."""
        try:
            allowed = await self.loop.run_in_executor(self.listener.pool, self.directory.broker_addresses)
        except Exception as e:  # the metadata store is unreachable: the client retries
            self.perform(self.core.step(core.BrokerUnreachable(f"cannot read the brokers' registrations: {e}")))
            return
        if out.target not in allowed:
            self.perform(self.core.step(core.BrokerUnreachable(f"{out.target} is not a registered broker")))
            return
        host, _, port = allowed[out.target].rpartition(":")  # its pulsar:// listener, for a TLS address too
        try:
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, int(port)), CONNECT_TIMEOUT_S)
            no_delay(writer)
            writer.write(frames.encode(out.connect))
            decoder = frames.FrameDecoder()
            answer: list[frames.Frame] = []
            while not answer:
                data = await asyncio.wait_for(reader.read(READ_CHUNK), CONNECT_TIMEOUT_S)
                if not data:
                    raise ConnectionError("the broker closed the connection")
                answer = decoder.feed(data, max_frames=1)
        except (OSError, TimeoutError, frames.FrameError, ConnectionError) as e:
            self.perform(self.core.step(core.BrokerUnreachable(f"cannot connect to broker {out.target}: {e}; retry")))
            return
        self.broker = (reader, writer)
        leftover_from_broker = decoder.take_buffered()
        self.perform(self.core.step(core.BrokerAnswered(answer[0])))
        if self.open and leftover_from_broker:
            self.writer.write(leftover_from_broker)
        if not self.open:
            writer.close()

    async def _relay(self, broker: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> None:
        """Relay bytes both ways until either side closes. Each side's transport gets a `_Relay` protocol
        that writes what it receives straight to the other side, in the callback that received it: no
        stream buffer, task wake-up or drain per chunk (a relayed frame crossed three loop iterations with
        the streams). What the streams had received and nobody read goes first."""
        broker_reader, broker_writer = broker
        client_side, broker_side = _transport(self.writer), _transport(broker_writer)
        ended: asyncio.Future[None] = self.loop.create_future()
        broker_side.write(self.decoder.take_buffered() + _take_buffered(self.reader))
        client_side.write(_take_buffered(broker_reader))
        if self.reader.at_eof() or broker_reader.at_eof():
            return  # a side closed already: `serve` closes both
        # No await from the reads above to here: nothing can arrive in between and overtake them.
        relay_both_ways(client_side, broker_side, ended)
        await ended

    def close(self, reason: str) -> None:
        if not self.open:
            return
        self.open = False
        self.relaying.set()
        log.debug("proxy connection from %s closed: %s", self.peer, reason)
        self.writer.close()
        if self.broker is not None:
            self.broker[1].close()


class _Relay(asyncio.Protocol):
    """The protocol of one side of a relayed connection: what it receives goes to the other side (`to`).
    When this side's own sending buffer is full, the other side stops reading (what it reads would fill
    it), until the buffer drains: the proxy never holds more than a buffer's worth per direction."""

    def __init__(self, to: asyncio.Transport, ended: asyncio.Future[None]) -> None:
        self.to = to
        self.ended = ended

    def data_received(self, data: bytes) -> None:
        self.to.write(data)

    def eof_received(self) -> bool:
        self._end()
        return False  # close this side; the other is closed by `serve`

    def connection_lost(self, exc: Exception | None) -> None:
        self._end()

    def pause_writing(self) -> None:
        self.to.pause_reading()

    def resume_writing(self) -> None:
        self.to.resume_reading()

    def _end(self) -> None:
        if not self.ended.done():
            self.ended.set_result(None)


def relay_both_ways(one: asyncio.Transport, other: asyncio.Transport, ended: asyncio.Future[None]) -> None:
    """Give each side a `_Relay` to the other and let both read; `ended` is set when either side ends. A
    side whose write buffer is already over its mark holds the other back from the start (the transport
    told the protocol it replaced, and tells `_Relay` only when the buffer drains)."""
    one.set_protocol(_Relay(other, ended))
    other.set_protocol(_Relay(one, ended))
    for reader, writer in ((one, other), (other, one)):
        reader.resume_reading()  # the stream may have paused it (its buffer was full)
        if writer.get_write_buffer_size() > writer.get_write_buffer_limits()[1]:
            reader.pause_reading()


def _transport(writer: asyncio.StreamWriter) -> asyncio.Transport:
    transport = writer.transport
    assert isinstance(transport, asyncio.Transport)  # a TCP or TLS connection's: it reads and writes
    return transport


def _take_buffered(reader: asyncio.StreamReader) -> bytes:
    """What a stream received that nobody read yet (asyncio has no public call for it)."""
    buffer: bytearray = reader._buffer  # type: ignore[attr-defined]
    taken = bytes(buffer)
    buffer.clear()
    return taken
