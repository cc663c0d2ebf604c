"""BookKeeper client benchmark over three real bookie processes (E3 Qw3 Qa2, 1 KiB entries).

Usage: .venv/bin/python bench/bench_client.py [--seconds S] [--outstanding 1 16 64 256]
                                               [--recovery-entries 10000 [100000]] [--read-ahead 1 16]

(a) Adds: one writer keeps N adds outstanding for S seconds; adds/s and p50/p99 add latency.
(b) Recovery time (a recovering open, timed) of a ledger left OPEN by its writer:
    - "tail": written by the client with 64 adds outstanding, so the bookies know a LAC
      close to the end and recovery reads only the unconfirmed tail;
    - "all unconfirmed": every entry was sent with LAC -1 (as by a writer that crashed
      before any add completed), so recovery must fence-read and write back every entry;
      this is the worst case, at BookKeeper's default of 1 read in flight and with more.
Prints markdown tables. Bookies, metadata (embedded store) and data live in a temp dir.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from impl.bookie.channel import BookieChannel  # noqa: E402
from impl.bookie.client.api import BookKeeperClient  # noqa: E402
from impl.bookie.client.connect import connect_bookkeeper  # noqa: E402
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


# ---- (a) adds ------------------------------------------------------------------------------------------------


def adds(client: BookKeeperClient, outstanding: int, seconds: float) -> str:
    handle = client.create_ledger(3, 3, 2, password=PASSWORD)
    window = threading.Semaphore(outstanding)
    latencies: list[float] = []
    errors: list[BaseException] = []
    start = time.monotonic()
    while time.monotonic() - start < seconds and not errors:
        window.acquire()
        sent = time.monotonic()

        def done(future: Future[int], sent: float = sent) -> None:
            error = future.exception()
            if error is not None:
                errors.append(error)
            else:
                latencies.append(time.monotonic() - sent)
            window.release()

        handle.add_async(ENTRY).add_done_callback(done)
    for _ in range(outstanding):
        window.acquire()  # drain: every add completed
    elapsed = time.monotonic() - start
    handle.close()
    if errors:
        raise RuntimeError(f"adds failed at {outstanding} outstanding: {errors[0]}") from errors[0]
    rate = len(latencies) / elapsed
    p50, p99 = pct(latencies, 0.5), pct(latencies, 0.99)
    return f"| {outstanding} | {len(latencies):,} | {rate:,.0f} | {rate * 1024 / 1e6:.2f} | {p50:.1f} | {p99:.1f} |"


# ---- (b) recovery ----------------------------------------------------------------------------------------------


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


def recovery(store: MetadataStore, ledger_id: int, read_ahead: int) -> tuple[float, int]:
    client = connect_bookkeeper(store, timeout_s=3600, request_timeout_s=30, recovery_read_ahead=read_ahead)
    try:
        start = time.monotonic()
        reader = client.open_ledger(ledger_id, PASSWORD, recovery=True)
        return time.monotonic() - start, reader.last_add_confirmed
    finally:
        client.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--seconds", type=float, default=3.0, help="seconds per outstanding level (default 3)")
    parser.add_argument("--outstanding", type=int, nargs="+", default=[1, 16, 64, 256])
    parser.add_argument("--recovery-entries", type=int, nargs="*", default=[10_000])
    parser.add_argument("--read-ahead", type=int, nargs="+", default=[1, 16], help="recovery reads in flight")
    parser.add_argument("--dir", help="working directory (default: a temp dir under the current directory)")
    args = parser.parse_args()

    directory = Path(tempfile.mkdtemp(prefix="bench-client-", dir=args.dir or Path.cwd()))
    url = f"embedded://{directory / 'metadata'}"
    procs = start_bookies(directory, url, 3)
    store = connect(url)
    try:
        client = connect_bookkeeper(store, timeout_s=120, request_timeout_s=30, seed=1)
        try:
            print("| outstanding adds | adds | adds/s | MB/s | p50 ms | p99 ms |")
            print("|---|---|---|---|---|---|")
            for outstanding in args.outstanding:
                print(adds(client, outstanding, args.seconds), flush=True)
            print()
            print("| ledger | entries | entries to recover | reads in flight | recovery s | entries/s |")
            print("|---|---|---|---|---|---|")
            for entries in args.recovery_entries:
                runs = [("tail", ledger_written_by_client, args.read_ahead[0])]
                runs += [("all unconfirmed", ledger_all_unconfirmed, n) for n in args.read_ahead]
                for kind, make, read_ahead in runs:
                    ledger_id = make(client, entries)
                    from_lac = client.open_ledger(ledger_id, PASSWORD, recovery=False).read_last_confirmed()
                    seconds, last = recovery(store, ledger_id, read_ahead)
                    if last != entries - 1:
                        raise RuntimeError(f"ledger {ledger_id} recovered up to {last}, expected {entries - 1}")
                    todo = entries - 1 - from_lac
                    print(
                        f"| {kind} | {entries:,} | {todo:,} | {read_ahead} | {seconds:.2f} | {todo / seconds:,.0f} |",
                        flush=True,
                    )
        finally:
            client.close()
    finally:
        store.close()
        for proc in procs:
            proc.kill()
            proc.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
