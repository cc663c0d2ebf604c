"""Broker benchmark: publish throughput, latency at a fixed rate, catch-up reads from the bookies.

Deployments (E2/Qw2/Qa2 in both, driven from this process with the project's Pulsar client,
impl/client/, over Pulsar's binary protocol):
  standalone   `pulsar-ref standalone` as one process (embedded metadata, three in-process bookies, one broker)
  cluster      separate processes: a real ZooKeeper, three `pulsar-ref bookie`, one `pulsar-ref broker`
               (impl/cluster/deployment.py, as `pulsar-ref cluster up` lays them out)

Runs, per deployment:
  publish      N messages of 100 B and 1 KiB sent as fast as possible, with and without client-side
               batching; the latencies of such a run are those of a backlog, not of a light load
  fixed rate   1 KiB messages at R msg/s for S seconds, without batching and with batching (1 ms delay,
               Pulsar's default); publish latency is from the scheduled send time to the acknowledgement,
               end-to-end latency to the receipt by a consumer on the same clock (so a sender falling
               behind its schedule shows up as latency)
  catch-up     the broker is restarted (its entry cache is empty) and the unbatched 1 KiB topic is read back
               from the bookies: by a reader (a non-durable subscription from the earliest message to the
               topic's last message id) and by a durable subscription from earliest

    .venv/bin/python bench/bench_broker.py [--deployment standalone|cluster|both] [--messages 5000]
                                           [--seconds 5] [--rate 1000] [--repeat 1]
                                           [--runs publish fixed-rate catch-up]
"""

from __future__ import annotations

import argparse
import functools
import math
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from results_log import append, calibration  # noqa: E402
from results_log import row as record_row  # noqa: E402

from impl.client import Client  # noqa: E402
from impl.cluster.deployment import Cluster  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
QUORUMS = ("--ensemble", "2", "--write-quorum", "2", "--ack-quorum", "2")  # the standalone's default


class StandaloneDeployment:
    name = "standalone"

    def __init__(self, data: Path) -> None:
        self.data = data
        self._start()

    def _start(self) -> None:
        ports = ("--pulsar-port", "0", "--web-port", "0")  # any free ones: never a port another run holds
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pulsar_ref.cli", "standalone", "--data", str(self.data), *ports, *QUORUMS],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            cwd=ROOT,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        found = re.search(r"Pulsar clients: (pulsar://[^\s;]+)", line)
        if "listening" not in line or not found:
            self.proc.kill()
            raise RuntimeError(f"standalone did not start: {line!r}")
        self.url = found.group(1)  # its pulsar:// listener

    def restart_broker(self) -> None:
        self.stop()
        self._start()

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)


class ClusterDeployment:
    name = "cluster"

    def __init__(self, data: Path) -> None:
        self.cluster = Cluster.plan(
            data, zookeepers=1, bookies=3, brokers=1, die_with_parent=True, broker_options=QUORUMS
        )
        self.cluster.up()
        assert self.cluster.pulsar_service_url is not None
        self.url = self.cluster.pulsar_service_url  # the brokers' pulsar:// listeners

    def restart_broker(self) -> None:
        self.cluster.node("broker-1").stop()  # graceful: it closes its ledgers
        self.cluster.start("broker-1")

    def stop(self) -> None:
        self.cluster.down()


@dataclass
class Row:
    run: str
    messages: int
    rate: float
    p50: float = math.nan  # publish latency (ms)
    p99: float = math.nan
    e2e_p50: float = math.nan  # end-to-end latency (ms)
    e2e_p99: float = math.nan


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] * 1000 if ordered else math.nan


def record_since(into: list[float], start: float, _done: object) -> None:
    into.append(time.perf_counter() - start)


def publish(client: Client, topic: str, n: int, size: int, batching: bool) -> Row:
    producer = client.create_producer(topic, batching=batching, batch_max_messages=100, batch_delay_s=0.002)
    payload = b"x" * size
    latencies: list[float] = []
    sent = []
    start = time.perf_counter()
    for _ in range(n):
        t0 = time.perf_counter()
        f = producer.send_async(payload)
        f.add_done_callback(functools.partial(record_since, latencies, t0))
        sent.append(f)
    producer.flush()
    for f in sent:
        f.result(120)
    elapsed = time.perf_counter() - start
    producer.close()
    name = f"publish {size} B, {'batching' if batching else 'no batching'}, as fast as possible"
    return Row(name, n, n / elapsed, percentile(latencies, 50), percentile(latencies, 99))


def fixed_rate(client: Client, topic: str, seconds: float, rate: int, batching: bool) -> Row:
    """1 KiB messages at `rate`/s; latencies from each message's scheduled send time."""
    consumer = client.subscribe(topic, "bench", initial_position="latest")
    producer = client.create_producer(topic, batching=batching, batch_delay_s=0.001)
    total = int(seconds * rate)
    scheduled = [0.0] * total
    acked: list[float] = []
    received: list[float] = []

    def consume() -> None:
        while len(received) < total:
            try:
                msg = consumer.receive(timeout_s=30)
            except TimeoutError:
                return
            received.append(time.perf_counter() - scheduled[int(msg.data[:8])])
            consumer.acknowledge(msg)

    reader = threading.Thread(target=consume)
    reader.start()
    start = time.perf_counter() + 0.05
    for i in range(total):
        scheduled[i] = at = start + i / rate
        wait = at - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        f = producer.send_async(b"%08d" % i + b"x" * 1016)
        f.add_done_callback(functools.partial(record_since, acked, at))
    producer.close()
    sent_in = time.perf_counter() - start
    reader.join()
    consumer.close()
    if len(received) < total:
        print(f"  only {len(received)} of {total} messages were received", flush=True)
    name = f"fixed rate, 1 KiB at {rate:,} msg/s, {'batching (1 ms)' if batching else 'no batching'}"
    return Row(
        name,
        len(received),
        total / sent_in,
        percentile(acked, 50),
        percentile(acked, 99),
        percentile(received, 50),
        percentile(received, 99),
    )


