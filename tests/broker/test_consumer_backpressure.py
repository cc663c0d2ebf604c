"""Backpressure towards consumers (issue 49): consumers that grant many permits and never read their
sockets must not make the broker buffer the backlog for them. A connection holds at most
max_pending_write_bytes plus one dispatcher read per consumer; the stuck consumers' messages are not
lost and reach the consumers that come after them, in order."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pulsar
import pytest

from impl.broker import connection as conn
from impl.broker.standalone import Standalone
from impl.protocol import frames
from impl.protocol import pulsar_api_pb2 as api

T = api.BaseCommand
MESSAGE_SIZE = 100 * 1024
BOUND = 1024 * 1024  # max_pending_write_bytes, small here so that the backlog is many times over it
READ_CAP = 1024 * 1024  # dispatcher_max_read_size_bytes


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[Standalone]:
    s = Standalone(tmp_path / "bp", port=0, web_port=0)
    s.config.max_pending_write_bytes = BOUND
    s.config.dispatcher_max_read_size_bytes = READ_CAP
    s.start()
    try:
        yield s
    finally:
        s.stop()


def produce(url: str, topic: str, count: int) -> None:
    client = pulsar.Client(url)
    try:
        producer = client.create_producer(topic, batching_enabled=False)
        for i in range(count):
            producer.send_async(i.to_bytes(4, "big") + bytes(MESSAGE_SIZE - 4), None)
        producer.flush()
    finally:
        client.close()


def _frames(sock: socket.socket, decoder: frames.FrameDecoder) -> list[frames.Frame]:
    while True:
        data = sock.recv(65536)
        assert data, "the broker closed the connection"
        got = decoder.feed(data)
        if got:
            return got


def stuck_consumer(
    port: int, topic: str, subscription: str, sub_type: int, permits: int, proxy_to: str | None = None
) -> socket.socket:
    """A raw connection that subscribes, grants `permits` and then never reads its socket; through a proxy
    (at `port`) to the broker at `proxy_to` when given."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16 * 1024)  # the kernel holds little for it
    sock.settimeout(10)
    sock.connect(("127.0.0.1", port))
    decoder = frames.FrameDecoder()
    connect = api.CommandConnect(client_version="stuck", protocol_version=20)
    if proxy_to is not None:
        connect.proxy_to_broker_url = proxy_to
    sock.sendall(frames.encode(conn.command(T.CONNECT, connect=connect)))
    assert _frames(sock, decoder)[0].command.type == T.CONNECTED
    sub = api.CommandSubscribe(
        topic=topic,
        subscription=subscription,
        subType=sub_type,  # type: ignore[arg-type]
        consumer_id=1,
        request_id=1,
        initialPosition=api.CommandSubscribe.Earliest,
    )
    sock.sendall(frames.encode(conn.command(T.SUBSCRIBE, subscribe=sub)))
    while T.SUCCESS not in [f.command.type for f in _frames(sock, decoder)]:  # Failover: ACTIVE_CONSUMER_CHANGE too
        pass
    flow = api.CommandFlow(consumer_id=1, messagePermits=permits)
    sock.sendall(frames.encode(conn.command(T.FLOW, flow=flow)))
    return sock


def buffered_per_connection(s: Standalone) -> list[int]:
    """Bytes each connection of the broker holds for writing: queued for its transport and in it."""
    assert s.broker is not None
    listener = s.broker.pulsar

    async def look() -> list[int]:
        return [
            c.writer.transport.get_write_buffer_size() + getattr(c, "_queued", 0)  # type: ignore[attr-defined]
            for c in list(listener.connections)
        ]

    return asyncio.run_coroutine_threadsafe(look(), listener.loop).result(5)


def settle(s: Standalone, topic: str) -> list[int]:
    """Wait until the broker stops dispatching (no message out for 1 s); the most any connection held
    meanwhile."""
    assert s.broker is not None
    counters = s.broker.service.topic(topic).counters
    peak: list[int] = []
    last, quiet_since = -1, time.monotonic()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        now = buffered_per_connection(s)
        peak = [max(a, b) for a, b in zip(peak, now, strict=False)] + now[len(peak) :] if peak else now
        out = counters.outbound.messages
        if out != last:
            last, quiet_since = out, time.monotonic()
        elif time.monotonic() - quiet_since > 1.0:
            return peak
        time.sleep(0.05)
    raise AssertionError("the broker kept dispatching for 15 s")


