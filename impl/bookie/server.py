"""The bookie shell: drives BookieCore with the journal and ledger storage, serves it (framed and gRPC).

Every input goes into the core as a typed event through `BookieCore.step`, under one lock:
requests (RequestReceived), the journal's durability (JournalDurable), ledger storage's failures
(EntryNotStored), the disk check (SetReadOnly), the restart (RestoreLedger, RestoreDeleted,
Replay) and garbage collection (ForgetLedger). Journal appends go to the group-committing
journal, whose writer thread reports durability back into the core, which releases the
held replies. Entry bodies go to ledger storage (impl/bookie/ledger_storage.py) before
their journal append, and reads are answered from it outside the core lock, so a read
never waits behind the journal's fsync.

A maintenance thread checkpoints (impl/bookie/checkpoint.py) every `checkpoint_interval`
seconds and on close, so that a restart loads the ledger index and replays only the
journal after the checkpoint mark; with a metadata store it also garbage-collects
deleted ledgers every `gc_interval` seconds (impl/bookie/garbage_collector.py).
A torn journal tail or damaged index file is reported, not fatal.
"""

from __future__ import annotations

import logging
import os
import queue
import shutil
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import grpc

from impl import heap
from impl.bookie import bookie_pb2 as pb
from impl.bookie import bookie_pb2_grpc as pb_grpc
from impl.bookie import http as bookie_http
from impl.bookie import wire
from impl.bookie.checkpoint import read_mark, write_mark
from impl.bookie.core import (
    DEFAULT_MAX_ENTRY_SIZE,
    AppendJournal,
    BookieCore,
    EntryNotStored,
    ForgetLedger,
    JournalDurable,
    JournalRecord,
    LedgerState,
    Output,
    ReadEntry,
    Replay,
    Reply,
    RequestReceived,
    RestoreDeleted,
    RestoreLedger,
    SetReadOnly,
    StoreEntry,
)
from impl.bookie.entry_log import StorageError
from impl.bookie.garbage_collector import GarbageCollector
from impl.bookie.journal import (
    Journal,
    JournalPosition,
    ReplayReport,
    UnsyncedJournal,
    delete_files_before,
    replay,
)
from impl.bookie.ledger_index import LedgerMeta
from impl.bookie.ledger_storage import LedgerStorage
from impl.bookie.listener import BookieListener
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
from impl.bookie.replies import MAX_REPLY_BATCH_BYTES, ReplyStream, StreamReply
from impl.latency import LatencyBuckets
from impl.metadata.store import MetadataError, MetadataStore
from impl.trace import Tracer

log = logging.getLogger(__name__)

Deliver = Callable[[Response], None]

MAX_REPLY_BATCH = 512  # replies per stream message
# The entry logs are fsynced whenever they took this much since the last fsync, not only at checkpoints:
# with the journal on the same disk, a checkpoint that syncs seconds of adds at once holds the journal's
# fdatasync (and so every add) for tens to hundreds of milliseconds (bench/history/bookie.md).
ENTRY_LOG_SYNC_BYTES = 4 * 1024 * 1024
MAINTENANCE_TICK_S = 0.05  # how often the maintenance thread looks at the entry logs' unsynced bytes

# Test-only fault point: SIGKILL the process after ledger storage is flushed, before the mark.
CRASH_AFTER_STORAGE_FLUSH = "checkpoint-after-flush"
# Test-only fault point, "power-loss-before-entry:LEDGER:ENTRY": a power loss when the journal is about to
# write that entry: its file cut back to its last sync, the process SIGKILLed (impl/bookie/journal.py).
POWER_LOSS_BEFORE_ENTRY = "power-loss-before-entry"


def power_loss_point(crash_at: str | None) -> tuple[int, int] | None:
    """(ledger, entry) of a `POWER_LOSS_BEFORE_ENTRY` fault point; None for any other (or none)."""
    name, _, where = (crash_at or "").partition(":")
    if name != POWER_LOSS_BEFORE_ENTRY:
        return None
    ledger_id, _, entry_id = where.partition(":")
    return int(ledger_id), int(entry_id)


