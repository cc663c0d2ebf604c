"""A client connection to one bookie: blocking calls and a pipelined stream (futures or callbacks).

The stream carries batches (`Batches` rpc): the sender thread packs every request queued
meanwhile into one message, because grpcio's Python streaming costs far more per message
than per byte; a lone request still leaves at once. `send_many` hands over many requests
at once with a callback each (no future per request): their replies are matched by tag and
each callback gets the reply, a stream-level error code, or the ConnectionError that ended
the stream, exactly once.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future

import grpc

from impl.bookie import bookie_pb2 as pb
from impl.bookie import wire
from impl.bookie.protocol import ErrorCode, Request, Response

MAX_BATCH = 512  # requests per stream message
MAX_BATCH_BYTES = 4 * 1024 * 1024  # of request frames per stream message (gRPC caps a message at 16 MiB)

Result = Response | ErrorCode | ConnectionError  # the reply, a stream-level error code, or the stream's end
Callback = Callable[[Result], None]

log = logging.getLogger(__name__)


def settle_callback(callback: Callback, result: Result) -> None:
    """Run a request's callback; a failing one is a caller's bug, logged, and must not end the stream."""
    try:
        callback(result)
    except Exception:
        log.exception("callback for a bookie reply failed")


_answering = threading.local()  # `deferred`: the work put off to the end of the batch this thread answers


def after_answers(work: Callable[[], None]) -> bool:
    """Put `work` off until this thread has answered the whole stream message it is answering, and
    return True; False (and nothing done) outside one. A client driver uses it to take the steps of
    all the answers of one message in one round: one hand-over of all their requests, not one each."""
    deferred: list[Callable[[], None]] | None = getattr(_answering, "deferred", None)
    if deferred is None:
        return False
    deferred.append(work)
    return True


def answer_batch(lock: threading.Lock, callbacks: dict[int, Callback], responses: Sequence[pb.StreamResp]) -> None:
    """Answer one stream message's responses: claim their callbacks by tag under `lock`, run them outside it
    in reply order (a tag already answered, e.g. failed at the stream's end, is skipped); then the work
    they put off (`after_answers`)."""
    messages = list(responses)  # a protobuf repeated field costs more to walk than a list, and it is walked twice
    with lock:
        claimed = [callbacks.pop(msg.tag, None) for msg in messages]
    run_answers(
        (callback, wire.response_from_pb(msg))
        for msg, callback in zip(messages, claimed, strict=True)
        if callback is not None
    )


def run_answers(answers: Iterable[tuple[Callback, Result]]) -> None:
    """Run claimed callbacks with their results, in order, as the answers of one stream message: the work
    they put off (`after_answers`) runs once they all have."""
    deferred: list[Callable[[], None]] = []
    _answering.deferred = deferred
    try:
        for callback, result in answers:
            settle_callback(callback, result)
    finally:
        _answering.deferred = None
    for work in deferred:
        try:
            work()
        except Exception:
            log.exception("work put off to the end of a bookie reply batch failed")


class BookieChannel:
    """`call(request)` blocks; `submit(request)` and `send_many(requests)` pipeline over one bidirectional stream."""

    def __init__(self, address: str) -> None:
        self.address = address
        self._grpc = grpc.insecure_channel(address, options=wire.CHANNEL_OPTIONS)
        self._batches = wire.batches_stream(self._grpc)
        self._tags = itertools.count(1)
        self._callbacks: dict[int, Callback] = {}
        self._lock = threading.Lock()
        self._outgoing: queue.SimpleQueue[list[bytes] | None] = queue.SimpleQueue()  # request frames
        self._stream_thread: threading.Thread | None = None

    def call(self, request: Request, timeout: float = 10.0) -> Response | ErrorCode:
        return self.submit(request).result(timeout)

    def submit(self, request: Request) -> Future[Response | ErrorCode]:
        future: Future[Response | ErrorCode] = Future()

        def settle(result: Result) -> None:
            if isinstance(result, ConnectionError):
                future.set_exception(result)
            else:
                future.set_result(result)

        self.send_many([(request, settle)])
        return future

    def send_many(self, requests: Sequence[tuple[Request, Callback]], encoded: dict[int, bytes] | None = None) -> None:
        """Queue requests in order, as one hand-over to the sender thread; each callback runs once,
        on the stream thread, with the request's reply (or error code), or with a ConnectionError.
        `encoded`: see `wire.request_frame`."""
        if not requests:
            return
        tagged = [(next(self._tags), request, callback) for request, callback in requests]
        messages = [wire.request_frame(tag, request, encoded) for tag, request, _ in tagged]
        with self._lock:
            for tag, _, callback in tagged:
                self._callbacks[tag] = callback
            if self._stream_thread is None:
                self._stream_thread = threading.Thread(target=self._run_stream, name="bookie-stream", daemon=True)
                self._stream_thread.start()
        self._outgoing.put(messages)

    def _requests(self) -> Iterator[bytes]:
        """Serialized batches of at most MAX_BATCH requests (and about MAX_BATCH_BYTES) in queue order:
        whatever was queued meanwhile leaves together; a larger hand-over is split."""
        for batch in wire.batches_from(self._outgoing, MAX_BATCH, MAX_BATCH_BYTES, len):
            yield b"".join(batch)

    def _run_stream(self) -> None:
        error = ConnectionError(f"stream to bookie {self.address} closed")
        try:
            for batch in self._batches(self._requests()):
                answer_batch(self._lock, self._callbacks, batch.responses)
        except grpc.RpcError as exc:
            error = ConnectionError(f"bookie {self.address}: {exc.code()}")
        with self._lock:
            failed, self._callbacks = self._callbacks, {}
            self._stream_thread = None
        for callback in failed.values():
            settle_callback(callback, error)

    def close(self) -> None:
        self._outgoing.put(None)
        self._grpc.close()
