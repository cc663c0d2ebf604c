"""BookKeeper client benchmark over three real bookie processes (E3 Qw3 Qa2, 1 KiB entries).

Usage: .venv/bin/python bench/bench_client.py [--seconds S] [--outstanding 1 16 64 256] [--futures]
                                               [--rate 1000] [--recovery-entries 10000 [100000]]
                                               [--read-ahead 1 16]

(a) Adds: one writer keeps N adds outstanding for S seconds; adds/s and p50/p99 add latency.
    Adds go through `add_with_callback`, as the broker's managed ledger makes them (since
    2026-11-24; before, and with --futures, through `add_async`, a Future per add).
(b) Adds at a fixed rate (--rate R): one writer issues R adds a second for S seconds on a
    fixed schedule (open loop: a late add is not skipped), p50/p99 latency measured from each
    add's scheduled time, so a client falling behind shows in the latency; with the CPU time
    the client process and the three bookies (together) spent per add.
(c) Recovery time (a recovering open, timed) of a ledger left OPEN by its writer, each row on fresh bookies
    that have finished the background work of writing it (`settle`; since 2026-11-24, session 8):
    - "tail": written by the client with 64 adds outstanding, so the bookies know a LAC
      close to the end and recovery reads only the unconfirmed tail;
    - "all unconfirmed": every entry was sent with LAC -1 (as by a writer that crashed
      before any add completed), so recovery must fence-read and write back every entry;
      this is the worst case, at BookKeeper's default of 1 read in flight and with more.
    Each row also gives the CPU seconds the client process and the three bookies spent in it.
Prints markdown tables. Each table runs on three fresh bookies with their own metadata (embedded store)
in a temp dir, removed after the table, after `os.sync()` (since 2026-11-24: before, (b) and (c) ran on
the bookies of (a), still writing out its entry logs).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from results_log import append, calibration  # noqa: E402
from results_log import row as record_row  # noqa: E402

from impl import heap  # noqa: E402
from impl.bookie.channel import BookieChannel  # noqa: E402
from impl.bookie.client.api import BookKeeperClient  # noqa: E402
from impl.bookie.client.connect import connect_bookkeeper  # noqa: E402
from impl.bookie.client.errors import LedgerClientError  # noqa: E402
from impl.bookie.entry_format import encode_entry, master_key  # noqa: E402
from impl.bookie.protocol import AddRequest, AddResponse, ErrorCode, Response  # noqa: E402
from impl.metadata.ledger import DigestType  # noqa: E402
from impl.metadata.store import MetadataStore  # noqa: E402
from impl.metadata.url import connect  # noqa: E402

ENTRY = b"x" * 1024
PASSWORD = b"bench"


def start_bookies(directory: Path, url: str, count: int) -> list[subprocess.Popen[str]]:
    procs = []
    for i in range(count):
        command = [
            sys.executable,
            "-m",
            "pulsar_ref.cli",
            "bookie",
            "--metadata",
            url,
            "--data",
            str(directory / f"b{i}"),
        ]
        procs.append(subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT))
    for proc in procs:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if "listening" not in line:
            raise RuntimeError(f"a bookie did not start: {line!r}")
    return procs


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p * len(ordered)))] * 1000 if ordered else float("nan")


# ---- (a), (b) adds ------------------------------------------------------------------------------------------------


def adds(
    client: BookKeeperClient, outstanding: int, seconds: float, futures: bool = False, record: list | None = None
) -> str:
    """`add_with_callback`, the API the broker's managed ledger uses, or with `futures` `add_async`
    (a Future per add, whose bookkeeping runs in the client process too)."""
    handle = client.create_ledger(3, 3, 2, password=PASSWORD)
    window = threading.Semaphore(outstanding)
    latencies: list[float] = []
    errors: list[BaseException] = []
    start = time.monotonic()
    while time.monotonic() - start < seconds and not errors:
        window.acquire()
        sent = time.monotonic()

        def completed(outcome: int | BaseException, sent: float = sent) -> None:
            if isinstance(outcome, BaseException):  # a LedgerClientError, or with futures any exception
                errors.append(outcome)
            else:
                latencies.append(time.monotonic() - sent)
            window.release()

        if futures:

            def settled(future: Future[int], completed: Callable[[int | BaseException], None] = completed) -> None:
                completed(future.exception() or future.result())

            handle.add_async(ENTRY).add_done_callback(settled)
        else:
            handle.add_with_callback(ENTRY, completed)
    for _ in range(outstanding):
        window.acquire()  # drain: every add completed
    elapsed = time.monotonic() - start
    handle.close()
    if errors:
        raise RuntimeError(f"adds failed at {outstanding} outstanding: {errors[0]}") from errors[0]
    rate = len(latencies) / elapsed
    p50, p99 = pct(latencies, 0.5), pct(latencies, 0.99)
    if record is not None:
        record.append(record_row(f"adds/s, {outstanding:,} outstanding", rate, "adds/s"))
    return f"| {outstanding} | {len(latencies):,} | {rate:,.0f} | {rate * 1024 / 1e6:.2f} | {p50:.1f} | {p99:.1f} |"


def adds_at_rate(
    client: BookKeeperClient, rate: float, seconds: float, bookies: list[int], record: list | None = None
) -> str:
    handle = client.create_ledger(3, 3, 2, password=PASSWORD)
    cpu_before, bookies_before = own_cpu_seconds(), sum(cpu_seconds(pid) for pid in bookies)
    latencies: list[float] = []
    errors: list[LedgerClientError] = []
    done = threading.Semaphore(0)
    total = int(rate * seconds)
    start = time.monotonic()
    for i in range(total):
        scheduled = start + i / rate
        delay = scheduled - time.monotonic()
        if delay > 0:
            time.sleep(delay)

        def completed(outcome: int | LedgerClientError, scheduled: float = scheduled) -> None:
            if isinstance(outcome, LedgerClientError):
                errors.append(outcome)
            else:
                latencies.append(time.monotonic() - scheduled)
            done.release()

        handle.add_with_callback(ENTRY, completed)
    for _ in range(total):
        done.acquire()
    elapsed = time.monotonic() - start
    cpu = (own_cpu_seconds() - cpu_before) / total * 1e6
    bookies_cpu = (sum(cpu_seconds(pid) for pid in bookies) - bookies_before) / total * 1e6
    handle.close()
    if errors:
        raise RuntimeError(f"adds failed at {rate}/s: {errors[0]}") from errors[0]
    p50, p99, top = pct(latencies, 0.5), pct(latencies, 0.99), max(latencies) * 1000
    if record is not None:
        record.append(record_row(f"add p99 at a fixed {rate:,.0f} adds/s", p99, "ms"))
    return (
        f"| {rate:,.0f} | {total:,} | {total / elapsed:,.0f} | {p50:.1f} | {p99:.1f} | {top:.1f} "
        f"| {cpu:,.0f} | {bookies_cpu:,.0f} |"
    )


# ---- (c) recovery ----------------------------------------------------------------------------------------------


def ledger_written_by_client(client: BookKeeperClient, entries: int) -> int:
    handle = client.create_ledger(3, 3, 2, password=PASSWORD)
    window = threading.Semaphore(64)
    for _ in range(entries):
        window.acquire()
        handle.add_async(ENTRY).add_done_callback(lambda _f: window.release())
    for _ in range(64):
        window.acquire()
    return handle.ledger_id  # left OPEN: its writer "crashes" here


def ledger_all_unconfirmed(client: BookKeeperClient, entries: int) -> int:
    """Entries stored on all three bookies, each carrying LAC -1, in an OPEN ledger."""
    handle = client.create_ledger(3, 3, 2, password=PASSWORD)
    ledger_id, key = handle.ledger_id, master_key(PASSWORD)
    channels = [BookieChannel(b) for b in handle.metadata.last_ensemble]
    try:
        window = threading.Semaphore(256 * len(channels))
        failed: list[Response] = []

        def check(future: Future[Response | ErrorCode]) -> None:
            response = future.result()
            if not (isinstance(response, AddResponse) and response.code is ErrorCode.EOK):
                failed.append(response)  # type: ignore[arg-type]
            window.release()

        for entry_id in range(entries):
            body = encode_entry(
                ledger_id, entry_id, -1, (entry_id + 1) * len(ENTRY), ENTRY, DigestType.CRC32C, PASSWORD
            )
            for channel in channels:
                window.acquire()
                channel.submit(AddRequest(ledger_id, entry_id, key, body)).add_done_callback(check)
        for _ in range(256 * len(channels)):
            window.acquire()
        if failed:
            raise RuntimeError(f"{len(failed)} raw adds failed, e.g. {failed[0]}")
    finally:
        for channel in channels:
            channel.close()
    return ledger_id


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of a process so far (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def recovery(
    store: MetadataStore, ledger_id: int, read_ahead: int, bookies: list[int]
) -> tuple[float, int, float, float]:
    """Seconds, recovered last entry, client CPU seconds, bookie CPU seconds (all three) of a recovering open."""
    client = connect_bookkeeper(store, timeout_s=3600, request_timeout_s=30, recovery_read_ahead=read_ahead)
    try:
        cpu_before, bookies_before = own_cpu_seconds(), sum(cpu_seconds(pid) for pid in bookies)
        start = time.monotonic()
        reader = client.open_ledger(ledger_id, PASSWORD, recovery=True)
        seconds = time.monotonic() - start
        cpu = own_cpu_seconds() - cpu_before
        bookies_cpu = sum(cpu_seconds(pid) for pid in bookies) - bookies_before
        return seconds, reader.last_add_confirmed, cpu, bookies_cpu
    finally:
        client.close()


def settle(bookies: list[int], timeout_s: float = 30.0) -> None:
    """Let the bookies finish what writing the ledger left them (entry logs to write out, a checkpoint of
    its index) before recovery is timed: written dirty pages out, then until their CPU is idle for a
    second (under 5% of a core together), at most `timeout_s`."""
    os.sync()
    deadline = time.monotonic() + timeout_s
    before = sum(cpu_seconds(pid) for pid in bookies)
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = sum(cpu_seconds(pid) for pid in bookies)
        if now - before < 0.05:
            return
        before = now


def table_header(*columns: str) -> None:
    """A markdown table's header row and separator."""
    print("| " + " | ".join(columns) + " |")
    print("|" + "---|" * len(columns))


