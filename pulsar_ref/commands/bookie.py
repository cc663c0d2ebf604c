"""`pulsar-ref bookie`: run one bookie, or `pulsar-ref bookie inspect --data DIR`."""

from __future__ import annotations

import argparse
import contextlib
import signal
import sys
import threading
import tomllib
from pathlib import Path
from typing import TYPE_CHECKING, Any

from impl import shutdown

if TYPE_CHECKING:
    from impl.metadata.store import MetadataStore
    from impl.trace import Tracer

DEFAULTS: dict[str, Any] = {
    "port": 0,
    "http_port": 0,  # the bookie's HTTP service (/metrics, info, state); -1: none
    "journal_dir": None,
    "min_free_mb": 0,
    "max_inflight": 10_000,
    "checkpoint_interval": 10.0,  # seconds between checkpoints (restart replays the journal after the last)
    "entry_log_sync_mb": 4,  # fsync the entry logs whenever they took this many MiB (0: only at checkpoints)
    "gc_interval": 60.0,  # seconds between garbage collections of deleted ledgers (0: never)
    "entry_log_size": 64 * 1024 * 1024,  # bytes: entry logs roll at this size (the unit of space reclaimed)
    "journal_roll_size": 256 * 1024 * 1024,  # bytes: journal files roll at this size
    "read_cache_mb": 16,
    # BookKeeper's nettyMaxFrameSizeBytes: the largest entry an add may carry (impl/bookie/core.py's default)
    "netty_max_frame_size_bytes": 5 * 1024 * 1024 + 10 * 1024,
}


class _Session:
    """The bookie's current metadata session and its registry (replaced after an expiry)."""

    def __init__(self, store: MetadataStore) -> None:
        from impl.metadata.registry import BookieRegistry

        self.store = store
        self.registry = BookieRegistry(store)


def run(args: argparse.Namespace, tracer: Tracer | None = None) -> int:
    from impl.bookie.checkpoint import CorruptCheckpoint
    from impl.bookie.journal import JournalMissing
    from impl.bookie.server import Bookie, BookieServer
    from impl.metadata.registry import BookieAlreadyRegistered, BookieRegistry
    from impl.metadata.renewal import SessionRenewer
    from impl.metadata.store import MetadataError
    from impl.metadata.url import DEFAULT_SESSION_TIMEOUT_S, connect

    config = dict(DEFAULTS)
    if args.config:
        try:
            config.update(tomllib.loads(Path(args.config).read_text()))
        except (OSError, tomllib.TOMLDecodeError) as exc:
            print(f"error: cannot read config {args.config}: {exc}; give a TOML file", file=sys.stderr)
            return 2
    for key in DEFAULTS:
        if getattr(args, key, None) is not None:
            config[key] = getattr(args, key)
    for key, least in (("checkpoint_interval", 0.001), ("entry_log_sync_mb", 0), ("gc_interval", 0)):
        try:
            bad = float(config[key]) < least
        except (TypeError, ValueError):
            bad = True
        if bad:
            print(f"error: {key} must be a number >= {least}, not {config[key]!r}", file=sys.stderr)
            return 2
    from impl.bookie.wire import MAX_FRAME_SIZE_LIMIT

    frame = config["netty_max_frame_size_bytes"]
    if isinstance(frame, bool) or not isinstance(frame, int) or not 0 < frame <= MAX_FRAME_SIZE_LIMIT:
        print(
            f"error: netty_max_frame_size_bytes must be an integer in 1..{MAX_FRAME_SIZE_LIMIT} "
            f"(larger messages are sent as chunks), not {frame!r}",
            file=sys.stderr,
        )
        return 2
    session = _Session(connect(args.metadata))
    bookie_id: list[str] = []

    def on_readonly(readonly: bool) -> None:
        if bookie_id:
            session.registry.set_readonly(bookie_id[0], readonly)

    try:
        bookie = Bookie(
            Path(args.data),
            Path(config["journal_dir"]) if config["journal_dir"] else None,
            max_inflight=int(config["max_inflight"]),
            min_free_bytes=int(config["min_free_mb"]) * 1024 * 1024,
            on_readonly=on_readonly,
            metadata=(lambda: session.store) if float(config["gc_interval"]) > 0 else None,
            checkpoint_interval=float(config["checkpoint_interval"]),
            entry_log_sync_bytes=int(float(config["entry_log_sync_mb"]) * 1024 * 1024),
            gc_interval=float(config["gc_interval"]),
            entry_log_size=int(config["entry_log_size"]),
            journal_roll_size=int(config["journal_roll_size"]),
            read_cache_bytes=int(config["read_cache_mb"]) * 1024 * 1024,
            crash_at=args.crash_at,
            tracer=tracer,
            max_entry_size=frame,
        )
    except (CorruptCheckpoint, JournalMissing) as exc:
        session.store.close()
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for torn in bookie.replay_report.torn:
        print(f"journal: ignored torn tail of {torn.file} at offset {torn.offset}: {torn.reason}", file=sys.stderr)
    for damage in bookie.storage.report.index_damage:
        print(
            f"ledger index: ignored {damage.ignored_bytes} bytes of {damage.file} from offset {damage.offset} "
            f"({damage.reason}); kept a copy as {damage.file.name}.damaged",
            file=sys.stderr,
        )
    missing = bookie.storage.missing_entries()
    if missing:
        ledger_id, entry_id, log_id = missing[0]
        print(
            f"ledger storage: {len(missing)} indexed entries are in entry logs that are gone "
            f"(first {ledger_id}:{entry_id} in entry log {log_id}); reads of them answer EIO",
            file=sys.stderr,
        )
    http_port = int(config["http_port"])
    server = BookieServer(bookie, port=int(config["port"]), http_port=http_port if http_port >= 0 else None)
    server.start()
    bookie_id.append(f"127.0.0.1:{server.port}")
    # a restart right after a crash (same port) finds the dead run's node until its session expires;
    # every session here is opened with connect's default timeout
    wait_s = 2 * DEFAULT_SESSION_TIMEOUT_S
    try:
        session.registry.register_after_expiry(
            bookie_id[0],
            readonly=bookie.core.readonly,
            http_url=server.http_url,
            netty_max_frame_size_bytes=frame,  # published for the brokers' check of their largest entry
            wait_s=wait_s,
            on_wait=lambda: print(
                f"bookie {bookie_id[0]}: a previous session's registration is still there; "
                f"waiting up to {wait_s:g} s for it to expire",
                file=sys.stderr,
                flush=True,
            ),
        )
    except BookieAlreadyRegistered as exc:
        server.stop()
        session.store.close()
        print(f"error: {exc}", file=sys.stderr)
        return 1
    stop = threading.Event()

    def adopt(store: MetadataStore) -> None:
        """The session expired (its registration went with it): as a BookKeeper bookie does, register
        again on a new session, so clients can place ledgers here again (retried until it works)."""
        registry = BookieRegistry(store)
        registry.register(
            bookie_id[0], readonly=bookie.core.readonly, http_url=server.http_url, netty_max_frame_size_bytes=frame
        )
        old = session.store
        session.store, session.registry = store, registry
        with contextlib.suppress(MetadataError):
            old.close()
        print(f"bookie {bookie_id[0]} registered again on a new metadata session", flush=True)

    renewer = SessionRenewer(f"bookie {bookie_id[0]}", lambda: connect(args.metadata), adopt)
    renewer.watch(session.store)
    print(
        f"bookie {bookie_id[0]} listening (HTTP: {server.http_url or 'none'}); "
        f"replayed {bookie.replay_report.records} journal records "
        f"from checkpoint {bookie.checkpoint_mark}",
        flush=True,
    )
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    shutdown.halt_after(args.shutdown_timeout, f"bookie {bookie_id[0]}")
    renewer.stop()
    with contextlib.suppress(MetadataError):
        session.registry.unregister(bookie_id[0])
    server.stop()
    session.store.close()
    print("bookie stopped", flush=True)
    return 0


