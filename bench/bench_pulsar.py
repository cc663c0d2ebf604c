"""Pulsar's official client (pulsar-client 3.13.0) against pulsar-ref, and against a peer broker.

Deployments:
  standalone   `pulsar-ref standalone` (embedded metadata, three in-process bookies, one broker; E2/Qw2/Qa2)
  cluster      real ZooKeeper, three `pulsar-ref bookie` and two `pulsar-ref broker` processes (E2/Qw2/Qa2)
  pulsar-lite  the `pulsar-lite` 0.2.0 broker (Rust, RocksDB, one process) from PyPI, as a peer

Durability differs and every table says so: pulsar-ref acknowledges a message once Qa=2 bookies
have fsynced it to their journals; pulsar-lite never calls fsync.

Rows (1 KiB unless said otherwise), in this order, each on a topic of its own:
  fixed rate         --rate msg/s for --seconds, unbatched, a consumer acknowledging each message:
                     publish latency from each message's scheduled time to its receipt, end-to-end
                     latency to its arrival at the consumer (first, on the fresh deployment)
  sync send          one send at a time: msg/s, p50/p99 of each send
  async unbatched    sends with up to 1,000 outstanding (max_pending_messages)
  async batched      100 B and 1 KiB, client-side batching (up to 1,000 messages or 10 ms)
  consume            a backlog of --backlog messages (batched, then unbatched) read by a Shared consumer
                     that acknowledges each message

Each table ends with a calibration line from the same run: the time of a fixed pure-Python loop
and the load average, so that figures from another machine can be compared, and what the disk did
during the fixed-rate row: a probe thread writes 1 KiB with O_DSYNC every 10 ms to a file of its own
on the same disk and reports its write + fdatasync p50 and maximum, and how many took over 20 ms. All
the bookies of a deployment share that disk, so a stall of the disk is a stall of every add.

`--rows short` runs only async unbatched 1 KiB and consume unbatched (a quick look at the publish
and delivery paths on a shared machine).
`--rows fixed-rate` runs only the fixed-rate row, `--rounds N` times, each on a fresh deployment.
`--rows disk-probe` runs only the disk probe, for --seconds, `--rounds N` times, with no deployment
and no client: what the disk does on its own, to read the fixed-rate rows against.

    .venv/bin/python bench/bench_pulsar.py [--deployment standalone cluster pulsar-lite]
        [--messages 100000] [--backlog 100000] [--rate 1000] [--seconds 10] [--rows fixed-rate --rounds 3]
        [--rows short --messages 20000 --backlog 20000]
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pulsar  # noqa: E402
from results_log import append, calibration, row  # noqa: E402  (bench/ is on the path of a script run)

from impl.cluster.deployment import Cluster  # noqa: E402
from impl.metadata.zkserver import free_port  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
QUORUMS = ("--ensemble", "2", "--write-quorum", "2", "--ack-quorum", "2")
TARGETS = {
    "async batched 1 KiB": 20_000,
    "async batched 100 B": 20_000,
    "async unbatched": 5_000,
    "consume batched": 20_000,
    "consume unbatched": 5_000,
}


class DiskProbe:
    """While running: a 1 KiB O_DSYNC write every 10 ms to a file in `directory` (the deployment's disk),
    timing each write + fdatasync."""

    INTERVAL_S = 0.01

    def __init__(self, directory: Path) -> None:
        self.path = directory / "disk-probe.dat"
        self.latencies: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="disk-probe", daemon=True)

    def __enter__(self) -> DiskProbe:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self.path.unlink(missing_ok=True)

    def _run(self) -> None:
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | getattr(os, "O_DSYNC", 0), 0o644)
        try:
            record = b"d" * 1024
            while not self._stop.wait(self.INTERVAL_S):
                start = time.perf_counter()
                os.write(fd, record)
                if not getattr(os, "O_DSYNC", 0):
                    os.fdatasync(fd)
                self.latencies.append(time.perf_counter() - start)
        finally:
            os.close(fd)

    def summary(self, during: str = "during the fixed-rate row") -> str:
        slow = sum(1 for x in self.latencies if x > 0.02)
        return (
            f"disk {during}: {len(self.latencies)} probe writes (1 KiB, O_DSYNC) p50 "
            f"{pct(self.latencies, 50):.2f} ms, max {pct(self.latencies, 100):.0f} ms, {slow} over 20 ms"
        )


# ---- deployments ---------------------------------------------------------------------------


class Standalone:
    name = "standalone"
    durability = "ack after Qa=2 bookies fsynced (E2/Qw2/Qa2)"

    def __init__(self, data: Path, *options: str) -> None:
        """`options`: more `pulsar-ref standalone` arguments (`--secure`: `tls_url`, `token`, `trust` are set)."""
        args = ["standalone", "--data", str(data), "--port", "0", "--web-port", "0", *QUORUMS, *options]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pulsar_ref.cli", *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            text=True, cwd=ROOT,
        )  # fmt: skip
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        found = re.search(r"Pulsar clients: (pulsar://\S+);", line)
        if not found:
            self.proc.kill()
            raise RuntimeError(f"standalone did not start: {line!r}")
        self.url = found.group(1)
        tls = re.search(r"TLS: (pulsar\+ssl://\S+),", line)
        self.tls_url = tls.group(1) if tls else ""
        secure = re.search(r"super-user token (\S+); trust certs (\S+)", line)
        self.token = Path(secure.group(1)).read_text().strip() if secure else ""
        self.trust = secure.group(2) if secure else ""

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)


class ClusterDeployment:
    name = "cluster"
    durability = "ack after Qa=2 bookies fsynced (E2/Qw2/Qa2), 2 brokers"

    def __init__(self, data: Path) -> None:
        self.cluster = Cluster.plan(data, bookies=3, brokers=2, die_with_parent=True, broker_options=QUORUMS)
        self.cluster.up()
        assert self.cluster.pulsar_service_url is not None
        self.url = self.cluster.pulsar_service_url

    def stop(self) -> None:
        self.cluster.down()


class PulsarLite:
    name = "pulsar-lite"
    durability = "no fsync (RocksDB, pulsar-lite's default)"

    def __init__(self, data: Path) -> None:
        import pulsar_lite  # the peer: pip install pulsar-lite==0.2.0

        binary = Path(pulsar_lite.__file__).parent / "bin" / "pulsar-lite"
        port = free_port()
        self.proc = subprocess.Popen(
            [str(binary), "--addr", f"127.0.0.1:{port}", "--db-path", str(data), "--log-level", "error"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=data.parent,
        )  # fmt: skip
        self.url = f"pulsar://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                c = pulsar.Client(self.url, operation_timeout_seconds=5)
                c.create_producer("persistent://public/default/ready").send(b"x")
                c.close()
                return
            except Exception:
                time.sleep(0.5)
        self.stop()
        raise RuntimeError("pulsar-lite did not start")

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)


DEPLOYMENTS: dict[str, Callable[[Path], Standalone | ClusterDeployment | PulsarLite]] = {
    "standalone": Standalone,
    "cluster": ClusterDeployment,
    "pulsar-lite": PulsarLite,
}


# ---- rows ----------------------------------------------------------------------------------


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] * 1000 if ordered else float("nan")


_topics = iter(range(1_000_000))


def topic(kind: str) -> str:
    return f"persistent://public/default/bench-{kind}-{os.getpid()}-{next(_topics)}"


def sync_send(client: pulsar.Client, n: int) -> tuple[float, float, float]:
    producer = client.create_producer(topic("sync"))
    payload, latencies = b"x" * 1024, []
    start = time.perf_counter()
    for _ in range(n):
        t0 = time.perf_counter()
        producer.send(payload)
        latencies.append(time.perf_counter() - t0)
    rate = n / (time.perf_counter() - start)
    producer.close()
    return rate, pct(latencies, 50), pct(latencies, 99)


def async_send(client: pulsar.Client, n: int, size: int, batching: bool, name: str | None = None) -> float:
    producer = client.create_producer(
        name or topic("async"), batching_enabled=batching, batching_max_messages=1000,
        batching_max_publish_delay_ms=10, max_pending_messages=1000, block_if_queue_full=True,
    )  # fmt: skip
    payload, done, errors = b"x" * size, threading.Semaphore(0), []

    def sent(result: pulsar.Result, _mid: pulsar.MessageId) -> None:
        if result != pulsar.Result.Ok:
            errors.append(result)
        done.release()

    start = time.perf_counter()
    for _ in range(n):
        producer.send_async(payload, sent)
    producer.flush()
    for _ in range(n):
        done.acquire()
    rate = n / (time.perf_counter() - start)
    producer.close()
    if errors:
        raise RuntimeError(f"{len(errors)} sends failed: {errors[0]}")
    return rate


def consume_backlog(client: pulsar.Client, n: int, batched: bool) -> float:
    name = topic("backlog")
    consumer = client.subscribe(name, "bench", consumer_type=pulsar.ConsumerType.Shared)
    async_send(client, n, 1024, batched, name)
    start = time.perf_counter()
    for _ in range(n):
        consumer.acknowledge(consumer.receive(30_000))
    rate = n / (time.perf_counter() - start)
    consumer.close()
    return rate


def fixed_rate(client: pulsar.Client, rate: int, seconds: float) -> tuple[float, float, float, float]:
    name = topic("rate")
    consumer = client.subscribe(name, "bench")
    producer = client.create_producer(name, max_pending_messages=10_000, block_if_queue_full=True)
    n = int(rate * seconds)
    scheduled = [0.0] * n
    published: list[float] = []
    arrived: list[float] = []

    def receive() -> None:
        for _ in range(n):
            m = consumer.receive(30_000)
            arrived.append(time.perf_counter() - scheduled[int(m.data()[:10])])
            consumer.acknowledge(m)

    reader = threading.Thread(target=receive)
    reader.start()
    start = time.perf_counter()
    for i in range(n):
        scheduled[i] = start + i / rate
        delay = scheduled[i] - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        t = scheduled[i]
        producer.send_async(b"%010d" % i + b"x" * 1014, lambda _r, _m, t=t: published.append(time.perf_counter() - t))
    producer.flush()
    reader.join(60)
    producer.close()
    consumer.close()
    return pct(published, 50), pct(published, 99), pct(arrived, 50), pct(arrived, 99)


def run(deployment: str, args: argparse.Namespace, work: Path, figures: dict[str, float] | None = None) -> list[str]:
    """One deployment's rows, printed as a table; `figures` gets each row's figure (msg/s or p99 ms) by name."""
    figures = {} if figures is None else figures
    work.mkdir(parents=True, exist_ok=True)
    target = DEPLOYMENTS[deployment](work / deployment)
    lines = [
        f"### {deployment}: {target.durability}",
        "",
        "| row | msg/s | p50 ms | p99 ms | target |",
        "|---|---|---|---|---|",
    ]
    quiet = pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)  # the client's INFO lines would bury the tables
    client = pulsar.Client(target.url, operation_timeout_seconds=60, logger=quiet)
    try:
        if args.rows == "short":
            with DiskProbe(work) as disk:
                rate = figures["async unbatched"] = async_send(client, args.messages, 1024, False)
                lines.append(f"| async unbatched | {rate:,.0f} | | | >= {TARGETS['async unbatched']:,} |")
                rate = figures["consume unbatched"] = consume_backlog(client, args.backlog, False)
            backlog = f"consume unbatched ({args.backlog:,} backlog, Shared, acks)"
            lines.append(f"| {backlog} | {rate:,.0f} | | | >= {TARGETS['consume unbatched']:,} |")
            return finish(lines, client, target, disk, "during the two rows")
        # The fixed-rate row first, on the fresh deployment: after the backlog rows the broker goes on
        # trimming, persisting cursors and collecting a large heap for a while.
        with DiskProbe(work) as disk:
            p50, p99, e50, e99 = fixed_rate(client, args.rate, args.seconds)
        figures[f"fixed {args.rate:,} msg/s, publish p99"] = p99
        figures[f"fixed {args.rate:,} msg/s, end-to-end p50"] = e50
        # What the broker adds after the receipt: the target is 0.5 ms (issue 46).
        figures[f"fixed {args.rate:,} msg/s, delivery after publish p50"] = e50 - p50
        lines.append(
            f"| fixed {args.rate:,} msg/s, publish latency | {args.rate:,} | {p50:.2f} | {p99:.2f} | p99 < 20 |"
        )
        lines.append(f"| fixed {args.rate:,} msg/s, end-to-end latency | {args.rate:,} | {e50:.2f} | {e99:.2f} | |")
        if args.rows == "fixed-rate":
            return finish(lines, client, target, disk)
        rate, p50, p99 = sync_send(client, min(args.messages, 5000))
        lines.append(f"| sync send 1 KiB | {rate:,.0f} | {p50:.2f} | {p99:.2f} | |")
        for name, size, batching in (
            ("async unbatched", 1024, False),
            ("async batched 100 B", 100, True),
            ("async batched 1 KiB", 1024, True),
        ):
            rate = figures[name] = async_send(client, args.messages, size, batching)
            lines.append(f"| {name} | {rate:,.0f} | | | >= {TARGETS[name]:,} |")
        for name, batched in (("consume batched", True), ("consume unbatched", False)):
            rate = figures[name] = consume_backlog(client, args.backlog, batched)
            lines.append(
                f"| {name} ({args.backlog:,} backlog, Shared, acks) | {rate:,.0f} | | | >= {TARGETS[name]:,} |"
            )
    except BaseException:
        client.close()
        target.stop()
        raise
    return finish(lines, client, target, disk)


def finish(
    lines: list[str],
    client: pulsar.Client,
    target: Standalone | ClusterDeployment | PulsarLite,
    disk: DiskProbe,
    during: str = "during the fixed-rate row",
) -> list[str]:
    client.close()
    target.stop()
    lines += ["", f"{calibration()}; {disk.summary(during)}", ""]
    print("\n".join(lines), flush=True)
    return lines


def probe_disk(seconds: float, work: Path) -> None:
    """The disk probe alone, nothing else of the benchmark's running."""
    work.mkdir(parents=True, exist_ok=True)
    with DiskProbe(work) as disk:
        time.sleep(seconds)
    print(f"{calibration()}; {disk.summary(f'alone for {seconds:g} s')}", flush=True)


def record(figures: dict[str, dict[str, float]], calibration_line: str) -> None:
    """One round's figures to bench/results/pulsar.jsonl, pulsar-lite's as each row's peer when it ran."""
    peer = figures.get("pulsar-lite", {})
    ours = [d for d in figures if d != "pulsar-lite"] or ["pulsar-lite"]
    rows = []
    for deployment in ours:
        for name, value in figures[deployment].items():
            unit = "ms" if name.endswith(("p50", "p99")) else "msg/s"
            other = peer.get(name) if deployment != "pulsar-lite" else None
            rows.append(row(f"{deployment}: {name}", value, unit, "pulsar-lite" if other else None, other))
    append("pulsar", rows, calibration=calibration_line)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--deployment", nargs="+", choices=list(DEPLOYMENTS), default=list(DEPLOYMENTS))
    parser.add_argument(
        "--messages",
        type=int,
        default=100_000,
        help="messages per publish row (100,000: each row times seconds, not a fraction of one)",
    )
    parser.add_argument("--backlog", type=int, default=100_000, help="backlog of each consume row (100,000)")
    parser.add_argument("--rate", type=int, default=1000, help="fixed-rate row: messages per second (1,000)")
    parser.add_argument("--seconds", type=float, default=10.0, help="fixed-rate row or disk probe: seconds (10)")
    parser.add_argument(
        "--rows",
        choices=["all", "short", "fixed-rate", "disk-probe"],
        default="all",
        help="every row, async unbatched + consume unbatched, the fixed-rate row, or the disk probe alone (all)",
    )
    parser.add_argument("--rounds", type=int, default=1, help="runs of each deployment, each a fresh one (1)")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-pulsar-"))
    print(f"command: {' '.join(sys.argv)}\n{calibration()}\n", flush=True)
    try:
        for round_ in range(args.rounds):
            if args.rows == "disk-probe":
                probe_disk(args.seconds, work)
                continue
            start = calibration()
            figures = {deployment: dict[str, float]() for deployment in args.deployment}
            for deployment in args.deployment:
                run(deployment, args, work / f"round-{round_}", figures[deployment])
            record(figures, f"{start} (start of the round); {calibration()} (end)")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