def error_response(request: Request, code: ErrorCode) -> Response:
    if isinstance(request, AddRequest):
        return AddResponse(request.ledger_id, request.entry_id, code)
    if isinstance(request, ReadRequest):
        return ReadResponse(request.ledger_id, request.entry_id, code)
    if isinstance(request, ReadLacRequest):
        return ReadLacResponse(request.ledger_id, code)
    return WriteLacResponse(request.ledger_id, code)


@dataclass(frozen=True)
class GcRound:
    ledgers_deleted: list[int]
    entry_logs_deleted: list[int]


class Bookie:
    """Core + journal + ledger storage; `submit(request, deliver)` calls `deliver(response)` exactly once.

    `tracer`: the core's recorder (impl/trace.py), which sees its journal replay and every add and read.
    `max_entry_size`: BookKeeper's nettyMaxFrameSizeBytes, the largest entry body an add may carry (a
    bigger one is refused with EBADREQ); at most wire.MAX_FRAME_SIZE_LIMIT."""

    def __init__(
        self,
        data_dir: Path,
        journal_dir: Path | None = None,
        max_inflight: int = 10_000,
        min_free_bytes: int = 0,
        on_readonly: Callable[[bool], None] | None = None,
        *,
        metadata: MetadataStore | Callable[[], MetadataStore] | None = None,
        checkpoint_interval: float = 10.0,
        entry_log_sync_bytes: int = ENTRY_LOG_SYNC_BYTES,
        gc_interval: float = 60.0,
        entry_log_size: int = 64 * 1024 * 1024,
        journal_roll_size: int = 256 * 1024 * 1024,
        read_cache_bytes: int = 16 * 1024 * 1024,
        crash_at: str | None = None,
        tracer: Tracer | None = None,
        journal_sync_data: bool = True,
        max_entry_size: int = DEFAULT_MAX_ENTRY_SIZE,
    ) -> None:
        if not 0 < max_entry_size <= wire.MAX_FRAME_SIZE_LIMIT:
            raise ValueError(
                f"the bookie's frame limit must be 1..{wire.MAX_FRAME_SIZE_LIMIT} bytes, not {max_entry_size}"
            )
        self.data_dir = Path(data_dir)
        self.journal_dir = Path(journal_dir) if journal_dir else self.data_dir / "journal"
        self.storage_dir = self.data_dir / "ledgers"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.storage = LedgerStorage(self.storage_dir, entry_log_size, read_cache_bytes)
        self.core = BookieCore(tracer=tracer, max_entry_size=max_entry_size)  # traced from the journal replay on
        for ledger_id, indexed in self.storage.ledgers().items():
            meta = indexed.meta
            state = LedgerState(meta.master_key, meta.fenced, set(indexed.locations))
            state.piggybacked_lac, state.explicit_lac = meta.piggybacked_lac, meta.explicit_lac
            self.core.step(RestoreLedger(ledger_id, state))
        self.core.step(RestoreDeleted(frozenset(self.storage.deleted_ledgers())))
        self.replay_report = ReplayReport()
        try:
            self.checkpoint_mark = read_mark(self.storage_dir)
            for record in replay(self.journal_dir, self.replay_report, self.checkpoint_mark):
                for out in self.core.step(Replay(record)):
                    if isinstance(out, StoreEntry):
                        self.storage.put(out.ledger_id, out.entry_id, out.body)
        except BaseException:
            self.storage.close()
            raise
        # journal_sync_data=False: BookKeeper's journalSyncData = false, adds acknowledged before their fsync
        # (never pulsar-ref's configuration; tests/bookie/test_journal_sync.py shows what it loses)
        journal_type = Journal if journal_sync_data else UnsyncedJournal
        self.journal = journal_type(
            self.journal_dir, roll_size=journal_roll_size, power_loss_before=power_loss_point(crash_at)
        )
        self.max_inflight = max_inflight
        self.min_free_bytes = min_free_bytes
        self.on_readonly = on_readonly
        self.checkpoint_interval = checkpoint_interval
        self.entry_log_sync_bytes = entry_log_sync_bytes
        self.gc_interval = gc_interval
        self.garbage_collector = GarbageCollector(metadata) if metadata is not None else None
        self.crash_at = crash_at
        self.checkpoints = 0
        self._lock = threading.Lock()
        self._maintenance_lock = threading.Lock()  # one checkpoint or GC round at a time
        self.maintenance_rounds = 0  # rounds of the maintenance thread so far (tests wait on it, not on time)
        self._deliveries: dict[int, Deliver] = {}
        # request id -> (when it arrived, the latency it counts towards): add and read latency for /metrics
        self._started: dict[int, tuple[float, LatencyBuckets | None]] = {}
        self.add_latency = LatencyBuckets()
        self.read_latency = LatencyBuckets()
        self._next_id = 0
        self._stop = threading.Event()
        self._disk_thread = threading.Thread(target=self._watch_disk, name="disk-watch", daemon=True)
        self._maintenance_thread = threading.Thread(target=self._maintain, name="bookie-sync", daemon=True)
        self.check_disk()
        self._disk_thread.start()
        self._maintenance_thread.start()

    # --- requests ---------------------------------------------------------------------------
    def submit(self, request: Request, deliver: Deliver) -> None:
        self.submit_many([(request, deliver)])

    def submit_many(self, requests: Sequence[tuple[Request, Deliver]]) -> None:
        """Handle requests in order under one lock; their journal records go out as one append
        (one queue hand-off and one durability callback for a whole stream message)."""
        overloaded: list[tuple[Request, Deliver]] = []
        sends: list[tuple[Deliver, Reply | ReadEntry]] = []
        records: list[JournalRecord] = []
        tokens: list[int] = []
        now = time.monotonic()
        with self._lock:
            for request, deliver in requests:
                if len(self._deliveries) >= self.max_inflight:
                    overloaded.append((request, deliver))
                    continue
                rid = self._next_id
                self._next_id += 1
                self._deliveries[rid] = deliver
                kind = type(request)
                self._started[rid] = (
                    now,
                    self.add_latency if kind is AddRequest else self.read_latency if kind is ReadRequest else None,
                )
                try:
                    outputs = self.core.step(RequestReceived(request, rid))
                except Exception:  # a request the core cannot digest is malformed, never a crash
                    outputs = [Reply(rid, error_response(request, ErrorCode.EBADREQ))]
                sends += self._perform(outputs, records, tokens)
            if tokens:
                self.journal.append(records, self._durable_callback(tokens))
        for request, deliver in overloaded:
            deliver(error_response(request, ErrorCode.ETOOMANYREQUESTS))
        self._send(sends)

    def _perform(
        self, outputs: list[Output], records: list[JournalRecord], tokens: list[int]
    ) -> list[tuple[Deliver, Reply | ReadEntry]]:
        """Under the core lock, in the core's order: storage puts now, journal records into
        `records`/`tokens` (appended by the caller, still under the lock); returns what to send."""
        sends: list[tuple[Deliver, Reply | ReadEntry]] = []
        for out in outputs:
            if isinstance(out, StoreEntry):
                try:
                    self.storage.put(out.ledger_id, out.entry_id, out.body)
                except (OSError, StorageError) as exc:
                    # Refuse the add before it is journalled (its append is the next output) and stop
                    # taking adds: an acknowledged entry that storage never got would be lost at the
                    # next checkpoint. Replay at restart puts what was journalled before back.
                    log.error("ledger storage cannot store %d:%d (%s); read-only", out.ledger_id, out.entry_id, exc)
                    token = next(o.token for o in outputs if isinstance(o, AppendJournal))
                    for failed in self.core.step(EntryNotStored(token)):
                        assert isinstance(failed, Reply)
                        sends.append((self._delivery(failed.request_id), failed))
                    return sends
            elif isinstance(out, AppendJournal):
                records.extend(out.records)
                tokens.append(out.token)
            else:
                sends.append((self._delivery(out.request_id), out))
        return sends

    def _delivery(self, request_id: int) -> Deliver:
        """The request's reply goes out now (caller holds the lock): count its latency."""
        started, latency = self._started.pop(request_id)
        if latency is not None:
            latency.record((time.monotonic() - started) * 1000)
        return self._deliveries.pop(request_id)

    def _send(self, sends: list[tuple[Deliver, Reply | ReadEntry]]) -> None:
        """Outside the core lock: read entries from storage and deliver the replies; those of one
        stream together (`StreamReply`), so that they can leave in one stream message."""
        streams: dict[ReplyStream, list[tuple[int, Response]]] = {}
        for deliver, out in sends:
            if isinstance(out, ReadEntry):
                try:
                    body: bytes | None = self.storage.read(out.ledger_id, out.entry_id)
                except (OSError, StorageError) as exc:
                    log.error("cannot read entry %d:%d: %s", out.ledger_id, out.entry_id, exc)
                    body = None
                out = out.reply(body)
            if type(deliver) is StreamReply:
                streams.setdefault(deliver.stream, []).append((deliver.tag, out.response))
            else:
                deliver(out.response)
        for stream, replies in streams.items():
            stream.deliver_many(replies)

    def _durable_callback(self, tokens: list[int]) -> Callable[[], None]:
        return lambda: self._durable(tokens)

    def _durable(self, tokens: list[int]) -> None:
        sends: list[tuple[Deliver, Reply | ReadEntry]] = []
        delivery = self._delivery
        with self._lock:
            for token in tokens:
                # What durability releases is the replies the core held (Reply or ReadEntry), nothing to perform.
                released = cast("list[Reply | ReadEntry]", self.core.step(JournalDurable(token)))
                sends += [(delivery(out.request_id), out) for out in released]
        self._send(sends)

    # --- checkpoints and garbage collection ---------------------------------------------------
    def checkpoint(self) -> JournalPosition:
        """Make ledger storage hold everything before the journal's durable position, mark it,
        delete the journal files wholly before it. Returns the mark."""
        with self._maintenance_lock:
            return self._checkpoint()

    def _checkpoint(self) -> JournalPosition:
        position = self.journal.durable_position
        with self._lock:
            ledgers = {
                lid: LedgerMeta(lg.master_key, lg.fenced, lg.piggybacked_lac, lg.explicit_lac)
                for lid, lg in self.core.ledgers.items()
            }
        self.storage.checkpoint(ledgers)
        if self.crash_at == CRASH_AFTER_STORAGE_FLUSH:
            os.kill(os.getpid(), signal.SIGKILL)
        if position != self.checkpoint_mark:
            write_mark(self.storage_dir, position)
            self.checkpoint_mark = position
        for path in delete_files_before(self.journal_dir, position):
            log.info("checkpoint %s: deleted journal file %s", position, path.name)
        self.checkpoints += 1
        return position

    def collect_garbage(self) -> GcRound:
        """Drop ledgers whose metadata is certainly gone, checkpoint, delete entry logs left empty."""
        if self.garbage_collector is None:
            raise RuntimeError("this bookie has no metadata store to compare its ledgers with; pass metadata=")
        with self._maintenance_lock:
            with self._lock:
                on_bookie = list(self.core.ledgers)  # before the metadata listing (see garbage_collector.py)
            deleted = self.garbage_collector.deleted_ledgers(on_bookie)
            for ledger_id in deleted:
                with self._lock:  # atomically for adds: from here on a late add is refused (BookieCore.deleted)
                    self.core.step(ForgetLedger(ledger_id))
                    entries = self.storage.delete_ledger(ledger_id)
                log.info(
                    "garbage collection: ledger %d has no metadata any more; dropped %d entries", ledger_id, entries
                )
            self._checkpoint()  # the index no longer points into dead entry logs, durably
            logs = self.storage.collect_entry_logs()
            if logs:
                log.info("garbage collection: deleted entry logs %s", logs)
            return GcRound(deleted, logs)

    def _maintain(self) -> None:
        """Every `checkpoint_interval` a checkpoint (or a garbage collection round, which checkpoints); in
        between, an fsync of the entry logs whenever they took `entry_log_sync_bytes`."""
        now = time.monotonic()
        next_checkpoint, next_gc = now + self.checkpoint_interval, now + self.gc_interval
        tick = (
            min(self.checkpoint_interval, MAINTENANCE_TICK_S) if self.entry_log_sync_bytes else self.checkpoint_interval
        )
        while not self._stop.wait(tick):
            self.maintenance_rounds += 1
            try:
                now = time.monotonic()
                if now >= next_checkpoint:
                    next_checkpoint = now + self.checkpoint_interval
                    if self.garbage_collector is not None and self.gc_interval > 0 and now >= next_gc:
                        next_gc = now + self.gc_interval
                        self.collect_garbage()
                    else:
                        self.checkpoint()
                elif self.entry_log_sync_bytes and self.storage.unsynced_bytes >= self.entry_log_sync_bytes:
                    with self._maintenance_lock:
                        self.storage.sync_entry_logs()
            except (OSError, StorageError, MetadataError) as exc:
                # Nothing is lost: the mark did not move, the journal stays; the next round retries.
                log.error("bookie maintenance round failed, will retry: %s", exc)

    # --- disk space and shutdown ----------------------------------------------------------------
    def check_disk(self) -> None:
        readonly = shutil.disk_usage(self.data_dir).free < self.min_free_bytes
        if readonly != self.core.readonly:
            with self._lock:
                self.core.step(SetReadOnly(readonly))
            if self.on_readonly:
                self.on_readonly(readonly)

    def _watch_disk(self) -> None:
        while not self._stop.wait(1.0):
            self.check_disk()

    def close(self) -> None:
        """Graceful: drain the journal, checkpoint (the next start replays nothing), close files."""
        self._stop.set()
        self._maintenance_thread.join()
        self.journal.close()
        try:
            self.checkpoint()
        finally:
            self.storage.close()


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
        """One request per stream message (older clients); see `Batches`."""
        for batch in self._stream(((msg,) for msg in request_iterator), max_batch=1):
            yield pb.StreamRespBatch.FromString(batch[0]).responses[0]

    def Batches(self, request_iterator: Iterator[pb.StreamReqBatch], context: Any) -> Iterator[bytes]:
        """The pipelined channel: requests come in batches; replies ready together leave together, as a
        serialized StreamRespBatch (registered without a response serializer: see `add_to_server`)."""
        for batch in self._stream((msg.requests for msg in request_iterator), max_batch=MAX_REPLY_BATCH):
            yield b"".join(batch)

    def _stream(self, batches: Iterator[Sequence[pb.StreamReq]], max_batch: int) -> Iterator[list[bytes]]:
        """Submit every request as it arrives (a reader thread); yield replies as they complete, up to
        `max_batch` at a time, until the client has closed its side and every reply went out."""
        stream = StreamReplies()

        def read_requests() -> None:
            try:
                for batch in batches:
                    requests: list[tuple[Request, Deliver]] = []
                    for msg in batch:
                        request = wire.request_from_pb(msg)
                        if request is None:
                            stream.out.put([wire.response_frame(msg.tag, ErrorCode.EBADREQ)])
                        else:
                            requests.append((request, StreamReply(stream, msg.tag)))
                    stream.expect(len(requests))
                    self.bookie.submit_many(requests)
            except Exception:  # client went away
                pass
            stream.requests_ended()

        threading.Thread(target=read_requests, name="channel-reader", daemon=True).start()
        yield from stream.batches(max_batch)


