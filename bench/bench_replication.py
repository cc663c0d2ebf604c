"""Geo-replication (issue 30): how fast a replicator copies a topic to another cluster, and how late.

Deployment: a real ZooKeeper as the configuration store and two `pulsar-ref standalone` processes, `east` and
`west` (each its own embedded metadata and three in-process bookies, E2/Qw2/Qa2), in one instance; a namespace
replicated to both, de-duplication on.

Each row publishes 1 KiB messages to east with the official client (pulsar-client), batched (up to 1,000
messages or 10 ms), at a fixed --rates value for --seconds, while a consumer on west receives them:
  published/s    what east acknowledged, per second of the publishing window
  replicated/s   what reached the consumer on west, per second from the first send to the last arrival
  lag p50/p99    per message (ms), from its send at east (its publish time, kept by replication) to its arrival at
                 the consumer on west: publish, replicate, deliver
  drained        seconds from the last send to the last arrival at west (the replicator keeping up: ~0)
  all arrived    every message arrived once

Targets (issue 30): the replicator keeps up with 10,000 msg/s of 1 KiB batched messages; p99 lag < 1 s at 1,000
msg/s. The table ends with a calibration line measured in the same run.

    .venv/bin/python bench/bench_replication.py [--rates 1000 10000] [--seconds 10]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pulsar  # noqa: E402
from bench_pulsar import Standalone, calibration, pct  # noqa: E402
from results_log import append  # noqa: E402
from results_log import row as record_row  # noqa: E402

from impl.broker import namespaces  # noqa: E402
from impl.metadata.url import connect  # noqa: E402
from impl.metadata.zkserver import ZooKeeperServer  # noqa: E402

NAMESPACE = "public/geo-bench"
SIZE = 1024


class Cluster:
    """A `pulsar-ref standalone` of cluster `name` in the instance whose configuration store is `config`."""

    def __init__(self, data: Path, name: str, config: str) -> None:
        self.standalone = Standalone(data, "--cluster", name, "--configuration-store", config)
        self.url = self.standalone.url
        store = connect(config)
        try:  # its web service, from the ClusterData it registered
            self.web = namespaces.get_cluster(store, name).service_url
        finally:
            store.close()

    def admin(self, method: str, path: str, body: object = None) -> None:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.web + path, data=data, method=method)
        request.add_header("Content-Type", "application/json")
        urllib.request.urlopen(request, timeout=30).close()

    def stop(self) -> None:
        self.standalone.stop()


def row(east: pulsar.Client, west: pulsar.Client, rate: int, seconds: float) -> dict[str, float | bool]:
    topic = f"persistent://{NAMESPACE}/r{rate}-{int(time.time() * 1000)}"
    consumer = west.subscribe(
        topic, "bench", initial_position=pulsar.InitialPosition.Earliest, receiver_queue_size=5000
    )
    producer = east.create_producer(
        topic,
        batching_enabled=True,
        batching_max_messages=1000,
        batching_max_publish_delay_ms=10,
        max_pending_messages=50_000,
        block_if_queue_full=True,
    )
    n = int(rate * seconds)
    lags: list[float] = []
    seen: set[int] = set()
    arrived_at = [0.0]
    acked = [0]

    def receive() -> None:
        while len(seen) < n:
            try:
                m = consumer.receive(30_000)
            except pulsar.Timeout:
                return
            now = time.time()
            lags.append(now - m.publish_timestamp() / 1000)
            seen.add(int(m.data()[:10]))
            arrived_at[0] = time.perf_counter()
            consumer.acknowledge(m)

    def sent(result: pulsar.Result, _mid: pulsar.MessageId) -> None:
        if result == pulsar.Result.Ok:
            acked[0] += 1

    reader = threading.Thread(target=receive)
    reader.start()
    padding = b"x" * (SIZE - 10)
    start = time.perf_counter()
    for i in range(n):
        delay = start + i / rate - time.perf_counter()
        if delay > 0:
            time.sleep(delay)
        producer.send_async(b"%010d" % i + padding, sent)
    producer.flush()
    last_sent = time.perf_counter()
    reader.join(120)
    producer.close()
    consumer.close()
    end = arrived_at[0] or time.perf_counter()
    return {
        "published": acked[0] / (last_sent - start),
        "replicated": len(seen) / (end - start),
        "lag_p50": pct(lags, 50),
        "lag_p99": pct(lags, 99),
        "drained": max(0.0, end - last_sent),
        "complete": len(seen) == n and len(lags) == n,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rates", type=int, nargs="+", default=[1000, 10_000], help="msg/s per row")
    parser.add_argument("--seconds", type=float, default=10.0, help="publishing time per row (10)")
    args = parser.parse_args()
    start = calibration()
    print(f"command: {' '.join(sys.argv)}\n{start}\n", flush=True)
    records = []
    work = Path(tempfile.mkdtemp(prefix="bench-replication-"))
    zk = ZooKeeperServer(str(work / "zk"), die_with_parent=True)
    zk.start(90)
    clusters: list[Cluster] = []
    try:
        config = f"zk://{zk.connect_string}/configuration"
        clusters = [Cluster(work / name, name, config) for name in ("east", "west")]
        east, west = clusters
        east.admin("PUT", f"/admin/v2/namespaces/{NAMESPACE}")
        east.admin("POST", f"/admin/v2/namespaces/{NAMESPACE}/replication", ["east", "west"])
        quiet = pulsar.ConsoleLogger(pulsar.LoggerLevel.Warn)
        east_client = pulsar.Client(east.url, operation_timeout_seconds=60, logger=quiet)
        west_client = pulsar.Client(west.url, operation_timeout_seconds=60, logger=quiet)
        lines = [
            "| rate msg/s | published/s | replicated/s | lag p50 ms | lag p99 ms | drained s | all arrived |",
            "|---|---|---|---|---|---|---|",
        ]
        for rate in args.rates:
            print(f"row {rate} msg/s for {args.seconds:g} s ...", file=sys.stderr, flush=True)
            r = row(east_client, west_client, rate, args.seconds)
            lines.append(
                f"| {rate:,} | {r['published']:,.0f} | {r['replicated']:,.0f} | {r['lag_p50']:.0f} | "
                f"{r['lag_p99']:.0f} | {r['drained']:.2f} | {'yes' if r['complete'] else 'NO'} |"
            )
            records += [
                record_row(f"{rate:,} msg/s: lag p99", r["lag_p99"], "ms"),
                record_row(f"{rate:,} msg/s: replicated", r["replicated"], "msg/s", "published", r["published"]),
                record_row(f"{rate:,} msg/s: drained after the last send", r["drained"], "s"),
            ]
        east_client.close()
        west_client.close()
        print("\n".join(lines))
        end = calibration()
        print(f"\n{end}")
        append("replication", records, calibration=f"{start} (start); {end} (end)")
    finally:
        for cluster in clusters:
            cluster.stop()
        zk.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