def inspect(args: argparse.Namespace) -> int:
    from impl.bookie.checkpoint import CorruptCheckpoint, read_mark
    from impl.bookie.core import BookieCore, LedgerState, Replay, RestoreLedger
    from impl.bookie.journal import JournalMissing, ReplayReport, replay
    from impl.bookie.ledger_storage import LedgerStorage

    data = Path(args.data)
    journal_dir = Path(args.journal_dir) if args.journal_dir else data / "journal"
    if not journal_dir.is_dir():
        print(f"error: no journal under {journal_dir}; pass the bookie's --data (and --journal-dir)", file=sys.stderr)
        return 2
    storage = LedgerStorage(data / "ledgers", readonly=True)  # creates, truncates and deletes nothing
    core = BookieCore()
    for ledger_id, indexed in storage.ledgers().items():
        meta = indexed.meta
        state = LedgerState(meta.master_key, meta.fenced, set(indexed.locations))
        state.piggybacked_lac, state.explicit_lac = meta.piggybacked_lac, meta.explicit_lac
        core.step(RestoreLedger(ledger_id, state))
    try:
        mark = read_mark(data / "ledgers")
        report = ReplayReport()
        for record in replay(journal_dir, report, mark):
            core.step(Replay(record))
    except (CorruptCheckpoint, JournalMissing) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"checkpoint: {f'journal file {mark.file_no} offset {mark.offset}' if mark else 'none yet'}")
    print(f"journal {journal_dir}: {len(report.files)} files after the checkpoint, {report.records} records")
    for torn in report.torn:
        print(f"  torn tail: {torn.file.name} offset {torn.offset} ({torn.reason}, {torn.ignored_bytes} bytes)")
    usage = storage.entry_log_usage()
    print(f"entry logs {data / 'ledgers'}: {len(usage)} files, {sum(size for _, size, _ in usage)} bytes")
    for log_id, size, live in usage:
        print(f"  entrylog-{log_id}.log: {size} bytes, {live} live entries")
    print(f"ledger index: {len(storage.index.files())} files")
    for damage in storage.report.index_damage:
        print(f"  damaged: {damage.file.name} offset {damage.offset} ({damage.reason}, {damage.ignored_bytes} bytes)")
    for ledger_id, entry_id, log_id in storage.missing_entries()[:10]:
        print(f"  missing: entry {ledger_id}:{entry_id} points into entry log {log_id}, which is gone")
    for ledger_id, ledger in sorted(core.ledgers.items()):
        ids = sorted(ledger.entries)
        span = f"{ids[0]}..{ids[-1]}" if ids else "-"
        print(f"ledger {ledger_id}: entries {len(ids)} [{span}] fenced={ledger.fenced} lac={ledger.lac}")
    return 0