@contextlib.contextmanager
def cluster(parent: Path) -> Iterator[tuple[MetadataStore, BookKeeperClient, list[int]]]:
    """Three fresh bookie processes on a fresh embedded metadata store, and a client; all removed at
    the end. Each table gets its own: the bookies of a saturated table spend seconds afterwards
    writing out its entry logs and checkpoints, which is not the next table's steady state. For the
    same reason the dirty pages of earlier work are written out first (os.sync)."""
    os.sync()
    directory = Path(tempfile.mkdtemp(prefix="bench-client-", dir=parent))
    url = f"embedded://{directory / 'metadata'}"
    procs = start_bookies(directory, url, 3)
    try:
        store = connect(url)
        try:
            client = connect_bookkeeper(store, timeout_s=120, request_timeout_s=30, seed=1)
            try:
                yield store, client, [p.pid for p in procs]
            finally:
                client.close()
        finally:
            store.close()
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()
        shutil.rmtree(directory, ignore_errors=True)  # bookie data: hundreds of MB after the recovery runs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per outstanding level (default 3)")
    parser.add_argument("--outstanding", type=int, nargs="*", default=[1, 16, 64, 256])
    parser.add_argument(
        "--futures", action="store_true", help="table a through add_async (a Future per add) instead of callbacks"
    )
    parser.add_argument("--rate", type=float, nargs="*", default=[], help="fixed add rates per second (table b)")
    parser.add_argument("--recovery-entries", type=int, nargs="*", default=[10_000])
    parser.add_argument("--read-ahead", type=int, nargs="+", default=[1, 16], help="entries recovery reads at once")
    parser.add_argument(
        "--dir", help="where the run's temp dir goes (default: the current directory); removed at the end"
    )
    args = parser.parse_args()
    # This process stands in for the broker, which hosts the client in production and sets up the cycle
    # collector as any server process here does (impl/heap.py): without that, every full collection would
    # walk the benchmark's own startup heap again (~15 ms each, 0.6 s of a 100,000-entry recovery).
    heap.settle_after_startup()

    parent = Path(args.dir) if args.dir else Path.cwd()
    records: list[dict[str, object]] = []  # bench/results/client.jsonl, for bench/dashboard.py
    if args.outstanding:
        with cluster(parent) as (_, client, _):
            table_header("outstanding adds", "adds", "adds/s", "MB/s", "p50 ms", "p99 ms")
            for outstanding in args.outstanding:
                print(adds(client, outstanding, args.seconds, args.futures, records), flush=True)
            print()
    if args.rate:
        with cluster(parent) as (_, client, bookies):
            table_header(
                "fixed rate adds/s", "adds", "achieved adds/s", "p50 ms", "p99 ms", "max ms",
                "client CPU us/add", "bookies CPU us/add",
            )  # fmt: skip
            for rate in args.rate:
                print(adds_at_rate(client, rate, args.seconds, bookies, records), flush=True)
            print()
    if args.recovery_entries:
        table_header(
            "ledger", "entries", "entries to recover", "reads in flight", "recovery s", "entries/s",
            "client CPU s", "bookies CPU s",
        )  # fmt: skip
        for entries in args.recovery_entries:
            runs = [("tail", ledger_written_by_client, args.read_ahead[0])]
            runs += [("all unconfirmed", ledger_all_unconfirmed, n) for n in args.read_ahead]
            for kind, make, read_ahead in runs:
                with cluster(parent) as (store, client, bookies):
                    ledger_id = make(client, entries)
                    from_lac = client.open_ledger(ledger_id, PASSWORD, recovery=False).read_last_confirmed()
                    settle(bookies)
                    seconds, last, cpu, bookies_cpu = recovery(store, ledger_id, read_ahead, bookies)
                if last != entries - 1:
                    raise RuntimeError(f"ledger {ledger_id} recovered up to {last}, expected {entries - 1}")
                todo = entries - 1 - from_lac
                print(
                    f"| {kind} | {entries:,} | {todo:,} | {read_ahead} | {seconds:.2f} | {todo / seconds:,.0f} "
                    f"| {cpu:.1f} | {bookies_cpu:.1f} |",
                    flush=True,
                )
                if kind == "all unconfirmed":
                    name = f"recovery of {entries:,} unconfirmed entries, {read_ahead:,} read ahead"
                    records.append(record_row(name, seconds, "s"))
    line = calibration()
    print(f"\n{line}")
    append("client", records, calibration=line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
