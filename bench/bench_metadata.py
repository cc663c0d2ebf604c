"""Metadata store benchmark: conditional-write throughput and latency of each backend.

Each backend does the same loop from one client: `set(path, data, expected_version=v)` with
the version returned by the previous write (BookKeeper's ledger-metadata update pattern).
On the same ZooKeeper server, in the same run, raw kazoo `set` calls do the same loop, in
alternating blocks of 50 writes with ZooKeeperStore so that machine noise hits both alike;
the median ratio of paired block times is the overhead of our backend (target: within 1.2x).

    .venv/bin/python bench/bench_metadata.py [--ops 2000] [--rounds 5] [--zk zk://HOST:PORT]

Without --zk a standalone ZooKeeper is started (Debian's package) in a temporary directory.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kazoo.client import KazooClient  # noqa: E402
from results_log import append, calibration, row  # noqa: E402

from impl.metadata.store import MetadataStore  # noqa: E402
from impl.metadata.zkserver import ZooKeeperServer  # noqa: E402
from impl.metadata.zookeeper import ZooKeeperStore  # noqa: E402

PAYLOAD = b"x" * 256  # about a ledger metadata record with a few fragments
BLOCK_OPS = 50  # writes per block in the interleaved ZooKeeperStore / raw kazoo comparison


@dataclass
class Sample:
    name: str
    latencies_s: list[float] = field(default_factory=list)
    elapsed_s: float = 0.0

    @property
    def ops(self) -> int:
        return len(self.latencies_s)

    @property
    def throughput(self) -> float:
        return self.ops / self.elapsed_s if self.elapsed_s else 0.0

    def percentile_ms(self, q: float) -> float:
        ordered = sorted(self.latencies_s)
        return 1000 * ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def conditional_writes(sample: Sample, write: Callable[[], object], ops: int) -> None:
    """Call `write()` (one conditional write) `ops` times in a row, timing each."""
    start = time.perf_counter()
    for _ in range(ops):
        t0 = time.perf_counter()
        write()
        sample.latencies_s.append(time.perf_counter() - t0)
    sample.elapsed_s += time.perf_counter() - start


def store_writer(store: MetadataStore, path: str) -> Callable[[], object]:
    """Conditional writes through the contract, each expecting the version the previous one returned."""
    store.ensure_path(path)
    version = store.get(path)[1].version

    def write() -> object:
        nonlocal version
        version = store.set(path, PAYLOAD, expected_version=version).version
        return version

    return write


def kazoo_writer(client: KazooClient, path: str) -> Callable[[], object]:
    """The same loop with plain kazoo calls: the baseline for ZooKeeperStore's overhead."""
    client.ensure_path(path)
    version = client.get(path)[1].version

    def write() -> object:
        nonlocal version
        version = client.set(path, PAYLOAD, version=version).version
        return version

    return write


