"""A client connection to one bookie: blocking calls and a pipelined stream returning futures.

The stream carries batches (`Batches` rpc): the sender thread packs every request queued
meanwhile into one message, because grpcio's Python streaming costs far more per message
than per byte; a lone request still leaves at once.
"""

from __future__ import annotations

import itertools
import queue
import threading
from collections.abc import Iterator
from concurrent.futures import Future

import grpc

from impl.bookie import bookie_pb2 as pb
from impl.bookie import bookie_pb2_grpc as pb_grpc
from impl.bookie import wire
from impl.bookie.protocol import ErrorCode, Request, Response

MAX_BATCH = 512  # requests per stream message
MAX_BATCH_BYTES = 4 * 1024 * 1024  # of entry bodies per stream message (gRPC caps a message at 16 MiB)


class BookieChannel:
    """`call(request)` blocks; `submit(request)` pipelines over one bidirectional stream."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._grpc = grpc.insecure_channel(address, options=[("grpc.max_send_message_length", 16 * 1024 * 1024)])
        self._stub = pb_grpc.BookieStub(self._grpc)
        self._tags = itertools.count(1)
        self._futures: dict[int, Future[Response | ErrorCode]] = {}
        self._lock = threading.Lock()
        self._outgoing: queue.SimpleQueue[pb.StreamReq | None] = queue.SimpleQueue()
        self._stream_thread: threading.Thread | None = None

    def call(self, request: Request, timeout: float = 10.0) -> Response | ErrorCode:
        return self.submit(request).result(timeout)

    def submit(self, request: Request) -> Future[Response | ErrorCode]:
        future: Future[Response | ErrorCode] = Future()
        tag = next(self._tags)
        with self._lock:
            self._futures[tag] = future
            if self._stream_thread is None:
                self._stream_thread = threading.Thread(target=self._run_stream, name="bookie-stream", daemon=True)
                self._stream_thread.start()
        self._outgoing.put(wire.request_to_pb(tag, request))
        return future

    def _requests(self) -> Iterator[pb.StreamReqBatch]:
        while True:
            item = self._outgoing.get()
            if item is None:
                return
            batch = [item]
            size = item.add.ByteSize() if item.HasField("add") else 0
            closing = False
            while len(batch) < MAX_BATCH and size < MAX_BATCH_BYTES:
                try:
                    item = self._outgoing.get_nowait()
                except queue.Empty:
                    break
                if item is None:
                    closing = True
                    break
                batch.append(item)
                if item.HasField("add"):
                    size += item.add.ByteSize()
            yield pb.StreamReqBatch(requests=batch)
            if closing:
                return

    def _run_stream(self) -> None:
        error: BaseException = ConnectionError(f"stream to bookie {self.address} closed")
        try:
            for batch in self._stub.Batches(self._requests()):
                for msg in batch.responses:
                    with self._lock:
                        future = self._futures.pop(msg.tag, None)
                    if future is not None:
                        future.set_result(wire.response_from_pb(msg))
        except grpc.RpcError as exc:
            error = ConnectionError(f"bookie {self.address}: {exc.code()}")
        with self._lock:
            failed, self._futures = self._futures, {}
            self._stream_thread = None
        for future in failed.values():
            future.set_exception(error)

    def close(self) -> None:
        self._outgoing.put(None)
        self._grpc.close()
