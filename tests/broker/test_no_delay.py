"""Nagle's algorithm is off on every connection the servers accept: a MESSAGE or a receipt leaves when it
is written, not when the client's delayed ACK arrives (~40 ms later). Checked on real accepted sockets."""

from __future__ import annotations

import asyncio
import socket

import pulsar

from impl.broker.standalone import Standalone
from impl.loop_server import LoopServer
from tests.waiting import wait_for


def _no_delay(sock: socket.socket) -> int:
    return sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)


def test_every_connection_a_loop_server_accepts_has_tcp_nodelay() -> None:
    seen: list[int] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(_no_delay(writer.get_extra_info("socket")))
        writer.close()

    server = LoopServer("127.0.0.1", 0, "nodelay-test")
    assert _no_delay(server.sock) == 0  # the listening socket itself: asyncio would not set it either
    server.start(handle)
    try:
        for _ in range(3):
            with socket.create_connection((server.host, server.port)) as s:
                s.recv(1)
        wait_for(lambda: len(seen) == 3, "three accepted connections", 5)
    finally:
        server.stop()
    assert seen == [1, 1, 1]


def test_the_brokers_pulsar_connections_have_tcp_nodelay(standalone: Standalone) -> None:
    broker = standalone.broker
    assert broker is not None
    client = pulsar.Client(standalone.pulsar_service_url)
    try:
        client.create_producer("persistent://public/default/nodelay").send(b"x")
        connections = list(broker.pulsar.connections)
        assert connections, "the official client's connection is not among the listener's"
        assert {_no_delay(c.writer.get_extra_info("socket")) for c in connections} == {1}  # type: ignore[attr-defined]
    finally:
        client.close()
