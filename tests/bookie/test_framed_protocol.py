"""The bookie's framed protocol (impl/bookie/framed.py, listener.py) on a real bookie's port: framed and gRPC
clients on the one port, what bad frames get, and replies to a client that reads slowly, all delivered."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from impl.bookie import bookie_pb2 as pb
from impl.bookie import framed, listener, wire
from impl.bookie.channel import BookieChannel
from impl.bookie.client.framed_channel import FramedBookieChannel
from impl.bookie.client.io_loop import IoLoop
from impl.bookie.client.pipelined_transport import PipelinedTransport
from impl.bookie.entry_format import encode_entry
from impl.bookie.protocol import AddRequest, AddResponse, ErrorCode, ReadRequest, ReadResponse, Request, Response
from impl.bookie.server import Bookie, BookieServer
from tests.waiting import wait_for

KEY = b"k" * 20


def body(eid: int, size: int = 300) -> bytes:
    return encode_entry(1, eid, eid - 1, eid + 1, b"x" * size)


@pytest.fixture
def server(tmp_path: Path) -> Iterator[BookieServer]:
    server = BookieServer(Bookie(tmp_path, checkpoint_interval=3600))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def connect(server: BookieServer, receive_buffer: int | None = None) -> socket.socket:
    sock = socket.socket()
    if receive_buffer is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, receive_buffer)
    sock.settimeout(20)
    sock.connect(("127.0.0.1", server.port))
    sock.sendall(framed.PREFACE)
    return sock


def send(sock: socket.socket, tagged: list[tuple[int, Request]]) -> None:
    sock.sendall(framed.frame([wire.request_frame(tag, request) for tag, request in tagged]))


def receive(sock: socket.socket, count: int) -> list[tuple[int, Response | ErrorCode]]:
    """The next `count` replies, in the order the bookie sent them."""
    reader = framed.FrameReader()
    replies: list[tuple[int, Response | ErrorCode]] = []
    while len(replies) < count:
        data = sock.recv(1 << 20)
        assert data, f"the bookie closed the connection after {len(replies)} of {count} replies"
        for frame_body in reader.feed(data):
            replies += [
                (msg.tag, wire.response_from_pb(msg)) for msg in pb.StreamRespBatch.FromString(frame_body).responses
            ]
    return replies


def closed_by_peer(sock: socket.socket) -> bool:
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_frames_cut_from_any_split_of_the_stream() -> None:
    frames = [framed.frame([b"a" * n]) for n in (0, 1, 5, 70_000)]
    stream = b"".join(frames)
    for step in (1, 3, 4, 4096, len(stream)):
        reader = framed.FrameReader()
        got = [body for i in range(0, len(stream), step) for body in reader.feed(stream[i : i + step])]
        assert got == [b"a" * n for n in (0, 1, 5, 70_000)]
    with pytest.raises(framed.FrameTooLong):
        list(framed.FrameReader(max_frame=10).feed(framed.HEADER.pack(11)))


def test_parts_go_in_order_into_frames_within_their_limits() -> None:
    parts = [bytes([i]) * n for i, n in enumerate((3, 3, 3, 9, 1, 1, 1, 1))]
    reader = framed.FrameReader()
    cut = list(framed.frames(parts, max_bytes=6, max_parts=3))
    bodies = [body for data in cut for body in reader.feed(data)]
    assert b"".join(bodies) == b"".join(parts)
    assert [len(body) for body in bodies] == [6, 3, 9, 3, 1]  # 3+3; 3 (9 would pass 6); 9 alone; 1+1+1; 1


def test_framed_and_grpc_clients_share_the_bookies_port(server: BookieServer) -> None:
    address = f"127.0.0.1:{server.port}"
    answers: list[object] = []
    done = threading.Semaphore(0)
    with PipelinedTransport(timeout_s=20) as transport:  # framed
        for eid in range(20):
            transport.send(address, AddRequest(1, eid, KEY, body(eid)), lambda r: (answers.append(r), done.release()))
        for _ in range(20):
            assert done.acquire(timeout=20)
    assert sorted(answers, key=lambda r: r.entry_id) == [AddResponse(1, eid, ErrorCode.EOK) for eid in range(20)]  # type: ignore[attr-defined]
    grpc_client = BookieChannel(address)  # relayed to the gRPC server
    try:
        assert grpc_client.call(ReadRequest(1, 7), timeout=20) == ReadResponse(1, 7, ErrorCode.EOK, body(7))
        assert grpc_client.call(AddRequest(1, 20, KEY, body(20)), timeout=20) == AddResponse(1, 20, ErrorCode.EOK)
    finally:
        grpc_client.close()
    sock = connect(server)
    with sock:
        send(sock, [(3, ReadRequest(1, 20))])
        assert receive(sock, 1) == [(3, ReadResponse(1, 20, ErrorCode.EOK, body(20)))]


def test_a_request_without_a_body_gets_ebadreq_and_the_connection_goes_on(server: BookieServer) -> None:
    with connect(server) as sock:
        empty = pb.StreamReq(tag=9).SerializeToString()
        sock.sendall(framed.frame([b"\x0a" + bytes([len(empty)]) + empty]))  # StreamReqBatch.requests = [tag 9]
        assert receive(sock, 1) == [(9, ErrorCode.EBADREQ)]
        send(sock, [(10, AddRequest(1, 0, KEY, body(0)))])
        assert receive(sock, 1) == [(10, AddResponse(1, 0, ErrorCode.EOK))]


@pytest.mark.parametrize(
    "bad",
    [
        framed.HEADER.pack(framed.MAX_FRAME + 1),  # longer than any frame may be
        framed.HEADER.pack(3) + b"\xff\xff\xff",  # not a StreamReqBatch
    ],
    ids=["too-long", "not-protobuf"],
)
def test_a_bad_frame_ends_its_connection_and_the_bookie_serves_on(server: BookieServer, bad: bytes) -> None:
    with connect(server) as sock:
        send(sock, [(1, AddRequest(1, 0, KEY, body(0)))])
        assert receive(sock, 1) == [(1, AddResponse(1, 0, ErrorCode.EOK))]
        sock.sendall(bad)
        assert closed_by_peer(sock)
    with connect(server) as other:
        send(other, [(2, ReadRequest(1, 0))])
        assert receive(other, 1) == [(2, ReadResponse(1, 0, ErrorCode.EOK, body(0)))]


def test_a_connection_without_the_preface_or_anything_else_is_closed(server: BookieServer) -> None:
    sock = socket.create_connection(("127.0.0.1", server.port), timeout=20)
    sock.shutdown(socket.SHUT_WR)
    with sock:
        assert closed_by_peer(sock)
    with connect(server) as other:  # still serving
        send(other, [(1, AddRequest(1, 0, KEY, body(0)))])
        assert receive(other, 1) == [(1, AddResponse(1, 0, ErrorCode.EOK))]


def test_replies_to_a_client_that_reads_slowly_all_arrive_in_order(server: BookieServer) -> None:
    """Far more reply bytes than the socket's buffers hold: the ones the socket does not take at once wait
    for the connection's writer, behind any sent earlier, and none is lost or reordered."""
    entry = body(0, size=256 * 1024)
    with connect(server, receive_buffer=4096) as sock:
        send(sock, [(1, AddRequest(1, 0, KEY, entry))])
        assert receive(sock, 1) == [(1, AddResponse(1, 0, ErrorCode.EOK))]
        reads = [(100 + i, ReadRequest(1, 0)) for i in range(200)]  # ~50 MiB of replies
        for i in range(0, len(reads), 10):
            send(sock, reads[i : i + 10])
        replies = receive(sock, len(reads))
        assert any(t.name == "bookie-replies" for t in threading.enumerate()), "no reply waited for the writer"
    assert [tag for tag, _ in replies] == [tag for tag, _ in reads]
    assert all(reply == ReadResponse(1, 0, ErrorCode.EOK, entry) for _, reply in replies)


