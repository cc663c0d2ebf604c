"""Consume a backlog from the bookies: pulsar-ref's standalone with no entry cache, against pulsar-lite.

bench_pulsar.py's consume rows subscribe before publishing, so most of their reads come from the
broker's entry cache. This row reads every entry from the bookies (issue 46: a dispatch that misses the
cache): `pulsar-ref standalone --managed-ledger-cache-size-mb 0`, a Shared subscription created first,
--backlog unbatched 1 KiB messages published, then one consumer receives and acknowledges each; the
figure is its msg/s. pulsar-lite (Rust, RocksDB, no fsync) runs the same row in the same invocation.

`--bookie-processes` runs the standalone's bookies in processes of their own (`pulsar-ref standalone
--bookie-processes`), as a deployment's bookies are: the bookies' reads then overlap the broker's work on
the other core, and the broker CPU column is the broker's alone.

For an A/B, `--tree NAME=DIR` (repeatable) runs the standalone from that source tree (a `git archive`
copy of another commit, with this venv); `--pairs N` repeats the trees in turn, the order alternating
from one pair to the next, with a pulsar-lite run in each pair. Each run is a fresh deployment.

    .venv/bin/python bench/bench_consume_bookies.py [--backlog 20000] [--pairs 3] [--bookie-processes]
        [--tree main=/tmp/main-copy --tree branch=.]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pulsar  # noqa: E402
from bench_pulsar import QUORUMS, PulsarLite, async_send, topic  # noqa: E402
from results_log import calibration  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


class UncachedStandalone:
    """`pulsar-ref standalone` from source tree `tree`, with no entry cache: every read goes to the bookies."""

    def __init__(self, data: Path, tree: Path, *options: str) -> None:
        args = ["standalone", "--data", str(data), "--port", "0", "--web-port", "0", *QUORUMS]
        args += ["--managed-ledger-cache-size-mb", "0", *options]
        env = {**os.environ, "PYTHONPATH": str(tree)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pulsar_ref.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, cwd=tree, env=env,
        )  # fmt: skip
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        found = re.search(r"Pulsar clients: (pulsar://\S+);", line)
        if not found:
            self.proc.kill()
            raise RuntimeError(f"standalone did not start: {line!r}")
        self.url = found.group(1)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)


def cpu_seconds(pid: int) -> float:
    """The process's user + system CPU time so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def consume_from_bookies(url: str, backlog: int, pid: int | None = None) -> tuple[float, float]:
    """The backlog published with its subscription idle, then consumed (acknowledging each): msg/s, and the
    broker process's CPU per message consumed in us (`pid`: its process; nan without)."""
    quiet = pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)
    client = pulsar.Client(url, operation_timeout_seconds=60, logger=quiet)
    try:
        name = topic("from-bookies")
        client.subscribe(name, "bench", consumer_type=pulsar.ConsumerType.Shared).close()  # keeps the backlog
        async_send(client, backlog, 1024, False, name)
        consumer = client.subscribe(name, "bench", consumer_type=pulsar.ConsumerType.Shared)
        cpu = cpu_seconds(pid) if pid else 0.0
        start = time.perf_counter()
        for _ in range(backlog):
            consumer.acknowledge(consumer.receive(30_000))
        rate = backlog / (time.perf_counter() - start)
        per_message = (cpu_seconds(pid) - cpu) / backlog * 1e6 if pid else float("nan")
        consumer.close()
        return rate, per_message
    finally:
        client.close()


def run_one(name: str, tree: Path | None, work: Path, args: argparse.Namespace) -> tuple[float, float]:
    data = work / f"{name}-{time.monotonic_ns()}"
    data.mkdir(parents=True)
    options = ["--bookie-processes"] if args.bookie_processes else []
    target = PulsarLite(data / "db") if tree is None else UncachedStandalone(data, tree, *options)
    backlog = args.backlog
    try:
        return consume_from_bookies(target.url, backlog, target.proc.pid)
    finally:
        target.stop()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backlog", type=int, default=20_000, help="messages in the backlog (20,000)")
    parser.add_argument("--pairs", type=int, default=1, help="rounds of every tree and pulsar-lite (1)")
    parser.add_argument(
        "--bookie-processes",
        action="store_true",
        help="the standalone's bookies in processes of their own: the broker's CPU is its process's alone",
    )
    parser.add_argument(
        "--tree", action="append", default=[], help="NAME=DIR: a pulsar-ref source tree to run (default: this one)"
    )
    args = parser.parse_args()
    trees = [(n, Path(d).resolve()) for n, d in (t.split("=", 1) for t in args.tree)] or [("pulsar-ref", ROOT)]
    work = Path(tempfile.mkdtemp(prefix="bench-consume-bookies-"))
    print(f"command: {' '.join(sys.argv)}\n{calibration()}\n", flush=True)
    print(
        f"| pair | run | consume {args.backlog:,} x 1 KiB from the bookies, msg/s | x pulsar-lite | broker CPU us/msg |"
    )
    print("|---|---|---|---|---|")
    try:
        for pair in range(args.pairs):
            order = trees if pair % 2 == 0 else trees[::-1]
            lite, lite_cpu = run_one("pulsar-lite", None, work, args)
            print(f"| {pair + 1} | pulsar-lite | {lite:,.0f} | | {lite_cpu:.0f} |", flush=True)
            for name, tree in order:
                rate, cpu = run_one(name, tree, work, args)
                print(f"| {pair + 1} | {name} | {rate:,.0f} | {rate / lite:.2f}x | {cpu:.0f} |", flush=True)
            print(f"<!-- {calibration()} -->", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"\n{calibration()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
