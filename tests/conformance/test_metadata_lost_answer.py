"""A conditional write whose answer is lost (issue 24 item 3): spec/metadata.tla with LostAnswers, and
what pulsar-ref's ZooKeeper store does on a real ZooKeeper.

- The real store: a TCP proxy between the store and a real ZooKeeper cuts the connection when the
  answer to a setData comes back (ZooKeeper applied it). The store reports ConnectionLoss ("may or may
  not have applied"), never success or BadVersion; the write is there; the store reconnects on the same
  session; the retry (same version) meets its own write as BadVersion; reading back, the writer token
  in the data tells it is its own write (metadata.tla's Resolution = "token").
- The spec's lost-answer models replayed against the in-memory store: the token resolution's whole state
  graph, and the two resolutions TLC refutes ("conflict", "content"), whose counterexamples the store and
  the harness's client follow to the end.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import TypeVar

import pytest

from conformance.metadata_spec import counter_writer
from conformance.suite import replay_model
from conformance.tlc import load_manifest
from impl.metadata.store import BadVersion, ConnectionLoss
from impl.metadata.zkserver import ZooKeeperServer
from impl.metadata.zookeeper import ZooKeeperStore

SET_DATA = 5  # ZooKeeper's OpCode.setData
T = TypeVar("T")
MODELS = {m.name: m for m in load_manifest()}


def _read_frame(sock: socket.socket) -> bytes | None:
    """One length-prefixed ZooKeeper frame (length included), or None when the peer closed."""
    header = _read_exactly(sock, 4)
    if header is None:
        return None
    body = _read_exactly(sock, struct.unpack(">i", header)[0])
    return None if body is None else header + body


def _read_exactly(sock: socket.socket, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        try:
            chunk = sock.recv(left)
        except OSError:
            return None
        if not chunk:
            return None
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


class AnswerCuttingProxy:
    """Forwards ZooKeeper connections; once armed, drops the connection instead of forwarding the answer
    to the next setData (so ZooKeeper has applied it, and the client never hears so)."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.armed = threading.Event()
        self.cut = threading.Event()
        self.cut_xid: int | None = None
        self._set_xids: set[int] = set()
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        threading.Thread(target=self._accept, name="zk-proxy-accept", daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            server = socket.create_connection(("127.0.0.1", self.upstream_port))
            with self._lock:
                self._sockets += [client, server]
            threading.Thread(target=self._requests, args=(client, server), daemon=True).start()
            threading.Thread(target=self._answers, args=(server, client), daemon=True).start()

    def _requests(self, client: socket.socket, server: socket.socket) -> None:
        first = True  # the ConnectRequest has no request header
        while (frame := _read_frame(client)) is not None:
            if not first and len(frame) >= 12:
                xid, op = struct.unpack(">ii", frame[4:12])
                if op == SET_DATA and self.armed.is_set():
                    with self._lock:
                        self._set_xids.add(xid)
            first = False
            try:
                server.sendall(frame)
            except OSError:
                break
        _close(client, server)

    def _answers(self, server: socket.socket, client: socket.socket) -> None:
        first = True  # the ConnectResponse has no reply header
        while (frame := _read_frame(server)) is not None:
            if not first and len(frame) >= 8:
                (xid,) = struct.unpack(">i", frame[4:8])
                with self._lock:
                    hit = xid in self._set_xids
                if hit and self.armed.is_set():
                    self.armed.clear()
                    self.cut_xid = xid
                    self.cut.set()  # before the close: the client may look as soon as its call fails
                    _close(client, server)  # the answer is dropped with the connection
                    return
            first = False
            try:
                client.sendall(frame)
            except OSError:
                break
        _close(client, server)

    def close(self) -> None:
        self.listener.close()
        with self._lock:
            _close(*self._sockets)


def _close(*socks: socket.socket) -> None:
    for s in socks:
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)
        s.close()


@pytest.fixture
def proxy(zookeeper: ZooKeeperServer) -> Iterator[AnswerCuttingProxy]:
    p = AnswerCuttingProxy(zookeeper.client_port)
    try:
        yield p
    finally:
        p.close()


def _when_connected(operation: Callable[[], T], deadline_s: float = 30.0) -> T:
    """Run `operation` once the store has reconnected (ConnectionLoss until then)."""
    deadline = time.monotonic() + deadline_s
    while True:
        try:
            return operation()
        except ConnectionLoss:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


@pytest.mark.zookeeper
def test_the_retry_of_a_write_whose_answer_was_lost_meets_its_own_write(
    zookeeper: ZooKeeperServer, proxy: AnswerCuttingProxy
) -> None:
    path = f"/t-{uuid.uuid4().hex}"
    observer = ZooKeeperStore(zookeeper.connect_string)
    store = ZooKeeperStore(f"127.0.0.1:{proxy.port}", session_timeout_s=10.0)
    try:
        observer.create(path, b"0")
        _, stat = store.get(path)
        session = store.session_id
        mine = b"1:c1:1"  # data, writer, the writer's write number (metadata.tla's token)

        proxy.armed.set()
        with pytest.raises(ConnectionLoss, match="may or may not have applied"):
            store.set(path, mine, stat.version)
        assert proxy.cut.is_set()  # the connection went down with the setData's answer

        stored, applied = observer.get(path)  # it applied
        assert (stored, applied.version) == (mine, stat.version + 1)

        with pytest.raises(BadVersion):  # the retry, on the same session, meets its own write
            _when_connected(lambda: store.set(path, mine, stat.version))
        assert store.session_id == session
        data, now = store.get(path)  # reading back resolves it: version + 1 and its own token
        assert now.version == stat.version + 1 and counter_writer(data) == ("c1", 1)

        # Another client's write at the same version carries another token: not ours.
        observer.set(path, b"2:c2:1", now.version)
        other, _ = store.get(path)
        assert counter_writer(other) == ("c2", 1)
    finally:
        store.close()
        observer.close()


@pytest.mark.zookeeper
def test_an_answer_lost_before_the_write_reaches_zookeeper_leaves_nothing(
    zookeeper: ZooKeeperServer, proxy: AnswerCuttingProxy
) -> None:
    # The other lost answer: the connection drops with the request; the retry applies, as the spec's
    # RetryIncrement does when nothing changed the node.
    path = f"/t-{uuid.uuid4().hex}"
    observer = ZooKeeperStore(zookeeper.connect_string)
    store = ZooKeeperStore(f"127.0.0.1:{proxy.port}", session_timeout_s=10.0)
    try:
        observer.create(path, b"0")
        _, stat = store.get(path)
        with proxy._lock:
            connections = list(proxy._sockets)
        _close(*connections)  # the store's connection is gone before it sends anything
        written = _when_connected(lambda: store.set(path, b"1:c1:1", stat.version))
        assert written.version == stat.version + 1
        stored, _ = observer.get(path)
        assert stored == b"1:c1:1"
    finally:
        store.close()
        observer.close()


@pytest.mark.tlc
@pytest.mark.parametrize(
    "name", ["metadata-lostanswers-ci", "metadata-lostanswers-conflict-ci", "metadata-lostanswers-content-ci"]
)
def test_the_lost_answer_models_are_replayed(name: str) -> None:
    result = replay_model(MODELS[name])
    assert result.ok, str(result.graph and result.graph.mismatch) + str(result.trace and result.trace.mismatch)
    if result.graph is not None:
        assert result.graph.edges_covered == result.graph.edges > 0
        return
    assert result.trace is not None and result.follow and result.trace.mismatch is None
    assert result.trace.steps == result.trace_states - 1 > 0