def add_to_server(servicer: _Servicer, server: grpc.Server) -> None:
    """The generated `add_BookieServicer_to_server`, except that `Batches` yields its replies serialized
    already (frames joined), so gRPC sends them as they are."""
    service = "pulsar_ref.bookie.Bookie"
    handlers = {
        "Add": grpc.unary_unary_rpc_method_handler(servicer.Add, pb.AddReq.FromString, pb.AddResp.SerializeToString),
        "Read": grpc.unary_unary_rpc_method_handler(
            servicer.Read, pb.ReadReq.FromString, pb.ReadResp.SerializeToString
        ),
        "ReadLac": grpc.unary_unary_rpc_method_handler(
            servicer.ReadLac, pb.ReadLacReq.FromString, pb.ReadLacResp.SerializeToString
        ),
        "WriteLac": grpc.unary_unary_rpc_method_handler(
            servicer.WriteLac, pb.WriteLacReq.FromString, pb.WriteLacResp.SerializeToString
        ),
        "Channel": grpc.stream_stream_rpc_method_handler(
            servicer.Channel, pb.StreamReq.FromString, pb.StreamResp.SerializeToString
        ),
        "Batches": grpc.stream_stream_rpc_method_handler(servicer.Batches, pb.StreamReqBatch.FromString, None),
    }
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(service, handlers),))
    server.add_registered_method_handlers(service, handlers)