def test_consumers_that_never_read_hold_a_bounded_buffer_and_lose_nothing(standalone: Standalone) -> None:
    s = standalone
    topic = "persistent://public/default/backpressure"
    count = 240  # 24 MB of backlog, 24 times the bound
    produce(s.pulsar_service_url, topic, count)
    stuck = [
        stuck_consumer(s.pulsar_port, topic, "shared", api.CommandSubscribe.Shared, 1000),
        stuck_consumer(s.pulsar_port, topic, "shared", api.CommandSubscribe.Shared, 1000),
        stuck_consumer(s.pulsar_port, topic, "exclusive", api.CommandSubscribe.Exclusive, 1000),
        stuck_consumer(s.pulsar_port, topic, "failover", api.CommandSubscribe.Failover, 1000),
    ]
    slow = stuck_consumer(s.pulsar_port, topic, "slow", api.CommandSubscribe.Exclusive, 1000)
    try:
        peak = settle(s, topic)
        # Each connection: the bound, plus one read (at most READ_CAP, or one entry) delivered before the
        # consumer was paused. Without backpressure each held what the kernel would not take of 24 MB.
        assert peak and max(peak) <= BOUND + READ_CAP + MESSAGE_SIZE, peak
        # A consumer that reads at last is resumed as its connection drains, and gets every message once,
        # in order.
        decoder, ids = frames.FrameDecoder(), []
        while len(ids) < count:
            ids += [
                (f.command.message.message_id.ledgerId, f.command.message.message_id.entryId)
                for f in _frames(slow, decoder)
                if f.command.type == T.MESSAGE
            ]
        assert len(ids) == count and ids == sorted(set(ids)), ids
    finally:
        slow.close()
        for sock in stuck:
            sock.close()
    client = pulsar.Client(s.pulsar_service_url)
    try:
        for name, kind in (
            ("shared", pulsar.ConsumerType.Shared),
            ("exclusive", pulsar.ConsumerType.Exclusive),
            ("failover", pulsar.ConsumerType.Failover),
        ):
            consumer = client.subscribe(topic, name, consumer_type=kind)
            got = []
            for _ in range(count):
                msg = consumer.receive(10_000)
                got.append(int.from_bytes(msg.data()[:4], "big"))
                consumer.acknowledge(msg)
            if kind is pulsar.ConsumerType.Shared:
                got.sort()  # redelivered messages come first on a Shared subscription
            assert got == list(range(count)), name
            consumer.close()
    finally:
        client.close()


def test_through_the_proxy_a_consumer_that_never_reads_is_bounded_at_the_proxy_and_the_broker(
    standalone: Standalone,
) -> None:
    """The proxy relays to the client only as fast as the client reads (it waits for its write buffer to
    drain before reading more from the broker), so the bytes pile up in neither process."""
    from impl.metadata.url import connect
    from impl.proxy.proxy import Proxy

    s = standalone
    topic = "persistent://public/default/backpressure-proxied"
    count = 240
    produce(s.pulsar_service_url, topic, count)
    proxy = Proxy(lambda: connect(s.metadata_url))
    proxy.start()
    stuck = None
    try:
        proxy_port = int(proxy.service_url.rsplit(":", 1)[1])
        stuck = stuck_consumer(
            proxy_port, topic, "via-proxy", api.CommandSubscribe.Exclusive, 1000, proxy_to=f"127.0.0.1:{s.pulsar_port}"
        )
        peak = settle(s, topic)
        assert peak and max(peak) <= BOUND + READ_CAP + MESSAGE_SIZE, peak
        listener = proxy.listener

        async def held() -> list[int]:  # the proxy's write buffers towards its clients, and what it read
            return [
                c.writer.transport.get_write_buffer_size()  # type: ignore[attr-defined]
                + (len(c.broker[0]._buffer) if c.broker is not None else 0)  # type: ignore[attr-defined]
                for c in list(listener.connections)
            ]

        in_proxy = asyncio.run_coroutine_threadsafe(held(), listener.loop).result(5)
        assert in_proxy and max(in_proxy) <= 1024 * 1024, in_proxy
    finally:
        if stuck is not None:
            stuck.close()
        proxy.stop()


def test_the_command_line_default_is_the_brokers() -> None:
    from impl.broker.service import BrokerConfig
    from pulsar_ref.commands.broker import DEFAULT_MAX_PENDING_WRITE_BYTES

    assert BrokerConfig().max_pending_write_bytes == DEFAULT_MAX_PENDING_WRITE_BYTES


def _rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


@pytest.mark.deep
def test_ten_stuck_consumers_over_a_60_mb_backlog_keep_the_standalone_process_rss_bounded(
    tmp_path: Path,
) -> None:
    """The issue's measurement, on a `pulsar-ref standalone` process with its default bounds: 10 consumers
    granting 1,000 permits over 60 MB and never reading took RSS from 396 to 1,664 MB before."""
    from tests.broker.pulsar_standalone import Standalone as Process

    s = Process(tmp_path / "rss")
    try:
        topic = "persistent://public/default/rss"
        count = 600
        produce(s.url, topic, count)
        port = int(s.url.rsplit(":", 1)[1])
        before = _rss(s.proc.pid)
        stats = "/admin/v2/persistent/public/default/rss/stats"
        stuck = [stuck_consumer(port, topic, f"s{i}", api.CommandSubscribe.Exclusive, 1000) for i in range(10)]
        try:
            last, quiet_since, peak = -1, time.monotonic(), before
            deadline = time.monotonic() + 60
            while time.monotonic() - quiet_since < 2:
                assert time.monotonic() < deadline, "the broker kept dispatching for 60 s"
                out = s.admin.call("GET", stats)["msgOutCounter"]
                if out != last:
                    last, quiet_since = out, time.monotonic()
                peak = max(peak, _rss(s.proc.pid))
                time.sleep(0.1)
            # Each stuck consumer was given at most 2 MiB (the bound) + 5 MiB (one read) + what the kernel's
            # socket buffers took (~4 MiB), held twice: in the transport and as its unacknowledged messages.
            # Measured: +166 MB; without backpressure (--max-pending-write-bytes 0) +1,050 MB.
            assert peak - before < 320 * 1024 * 1024, (before, peak)
        finally:
            for sock in stuck:
                sock.close()
        client = pulsar.Client(s.url)
        try:
            consumer = client.subscribe(topic, "s0")
            got = [int.from_bytes(consumer.receive(10_000).data()[:4], "big") for _ in range(count)]
            assert got == list(range(count))
        finally:
            client.close()
    finally:
        s.stop()
