"""Bookie benchmark: (a) raw write+fdatasync, (b) the journal alone, (c) a bookie process over gRPC.

Usage: .venv/bin/python bench/bench_bookie.py [--dir DIR] [--seconds S] [--paced-seconds S]
All three run on the same disk (DIR, default a temp dir under the current directory). The raw loop
at batch 512 and the journal at saturation alternate (raw, journal, journal, raw) because the disk's
speed drifts; the last table row is the journal's share of the raw bandwidth. The paced row (2,000
adds/s) runs on a fresh bookie process, for --paced-seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from results_log import append, calibration  # noqa: E402
from results_log import row as record_row  # noqa: E402

from impl.bookie.channel import BookieChannel  # noqa: E402
from impl.bookie.core import JournalRecord, RecordKind  # noqa: E402
from impl.bookie.entry_format import encode_entry, master_key  # noqa: E402
from impl.bookie.journal import Journal, encode_record  # noqa: E402
from impl.bookie.protocol import AddRequest, ErrorCode, Response  # noqa: E402

ENTRY = 1024
KEY = master_key(b"bench")


def pct(values: list[float], p: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(p * len(values)))] * 1000 if values else float("nan")


class Row(NamedTuple):
    name: str
    rate: float  # entries/s
    lat: list[float]

    def __str__(self) -> str:
        rate, lat = self.rate, self.lat
        return f"| {self.name} | {rate:,.0f} | {rate * ENTRY / 1e6:.1f} | {pct(lat, 0.5):.2f} | {pct(lat, 0.99):.2f} |"


def row(name: str, n: int, seconds: float, lat: list[float]) -> Row:
    return Row(name, n / seconds, lat)


def combine(name: str, a: Row, b: Row) -> Row:
    """Two runs of the same length as one row."""
    return Row(name, (a.rate + b.rate) / 2, a.lat + b.lat)


def raw_loop(directory: Path, batch: int, seconds: float) -> Row:
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


def journal_alone(directory: Path, seconds: float, per_append: int) -> Row:
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


class GrpcRun(NamedTuple):
    row: Row
    errors: int

    def __str__(self) -> str:
        return f"{self.row} errors={self.errors}"


def bookie_grpc(address: str, concurrency: int, seconds: float, ledger: int, rate: float = 0.0) -> GrpcRun:
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

        def cb(f: Future[Response | ErrorCode], t: float = t) -> None:
            answer = f.result() if f.exception() is None else None
            if answer is not None and not isinstance(answer, ErrorCode) and answer.code is ErrorCode.EOK:
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
    return GrpcRun(row(name, len(lat), elapsed, lat), errors[0])


@contextlib.contextmanager
def disk_probe(directory: Path, every: float = 0.02) -> Iterator[list[float]]:
    """A 1 KiB overwrite + fdatasync in a preallocated file of its own every `every` seconds while the
    block runs: the disk's own latency at the same moments, to tell the disk's stalls from the
    bookie's. The file is written and synced first, so the probe changes no file size and forces no
    ext4 journal commit of its own, which would hold up the bookie's journal."""
    lat: list[float] = []
    stop = threading.Event()
    fd = os.open(directory / "probe.log", os.O_WRONLY | os.O_CREAT, 0o644)
    os.write(fd, bytes(1024 * 1024))
    os.fsync(fd)

    def run() -> None:
        offset = 0
        while not stop.wait(every):
            t = time.monotonic()
            os.pwrite(fd, b"p" * ENTRY, offset)
            os.fdatasync(fd)
            lat.append(time.monotonic() - t)
            offset = (offset + ENTRY) % (1024 * 1024)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield lat
    finally:
        stop.set()
        thread.join()
        os.close(fd)


@contextlib.contextmanager
def bookie_process(directory: Path) -> Iterator[str]:
    """A bookie process with its own data directory under `directory`; yields its address."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "pulsar_ref.cli", "bookie", "--metadata", f"embedded://{directory / 'meta'}"]
        + ["--data", str(directory / "data")],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )
    try:
        assert proc.stdout is not None
        yield proc.stdout.readline().split()[1]
    finally:
        proc.terminate()
        proc.wait(30)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", type=Path, default=Path.cwd())
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument(
        "--paced-seconds", type=float, default=10.0, help="length of the 2,000 adds/s run on its own fresh bookie"
    )
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(dir=args.dir, prefix="bench-bookie-") as tmp:
        directory = Path(tmp)
        print("| run | entries/s | MB/s | p50 ms | p99 ms |")
        print("|---|---|---|---|---|")
        for batch in (1, 16, 128):
            print(raw_loop(directory, batch, args.seconds), flush=True)
        # The disk's speed drifts within a minute and a burst of writes slows the next one down, so the
        # raw loop at batch 512 and the journal at saturation run in the order raw, journal, journal, raw
        # (half the time each), and each row is the mean of its two halves.
        half = args.seconds / 2
        first = raw_loop(directory, 512, half)
        journal_1, journal_2 = journal_alone(directory, half, 64), journal_alone(directory, half, 64)
        raw = combine("raw write+fdatasync, batch 512 (around the journal)", first, raw_loop(directory, 512, half))
        journal = combine("journal alone, 64-record appends (4096 in flight)", journal_1, journal_2)
        print(raw, flush=True)
        print(journal_alone(directory, args.seconds, 1), flush=True)
        print(journal, flush=True)
        print(f"| journal at saturation (64-record appends) / raw batch 512 | {journal.rate / raw.rate:.0%} | | | |")
        with bookie_process(directory / "saturation") as address:
            for ledger, concurrency in enumerate((1, 16, 128, 1024), start=1):
                saturated = bookie_grpc(address, concurrency, args.seconds, ledger)
                print(saturated, flush=True)
        # Steady state, not the aftermath of the 1,024 row: the saturating bookie's data is written back to
        # the disk before a fresh bookie starts.
        os.sync()
        with bookie_process(directory / "paced") as address, disk_probe(directory) as probe:
            paced = bookie_grpc(address, 1024, args.paced_seconds, 1, rate=2000)
            print(paced, flush=True)
        worst = max(probe) * 1000
        name = f"disk probe beside the paced row: 1 KiB overwrite+fdatasync every 20 ms (max {worst:.1f} ms)"
        print(row(name, len(probe), args.paced_seconds, probe), flush=True)
    line = calibration()
    print(f"\n{line}")
    records = [
        record_row(
            "journal at saturation, 64-record appends",
            journal.rate,
            "entries/s",
            "raw write+fdatasync, batch 512",
            raw.rate,
        ),
        record_row(saturated.row.name, saturated.row.rate, "adds/s"),
        record_row(f"{paced.row.name}: p99", pct(paced.row.lat, 0.99), "ms"),
        record_row(f"{paced.row.name}: disk probe max", worst, "ms"),
    ]
    append("bookie", records, calibration=line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