class StreamReplies:
    """The replies of one stream, queued for its sending thread in lists of frames (`wire.response_frame`):
    those ready together stay together, so they leave in one stream message (grpcio costs far more per
    message than per byte)."""

    def __init__(self) -> None:
        self.out: queue.SimpleQueue[list[bytes] | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._pending = 0  # requests submitted, not yet answered
        self._ended = False  # the client closed its side

    def expect(self, requests: int) -> None:
        with self._lock:
            self._pending += requests

    def deliver_many(self, replies: Sequence[tuple[int, Response]]) -> None:
        self.out.put([wire.response_frame(tag, response) for tag, response in replies])
        with self._lock:
            self._pending -= len(replies)
            if self._ended and self._pending == 0:
                self.out.put(None)

    def requests_ended(self) -> None:
        with self._lock:
            self._ended = True
            if self._pending == 0:
                self.out.put(None)

    def batches(self, max_batch: int) -> Iterator[list[bytes]]:
        """Reply frames in messages of up to `max_batch` (and about MAX_REPLY_BATCH_BYTES), until every
        reply went out after the client's end."""
        return wire.batches_from(self.out, max_batch, MAX_REPLY_BATCH_BYTES, len)


class BookieServer:
    """A Bookie served on host:port (port 0 = any free port; see `.port`): framed connections and gRPC
    (impl/bookie/listener.py; the gRPC server itself listens on a loopback port of its own), and, given an
    `http_port`, its HTTP service (/metrics, bookie info and state: impl/bookie/http.py)."""

    def __init__(
        self, bookie: Bookie, host: str = "127.0.0.1", port: int = 0, workers: int = 32, http_port: int | None = None
    ) -> None:
        self.bookie = bookie
        self.server = grpc.server(
            futures.ThreadPoolExecutor(max_workers=workers),
            options=wire.CHANNEL_OPTIONS,
        )
        add_to_server(_Servicer(bookie), self.server)
        grpc_port = self.server.add_insecure_port("127.0.0.1:0")
        try:
            self.listener = BookieListener(bookie.submit_many, grpc_port, host, port)
        except OSError as exc:
            raise OSError(f"cannot listen on {host}:{port} ({exc}); pick a free port or use 0") from exc
        self.port = self.listener.port
        self.host = host
        self.http = None if http_port is None else bookie_http.http_server(bookie, host, http_port)

    @property
    def http_url(self) -> str | None:
        return self.http.url if self.http is not None else None

    def start(self) -> None:
        self.server.start()
        self.listener.start()
        if self.http is not None:
            self.http.start()
        heap.settle_after_startup()

    def stop(self, grace_s: float = 1.0) -> None:
        """Stop serving and close the bookie; `grace_s` = 0 is a crash's stop: requests in flight are lost."""
        if self.http is not None:
            self.http.stop()
        self.listener.close()
        self.server.stop(grace=grace_s).wait()
        self.bookie.close()
