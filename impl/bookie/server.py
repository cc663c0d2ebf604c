"""The bookie shell: drives BookieCore with the journal and serves it over gRPC.

Requests go into the core under one lock; journal appends go to the group-committing
journal, whose writer thread reports durability back into the core, which releases the
held replies. Reads never touch the journal, so they never wait behind its fsync.
On start the journal is replayed into the core; a torn tail is reported, not fatal.
"""

from __future__ import annotations

import queue
import shutil
import threading
from collections.abc import Callable, Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc

from impl.bookie import bookie_pb2 as pb
from impl.bookie import bookie_pb2_grpc as pb_grpc
from impl.bookie import wire
from impl.bookie.core import AppendJournal, BookieCore, Output, Reply
from impl.bookie.journal import Journal, ReplayReport, replay
from impl.bookie.protocol import (
    AddRequest,
    AddResponse,
    ErrorCode,
    ReadLacRequest,
    ReadLacResponse,
    ReadRequest,
    ReadResponse,
    Request,
    Response,
    WriteLacResponse,
)

Deliver = Callable[[Response], None]


def error_response(request: Request, code: ErrorCode) -> Response:
    if isinstance(request, AddRequest):
        return AddResponse(request.ledger_id, request.entry_id, code)
    if isinstance(request, ReadRequest):
        return ReadResponse(request.ledger_id, request.entry_id, code)
    if isinstance(request, ReadLacRequest):
        return ReadLacResponse(request.ledger_id, code)
    return WriteLacResponse(request.ledger_id, code)


class Bookie:
    """Core + journal; `submit(request, deliver)` calls `deliver(response)` exactly once."""

    def __init__(
        self,
        data_dir: Path,
        journal_dir: Path | None = None,
        max_inflight: int = 10_000,
        min_free_bytes: int = 0,
        on_readonly: Callable[[bool], None] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir)
        self.journal_dir = Path(journal_dir) if journal_dir else self.data_dir / "journal"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.core = BookieCore()
        self.replay_report = ReplayReport()
        for record in replay(self.journal_dir, self.replay_report):
            self.core.replay(record)
        self.journal = Journal(self.journal_dir)
        self.max_inflight = max_inflight
        self.min_free_bytes = min_free_bytes
        self.on_readonly = on_readonly
        self._lock = threading.Lock()
        self._deliveries: dict[int, Deliver] = {}
        self._next_id = 0
        self._stop = threading.Event()
        self._disk_thread = threading.Thread(target=self._watch_disk, name="disk-watch", daemon=True)
        self.check_disk()
        self._disk_thread.start()

    def submit(self, request: Request, deliver: Deliver) -> None:
        with self._lock:
            if len(self._deliveries) >= self.max_inflight:
                replies: list[Output] = [Reply(-1, error_response(request, ErrorCode.ETOOMANYREQUESTS))]
                self._deliveries[-1] = deliver
            else:
                rid = self._next_id
                self._next_id += 1
                self._deliveries[rid] = deliver
                try:
                    replies = self.core.handle(request, rid)
                except Exception:  # a request the core cannot digest is malformed, never a crash
                    replies = [Reply(rid, error_response(request, ErrorCode.EBADREQ))]
            self._perform(replies)

    def _perform(self, outputs: list[Output]) -> None:
        for out in outputs:
            if isinstance(out, AppendJournal):
                self.journal.append(out.records, self._durable_callback(out.token))
            else:
                self._deliveries.pop(out.request_id)(out.response)

    def _durable_callback(self, token: int) -> Callable[[], None]:
        return lambda: self._durable(token)

    def _durable(self, token: int) -> None:
        with self._lock:
            self._perform(self.core.on_durable(token))

    def check_disk(self) -> None:
        readonly = shutil.disk_usage(self.data_dir).free < self.min_free_bytes
        if readonly != self.core.readonly:
            with self._lock:
                self.core.readonly = readonly
            if self.on_readonly:
                self.on_readonly(readonly)

    def _watch_disk(self) -> None:
        while not self._stop.wait(1.0):
            self.check_disk()

    def close(self) -> None:
        self._stop.set()
        self.journal.close()


class _Servicer(pb_grpc.BookieServicer):
    def __init__(self, bookie: Bookie) -> None:
        self.bookie = bookie

    def _call(self, request: Request) -> Response:
        answer: queue.Queue[Response] = queue.Queue(1)
        self.bookie.submit(request, answer.put)
        return answer.get()

    def Add(self, request: pb.AddReq, context: Any) -> pb.AddResp:
        response = self._call(wire.add_from_pb(request))
        assert isinstance(response, AddResponse)
        return wire.add_resp_to_pb(response)

    def Read(self, request: pb.ReadReq, context: Any) -> pb.ReadResp:
        response = self._call(wire.read_from_pb(request))
        assert isinstance(response, ReadResponse)
        return wire.read_resp_to_pb(response)

    def ReadLac(self, request: pb.ReadLacReq, context: Any) -> pb.ReadLacResp:
        response = self._call(ReadLacRequest(request.ledger_id))
        assert isinstance(response, ReadLacResponse)
        return wire.read_lac_resp_to_pb(response)

    def WriteLac(self, request: pb.WriteLacReq, context: Any) -> pb.WriteLacResp:
        response = self._call(wire.request_from_pb(pb.StreamReq(write_lac=request)))  # type: ignore[arg-type]
        assert isinstance(response, WriteLacResponse)
        return wire.write_lac_resp_to_pb(response)

    def Channel(self, request_iterator: Iterator[pb.StreamReq], context: Any) -> Iterator[pb.StreamResp]:
        out: queue.Queue[pb.StreamResp | None] = queue.Queue()
        pending = [0]
        done = [False]
        lock = threading.Lock()

        def finish_one() -> None:
            with lock:
                pending[0] -= 1
                if done[0] and pending[0] == 0:
                    out.put(None)

        def read_requests() -> None:
            try:
                for msg in request_iterator:
                    request = wire.request_from_pb(msg)
                    if request is None:
                        out.put(pb.StreamResp(tag=msg.tag, code=ErrorCode.EBADREQ.value))
                        continue
                    with lock:
                        pending[0] += 1

                    def deliver(response: Response, tag: int = msg.tag) -> None:
                        out.put(wire.response_to_pb(tag, response))
                        finish_one()

                    self.bookie.submit(request, deliver)
            except Exception:  # client went away
                pass
            with lock:
                done[0] = True
                if pending[0] == 0:
                    out.put(None)

        threading.Thread(target=read_requests, name="channel-reader", daemon=True).start()
        while True:
            item = out.get()
            if item is None:
                return
            yield item


class BookieServer:
    """A Bookie served over gRPC on host:port (port 0 = any free port; see `.port`)."""

    def __init__(self, bookie: Bookie, host: str = "127.0.0.1", port: int = 0, workers: int = 32) -> None:
        self.bookie = bookie
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=workers),
            options=[("grpc.max_receive_message_length", 16 * 1024 * 1024)],
        )
        pb_grpc.add_BookieServicer_to_server(_Servicer(bookie), self.server)
        self.port = self.server.add_insecure_port(f"{host}:{port}")
        if self.port == 0:
            raise OSError(f"cannot listen on {host}:{port}; pick a free port or use 0")
        self.host = host

    def start(self) -> None:
        self.server.start()

    def stop(self) -> None:
        self.server.stop(grace=1.0).wait()
        self.bookie.close()
