"""The proxy's relay (impl/proxy/listener.py, `relay_both_ways`) on real sockets: everything one side sends reaches
the other, in order, and a side that stops reading stops the relay reading from the sender, so the
proxy holds no more than a buffer's worth (the protocol-level flow control that replaced the streams'
`drain`)."""

from __future__ import annotations

import asyncio
import hashlib
import socket
import threading

from impl.proxy.listener import relay_both_ways

MB = 1024 * 1024


def test_a_relay_carries_everything_in_order_and_holds_back_a_sender_whose_reader_stalls() -> None:
    client, client_inner = socket.socketpair()
    broker_inner, broker = socket.socketpair()
    payload = bytes(range(256)) * (32 * MB // 256)  # 32 MiB, more than every buffer on the way
    sent = threading.Event()

    def send() -> None:
        client.sendall(payload)
        sent.set()

    async def relay() -> tuple[int, bytes]:
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[None] = loop.create_future()
        client_side, _ = await loop.create_connection(asyncio.Protocol, sock=client_inner)
        broker_side, _ = await loop.create_connection(asyncio.Protocol, sock=broker_inner)
        assert isinstance(client_side, asyncio.Transport) and isinstance(broker_side, asyncio.Transport)
        relay_both_ways(client_side, broker_side, ended)
        threading.Thread(target=send, daemon=True).start()
        await asyncio.sleep(1.0)  # the broker side reads nothing meanwhile
        held = broker_side.get_write_buffer_size()
        assert not sent.is_set(), "the whole payload left the client while nobody read it"
        received = hashlib.sha256()
        count = 0
        broker.setblocking(False)
        while count < len(payload):
            try:
                chunk = broker.recv(MB)
            except BlockingIOError:
                await asyncio.sleep(0.001)
                continue
            received.update(chunk)
            count += len(chunk)
        client.close()  # the relay ends when a side closes
        await asyncio.wait_for(ended, 5)
        broker_side.close()
        return held, received.digest()

    try:
        held, digest = asyncio.run(relay())
    finally:
        client.close()
        broker.close()
    assert held <= 2 * MB, f"the relay buffered {held} bytes for a side that did not read"
    assert digest == hashlib.sha256(payload).digest()
    assert sent.wait(5)
