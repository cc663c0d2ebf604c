"""Broker benchmark: publish throughput, end-to-end latency at a fixed rate, catch-up reads.

Runs `pulsar-ref standalone` as its own process (embedded metadata, three in-process bookies,
one broker; E2/Qw2/Qa2) and drives it from this process with the client library:
  publish      N messages of 100 B and 1 KiB, with and without client-side batching
  latency      a fixed rate of 1 KiB messages for S seconds from a batching producer (1 ms
               delay, Pulsar's default); a consumer on the same clock measures send -> receive
  catch-up     the standalone is restarted (empty entry cache) and a reader reads the whole
               topic back from the bookies

    .venv/bin/python bench/bench_broker.py [--messages 5000] [--seconds 5] [--rate 1000]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from impl.broker.client import Client  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent


class StandaloneProcess:
    def __init__(self, data: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pulsar_ref.cli", "standalone", "--data", str(data)],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=ROOT,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if "listening" not in line:
            self.proc.kill()
            raise RuntimeError(f"standalone did not start: {line!r}")
        self.url = line.split()[1]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(60)


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(p / 100 * len(ordered)))] if ordered else float("nan")


def publish(client: Client, topic: str, n: int, size: int, batching: bool) -> tuple[float, float, float]:
    producer = client.create_producer(topic, batching=batching, batch_max_messages=100, batch_delay_s=0.002)
    payload = b"x" * size
    latencies: list[float] = []
    start = time.perf_counter()
    sent = []
    for _ in range(n):
        t0 = time.perf_counter()
        f = producer.send_async(payload)
        f.add_done_callback(lambda _f, t0=t0: latencies.append(time.perf_counter() - t0))
        sent.append(f)
    producer.flush()
    for f in sent:
        f.result(120)
    elapsed = time.perf_counter() - start
    producer.close()
    return n / elapsed, percentile(latencies, 50) * 1000, percentile(latencies, 99) * 1000


def end_to_end(client: Client, topic: str, seconds: float, rate: int) -> tuple[int, float, float]:
    consumer = client.subscribe(topic, "bench", initial_position="latest")
    producer = client.create_producer(topic, batching=True, batch_delay_s=0.001)  # Pulsar's default producer
    sent_at: dict[bytes, float] = {}
    latencies: list[float] = []
    total = int(seconds * rate)

    def consume() -> None:
        while len(latencies) < total:
            try:
                msg = consumer.receive(timeout_s=10)
            except TimeoutError:
                return
            latencies.append(time.perf_counter() - sent_at[msg.data])
            consumer.acknowledge(msg)

    reader = threading.Thread(target=consume)
    reader.start()
    start = time.perf_counter()
    for i in range(total):
        wait = start + i / rate - time.perf_counter()
        if wait > 0:
            time.sleep(wait)
        key = b"%08d" % i + b"x" * 1016
        sent_at[key] = time.perf_counter()
        producer.send_async(key)
    producer.close()
    reader.join()
    consumer.close()
    return len(latencies), percentile(latencies, 50) * 1000, percentile(latencies, 99) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--rate", type=int, default=1000)
    args = parser.parse_args()
    data = Path(tempfile.mkdtemp(prefix="bench-broker-"))
    rows = []
    standalone = StandaloneProcess(data)
    try:
        with Client(standalone.url, timeout_s=60) as client:
            for size in (100, 1024):
                for batching in (False, True):
                    topic = f"bench-{size}-{'batch' if batching else 'plain'}"
                    rate, p50, p99 = publish(client, topic, args.messages, size, batching)
                    rows.append((f"publish {size} B, {'batching' if batching else 'no batching'}",
                                 args.messages, rate, p50, p99))
                    print(rows[-1], flush=True)
            n, p50, p99 = end_to_end(client, "bench-e2e", args.seconds, args.rate)
            rows.append((f"end to end, 1 KiB at {args.rate} msg/s, batching (1 ms)", n, n / args.seconds, p50, p99))
            print(rows[-1], flush=True)
    finally:
        standalone.stop()
    standalone = StandaloneProcess(data)  # restarted: the entry cache is empty, reads go to the bookies
    try:
        with Client(standalone.url, timeout_s=60) as client:
            start = time.perf_counter()
            count, nxt = 0, None
            while True:
                batch = client.read_topic("bench-1024-plain", nxt, limit=1000)
                if not batch:
                    break
                count += len(batch)
                last = batch[-1][0]
                nxt = type(last)(last.ledger_id, last.entry_id, last.batch_index + 1)
            elapsed = time.perf_counter() - start
            rows.append(("catch-up read from bookies, 1 KiB", count, count / elapsed, float("nan"), float("nan")))
    finally:
        standalone.stop()
    print()
    print("| run | messages | msg/s | p50 ms | p99 ms |")
    print("|---|---:|---:|---:|---:|")
    for name, n, rate, p50, p99 in rows:
        print(f"| {name} | {n:,} | {rate:,.0f} | {p50:.1f} | {p99:.1f} |")
    print(f"\nmedian of the publish rates: {statistics.median(r[2] for r in rows[:4]):,.0f} msg/s")


if __name__ == "__main__":
    main()