def catch_up_reader(client: Client, topic: str) -> Row:
    start = time.perf_counter()
    reader = client.create_reader(topic)  # from the earliest message
    count = 0
    try:
        last = reader.last_message_id()
        while last is not None:
            mid, _ = reader.read_next(timeout_s=30)
            count += 1
            if mid >= last:
                break
    except TimeoutError:
        print(f"  the reader read {count} messages, not up to {last}", flush=True)
    reader.close()
    return Row("catch-up read from bookies, 1 KiB entries, reader", count, count / (time.perf_counter() - start))


def catch_up_subscription(client: Client, topic: str, n: int) -> Row:
    start = time.perf_counter()
    consumer = client.subscribe(topic, "catch-up", initial_position="earliest")
    count = 0
    try:
        while count < n:
            consumer.acknowledge(consumer.receive(timeout_s=30))
            count += 1
    except TimeoutError:
        print(f"  the subscription received {count} of {n}", flush=True)
    consumer.close()
    return Row("catch-up read from bookies, 1 KiB entries, subscription", count, count / (time.perf_counter() - start))


def run(deploy: Callable[[Path], StandaloneDeployment | ClusterDeployment], args: argparse.Namespace) -> list[Row]:
    rows: list[Row] = []
    data = Path(tempfile.mkdtemp(prefix="bench-broker-"))
    deployment = deploy(data)
    try:
        with Client(deployment.url, timeout_s=60) as client:
            for size in (100, 1024) if "publish" in args.runs or "catch-up" in args.runs else ():
                for batching in (False, True):
                    rows.append(
                        publish(
                            client, f"bench-{size}-{'batch' if batching else 'plain'}", args.messages, size, batching
                        )
                    )
                    print(f"  {rows[-1]}", flush=True)
            for batching in (False, True) if "fixed-rate" in args.runs else ():
                topic = f"bench-rate-{'batch' if batching else 'plain'}"
                rows.append(fixed_rate(client, topic, args.seconds, args.rate, batching))
                print(f"  {rows[-1]}", flush=True)
        if "catch-up" not in args.runs:
            return rows
        deployment.restart_broker()  # an empty entry cache: the reads go to the bookies
        with Client(deployment.url, timeout_s=60) as client:
            rows.append(catch_up_reader(client, "bench-1024-plain"))
            print(f"  {rows[-1]}", flush=True)
            rows.append(catch_up_subscription(client, "bench-1024-plain", args.messages))
            print(f"  {rows[-1]}", flush=True)
    finally:
        deployment.stop()
        shutil.rmtree(data, ignore_errors=True)  # ~45 MB a run
    return rows


def median_row(rows: tuple[Row, ...]) -> Row:
    def med(values: list[float]) -> float:
        values = [v for v in values if not math.isnan(v)]
        return statistics.median(values) if values else math.nan

    return Row(
        rows[0].run,
        min(r.messages for r in rows),
        med([r.rate for r in rows]),
        med([r.p50 for r in rows]),
        med([r.p99 for r in rows]),
        med([r.e2e_p50 for r in rows]),
        med([r.e2e_p99 for r in rows]),
    )


def ms(value: float) -> str:
    return "-" if math.isnan(value) else f"{value:.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--deployment", choices=("standalone", "cluster", "both"), default="both")
    parser.add_argument("--messages", type=int, default=5000, help="messages per publish run (default 5000)")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of a fixed-rate run (default 5)")
    parser.add_argument("--rate", type=int, default=1000, help="messages/s of a fixed-rate run (default 1000)")
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="run each deployment this many times, alternating, and report each cell's median",
    )
    parser.add_argument(
        "--runs",
        nargs="+",
        choices=("publish", "fixed-rate", "catch-up"),
        default=["publish", "fixed-rate", "catch-up"],
        help="which runs (default all; catch-up reads the topic the 1 KiB unbatched publish run wrote)",
    )
    args = parser.parse_args()
    deployments: dict[str, Callable[[Path], StandaloneDeployment | ClusterDeployment]] = {
        "standalone": StandaloneDeployment,
        "cluster": ClusterDeployment,
    }
    chosen = list(deployments) if args.deployment == "both" else [args.deployment]
    runs: dict[str, list[list[Row]]] = {name: [] for name in chosen}
    for i in range(args.repeat):
        for name in chosen:
            print(f"{name} ({i + 1} of {args.repeat}):", flush=True)
            runs[name].append(run(deployments[name], args))
    records = []  # bench/results/broker.jsonl, for bench/dashboard.py
    for name, repeats in runs.items():
        rows = [median_row(same) for same in zip(*repeats, strict=True)]
        for r in rows:
            if r.run.startswith("fixed rate"):
                records.append(record_row(f"{name}: {r.run}: publish p99", r.p99, "ms"))
            else:
                records.append(record_row(f"{name}: {r.run}", r.rate, "msg/s"))
        print(f"\n{name}" + (f" (median of {args.repeat} runs)" if args.repeat > 1 else "") + "\n")
        print("| run | messages | msg/s | publish p50 ms | publish p99 ms | end-to-end p50 ms | end-to-end p99 ms |")
        print("|---|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            print(
                f"| {r.run} | {r.messages:,} | {r.rate:,.0f} | {ms(r.p50)} | {ms(r.p99)} | {ms(r.e2e_p50)} "
                f"| {ms(r.e2e_p99)} |"
            )
    line = calibration()
    print(f"\n{line}")
    append("broker", records, calibration=line)


if __name__ == "__main__":
    main()