def test_both_ends_of_a_framed_connection_have_tcp_nodelay(server: BookieServer) -> None:
    """An add's reply leaves when the journal's writer sends it, not at the client's delayed ACK."""
    io = IoLoop()
    channel = FramedBookieChannel(f"127.0.0.1:{server.port}", io)
    try:
        answered = threading.Event()
        channel.send_many([(AddRequest(1, 0, KEY, body(0)), lambda _: answered.set())])
        assert answered.wait(20)
        assert channel._sock is not None
        assert channel._sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) == 1
        accepted = list(server.listener._connections)
        assert accepted and {c.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) for c in accepted} == {1}
    finally:
        channel.close()
        io.close()


def test_a_client_that_leaves_its_replies_unread_is_not_read_from_until_it_reads(server: BookieServer) -> None:
    """The bookie takes no more frames of a connection's requests while more than MAX_BACKLOG_BYTES of its
    replies wait unread, so a client that only sends cannot make it hold replies without bound; once the
    client reads, every reply arrives, in order."""
    entry = body(0, size=256 * 1024)
    reads = [(100 + i, ReadRequest(1, 0)) for i in range(600)]  # ~150 MiB of replies, ~18 KiB of requests
    with connect(server, receive_buffer=4096) as sock:
        send(sock, [(1, AddRequest(1, 0, KEY, entry))])
        assert receive(sock, 1) == [(1, AddResponse(1, 0, ErrorCode.EOK))]
        for i in range(0, len(reads), 10):
            send(sock, reads[i : i + 10])
        held_at = listener.MAX_BACKLOG_BYTES // len(entry)  # reads whose replies fill the backlog
        wait_for(lambda: server.bookie.read_latency.count >= held_at, "the backlog to fill", 20)
        time.sleep(0.5)
        assert server.bookie.read_latency.count <= held_at + 20, "the bookie kept taking requests"
        replies = receive(sock, len(reads))
    assert [tag for tag, _ in replies] == [tag for tag, _ in reads]
    assert server.bookie.read_latency.count == len(reads)