def main(argv: list[str], prog: str) -> int:
    if argv[:1] == ["inspect"]:
        parser = argparse.ArgumentParser(prog=f"{prog} inspect", description="list a bookie's ledgers and journal")
        parser.add_argument("--data", required=True, help="the bookie's data directory")
        parser.add_argument("--journal-dir", help="journal directory (default DATA/journal)")
        return inspect(parser.parse_args(argv[1:]))
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Run one bookie (SIGTERM or Ctrl-C stops it gracefully). It prints "
        "'bookie ID listening ...' once it serves; ID (127.0.0.1:PORT) is its bookie id, as ledger "
        "ensembles and `pulsar-ref cluster status` show it. `pulsar-ref bookie inspect --data DIR` "
        "lists a stopped bookie's ledgers and journal.",
    )
    parser.add_argument(
        "--metadata", required=True, metavar="URL", help="metadata store URL (zk://127.0.0.1:2181/x or embedded:///dir)"
    )
    parser.add_argument(
        "--data", required=True, metavar="DIR", help="data directory (entry logs, indexes, checkpoints)"
    )
    parser.add_argument(
        "--port", type=int, help="port on 127.0.0.1; the bookie id is 127.0.0.1:PORT (default 0 = any free port)"
    )
    parser.add_argument(
        "--http-port",
        type=int,
        metavar="PORT",
        help="port of the HTTP service: /metrics, bookie info (default 0 = any free port; -1 = none)",
    )
    parser.add_argument("--journal-dir", metavar="DIR", help="journal directory (default DATA/journal)")
    parser.add_argument(
        "--min-free-mb", type=int, metavar="MIB", help="go read-only below this much free disk (default 0)"
    )
    parser.add_argument(
        "--max-inflight", type=int, metavar="N", help="requests in flight before ETOOMANYREQUESTS (default 10000)"
    )
    parser.add_argument(
        "--checkpoint-interval", type=float, metavar="SECONDS", help="seconds between checkpoints (default 10)"
    )
    parser.add_argument(
        "--entry-log-sync-mb",
        type=float,
        metavar="MIB",
        help="fsync the entry logs whenever they took this many MiB (default 4; 0 = only at checkpoints)",
    )
    parser.add_argument(
        "--gc-interval",
        type=float,
        metavar="SECONDS",
        help="seconds between garbage collections of deleted ledgers (default 60; 0 = never)",
    )
    parser.add_argument(
        "--entry-log-size", type=int, metavar="BYTES", help="entry logs roll at this size (default 64 MiB)"
    )
    parser.add_argument(
        "--journal-roll-size", type=int, metavar="BYTES", help="journal files roll at this size (default 256 MiB)"
    )
    parser.add_argument("--read-cache-mb", type=int, metavar="MIB", help="read cache size (default 16)")
    parser.add_argument(
        "--netty-max-frame-size-bytes",
        type=int,
        metavar="BYTES",
        help="BookKeeper's nettyMaxFrameSizeBytes: the largest entry an add may carry; bigger ones are refused "
        "(EBADREQ). Brokers' --max-message-size plus 10240 bytes of metadata must fit (default 5253120, "
        "5 MiB + 10 KiB, as Pulsar's bookkeeper.conf ships); published in the bookie's registration, where "
        "brokers check it",
    )
    parser.add_argument("--crash-at", help=argparse.SUPPRESS)  # tests: SIGKILL itself at this fault point
    parser.add_argument(
        "--config", metavar="FILE", help="TOML file with any of the options above, in snake_case (options given win)"
    )
    parser.add_argument(
        "--trace",
        metavar="FILE",
        help="append the bookie core's protocol events (impl/trace.py: each request handled, each journal "
        "record replayed) to FILE as JSON lines, for trace validation (conformance/process_traces.py); "
        "slower, off by default",
    )
    shutdown.add_argument(parser)
    args = parser.parse_args(argv)
    if not args.trace:
        return run(args)
    from impl.trace import TraceFile

    recorder = TraceFile(args.trace, role="bookie")
    try:
        return run(args, recorder)
    finally:
        recorder.close()
