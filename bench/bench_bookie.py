"""Bookie benchmark: (a) raw write+fdatasync, (b) the journal alone, (c) a bookie process over gRPC.

Usage: .venv/bin/python bench/bench_bookie.py [--dir DIR] [--seconds S]
All three run on the same disk (DIR, default a temp dir under the current directory).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from impl.bookie.channel import BookieChannel  # noqa: E402
from impl.bookie.core import JournalRecord, RecordKind  # noqa: E402
from impl.bookie.entry_format import encode_entry, master_key  # noqa: E402
from impl.bookie.journal import Journal, encode_record  # noqa: E402
from impl.bookie.protocol import AddRequest, ErrorCode  # noqa: E402

ENTRY = 1024
KEY = master_key(b"bench")


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(p * len(values)))] * 1000 if values else float("nan")


def row(name: str, n: int, seconds: float, lat: list[float]) -> str:
    rate = n / seconds
    return f"| {name} | {rate:,.0f} | {rate * ENTRY / 1e6:.1f} | {pct(lat, 0.5):.2f} | {pct(lat, 0.99):.2f} |"


def raw_loop(directory: Path, batch: int, seconds: float) -> str:
    record = encode_record(JournalRecord(RecordKind.ENTRY, 1, 0, KEY, b"x" * ENTRY))
    data = record * batch
    fd = os.open(directory / "raw.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    n, lat, start = 0, [], time.monotonic()
    while time.monotonic() - start < seconds:
        t = time.monotonic()
        os.write(fd, data)
        os.fdatasync(fd)
        lat.append(time.monotonic() - t)
        n += batch
    os.close(fd)
    os.unlink(directory / "raw.log")
    return row(f"raw write+fdatasync, batch {batch}", n, time.monotonic() - start, lat)


def journal_alone(directory: Path, seconds: float, per_append: int) -> str:
    """Appends of `per_append` records each (1: one client add; 64: what one Batches message
    hands the journal), 4096 records in flight."""
    journal = Journal(directory / f"journal-bench-{per_append}")
    body = b"x" * ENTRY
    lat: list[float] = []
    done = [0]
    window = threading.Semaphore(4096 // per_append)
    start = time.monotonic()
    n = 0
    while time.monotonic() - start < seconds:
        window.acquire()
        t = time.monotonic()

        def cb(t: float = t) -> None:
            lat.extend([time.monotonic() - t] * per_append)
            done[0] += per_append
            window.release()

        journal.append([JournalRecord(RecordKind.ENTRY, 1, n + i, KEY, body) for i in range(per_append)], cb)
        n += per_append
    journal.close()
    name = f"journal alone, {per_append}-record appends (4096 in flight, {journal.flushes} flushes)"
    return row(name, done[0], time.monotonic() - start, lat)


def bookie_grpc(address: str, concurrency: int, seconds: float, ledger: int, rate: float = 0.0) -> str:
    """Adds over one gRPC stream with at most `concurrency` in flight; `rate` > 0 paces the
    sends at that many adds per second (latency at a fixed load) instead of as fast as possible."""
    channel = BookieChannel(address)
    window = threading.Semaphore(concurrency)
    lat: list[float] = []
    errors = [0]
    start = time.monotonic()
    eid = 0
    while time.monotonic() - start < seconds:
        if rate > 0:
            wait = start + eid / rate - time.monotonic()
            if wait > 0:
                time.sleep(wait)
        window.acquire()
        t = time.monotonic()
        fut = channel.submit(AddRequest(ledger, eid, KEY, encode_entry(ledger, eid, eid - 1, eid, b"x" * (ENTRY - 40))))

        def cb(f, t: float = t) -> None:  # type: ignore[no-untyped-def]
            if f.exception() is None and f.result().code is ErrorCode.EOK:
                lat.append(time.monotonic() - t)
            else:
                errors[0] += 1
            window.release()

        fut.add_done_callback(cb)
        eid += 1
    for _ in range(concurrency):
        window.acquire()
    elapsed = time.monotonic() - start
    channel.close()
    name = f"bookie gRPC stream, {concurrency} in flight" + (f", paced at {rate:,.0f} adds/s" if rate else "")
    return row(name, len(lat), elapsed, lat) + f" errors={errors[0]}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path.cwd())
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    import subprocess

    with tempfile.TemporaryDirectory(dir=args.dir, prefix="bench-bookie-") as tmp:
        directory = Path(tmp)
        print("| run | entries/s | MB/s | p50 ms | p99 ms |")
        print("|---|---|---|---|---|")
        for batch in (1, 16, 128, 512):
            print(raw_loop(directory, batch, args.seconds), flush=True)
        for per_append in (1, 64):
            print(journal_alone(directory, args.seconds, per_append), flush=True)
        proc = subprocess.Popen(
            [sys.executable, "-m", "pulsar_ref.cli", "bookie", "--metadata", f"embedded://{directory / 'meta'}"]
            + ["--data", str(directory / "data")],
            stdout=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).resolve().parents[1],
        )
        try:
            assert proc.stdout is not None
            address = proc.stdout.readline().split()[1]
            for ledger, concurrency in enumerate((1, 16, 128, 1024), start=1):
                print(bookie_grpc(address, concurrency, args.seconds, ledger), flush=True)
            print(bookie_grpc(address, 1024, args.seconds, 5, rate=2000), flush=True)
        finally:
            proc.terminate()
            proc.wait(30)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