def other_backends() -> list[tuple[str, Callable[[str], MetadataStore]]]:
    """memory:// and embedded:// through impl.metadata.url.connect, if that module exists."""
    try:
        from impl.metadata.url import connect
    except ImportError:
        print("impl.metadata.url not available: benchmarking zk:// only", file=sys.stderr)
        return []
    return [("memory://", lambda d: connect("memory://bench")), ("embedded://", lambda d: connect(f"embedded://{d}"))]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=2000, help="conditional writes per backend per round")
    parser.add_argument(
        "--rounds", type=int, default=5, help="repeat the loop this many times (zk://: in interleaved blocks)"
    )
    parser.add_argument("--zk", help="zk://HOST:PORT of a running ZooKeeper (default: start one)")
    args = parser.parse_args(argv)

    workdir = Path(tempfile.mkdtemp(prefix="pulsar-ref-bench-metadata-"))
    server: ZooKeeperServer | None = None
    try:
        if args.zk:
            hosts = args.zk.removeprefix("zk://").split("/", 1)[0]
        else:
            print("starting a standalone ZooKeeper ...", file=sys.stderr, flush=True)
            server = ZooKeeperServer(workdir / "zk")
            server.start()
            hosts = server.connect_string
        samples: list[Sample] = []

        for name, open_store in other_backends():
            (workdir / "embedded").mkdir(exist_ok=True)
            sample = Sample(name)
            with open_store(str(workdir / "embedded")) as store:
                print(f"{name}: {args.ops * args.rounds} conditional writes ...", file=sys.stderr, flush=True)
                write = store_writer(store, "/bench/counter")
                for _ in range(args.rounds):
                    conditional_writes(sample, write, args.ops)
            samples.append(sample)

        chroot = f"/bench-{uuid.uuid4().hex[:8]}"
        ours, raw = Sample("zk:// ZooKeeperStore"), Sample("zk:// raw kazoo")
        pair_ratios: list[float] = []
        store = ZooKeeperStore.from_url(f"zk://{hosts}{chroot}")
        client = KazooClient(hosts=hosts)
        client.start(timeout=30)
        try:
            ours_write = store_writer(store, "/ours")
            raw_write = kazoo_writer(client, f"{chroot}/raw")
            conditional_writes(Sample("warm-up"), ours_write, min(200, args.ops))
            conditional_writes(Sample("warm-up"), raw_write, min(200, args.ops))
            # Alternate short blocks so that load changes on the shared machine hit both alike;
            # the median of the paired block-time ratios is the overhead estimate.
            blocks = max(1, args.ops * args.rounds // BLOCK_OPS)
            for i in range(blocks):
                if i % max(1, blocks // 10) == 0:
                    print(f"zk:// block pair {i + 1}/{blocks} ...", file=sys.stderr, flush=True)
                before_ours, before_raw = ours.elapsed_s, raw.elapsed_s
                if i % 2 == 0:
                    conditional_writes(ours, ours_write, BLOCK_OPS)
                    conditional_writes(raw, raw_write, BLOCK_OPS)
                else:
                    conditional_writes(raw, raw_write, BLOCK_OPS)
                    conditional_writes(ours, ours_write, BLOCK_OPS)
                pair_ratios.append((ours.elapsed_s - before_ours) / (raw.elapsed_s - before_raw))
        finally:
            store.close()
            client.stop()
            client.close()
        samples += [ours, raw]

        print(f"\nconditional writes ({len(PAYLOAD)}-byte values, one client, {args.rounds} rounds x {args.ops})\n")
        print(f"| {'backend':<24} | {'ops':>6} | {'ops/s':>8} | {'p50 ms':>7} | {'p99 ms':>7} |")
        print(f"|{'-' * 26}|{'-' * 8}|{'-' * 10}|{'-' * 9}|{'-' * 9}|")
        for s in samples:
            print(
                f"| {s.name:<24} | {s.ops:>6} | {s.throughput:>8.0f} | "
                f"{s.percentile_ms(0.50):>7.3f} | {s.percentile_ms(0.99):>7.3f} |"
            )
        overhead = statistics.median(pair_ratios)
        p50_ratio = statistics.median(ours.latencies_s) / statistics.median(raw.latencies_s)
        verdict = "within" if overhead <= 1.2 else "NOT within"
        print(
            f"\nZooKeeperStore.set vs raw kazoo set on the same server: {overhead:.3f}x time per write "
            f"(median of {len(pair_ratios)} interleaved {BLOCK_OPS}-write block pairs; whole-run throughput ratio "
            f"{raw.throughput / ours.throughput:.3f}, p50 latency ratio {p50_ratio:.3f}); {verdict} the 1.2x target"
        )
        line = calibration()
        print(line)
        records = [
            row("ZooKeeperStore.set time per write / raw kazoo's", overhead, "x"),
            row("zk:// ZooKeeperStore conditional writes", ours.throughput, "ops/s", "zk:// raw kazoo", raw.throughput),
        ]
        append(
            "metadata",
            records + [row(f"{s.name} conditional writes", s.throughput, "ops/s") for s in samples[:-2]],
            calibration=line,
        )
        return 0
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
