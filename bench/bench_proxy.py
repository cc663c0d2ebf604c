"""The official client through a Pulsar proxy against the same client straight to the brokers, in one run.

One cluster: real ZooKeeper, three `pulsar-ref bookie`, two `pulsar-ref broker` (E2/Qw2/Qa2) and one
`pulsar-ref proxy`. Each row runs twice, on topics of their own, alternating direct and proxied, so
both see the same machine; the ratio column is proxied / direct.

Rows (1 KiB):
  fixed rate        --rate msg/s for --seconds, unbatched, one consumer: publish latency p50/p99
                    (target: the proxy's p99 within 2 ms of direct); after a 2-second warm-up on each
                    path, two rounds, direct and proxied in alternation
  async unbatched   up to 1,000 outstanding sends                     (target: >= 70% of direct)
  async batched     client-side batching (1,000 messages or 10 ms)     (target: >= 70% of direct)
  consume batched   a backlog of --backlog messages, Shared, acks      (target: >= 70% of direct)

The table ends with a calibration line from the same run (a fixed pure-Python loop, the load average).

    .venv/bin/python bench/bench_proxy.py [--messages 20000] [--backlog 50000] [--rate 1000] [--seconds 10]
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pulsar  # noqa: E402
from bench_pulsar import QUORUMS, async_send, calibration, consume_backlog, fixed_rate  # noqa: E402
from results_log import append, row  # noqa: E402

from impl.cluster.deployment import Cluster  # noqa: E402

MSG_ROWS = ("async unbatched", "async batched 1 KiB", "consume batched")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--messages", type=int, default=20_000, help="messages per publish row (20,000)")
    parser.add_argument("--backlog", type=int, default=50_000, help="backlog of the consume row (50,000)")
    parser.add_argument("--rate", type=int, default=1000, help="fixed-rate row: messages per second (1,000)")
    parser.add_argument("--seconds", type=float, default=10.0, help="fixed-rate row: seconds (10)")
    args = parser.parse_args()
    start = calibration()
    print(f"command: {' '.join(sys.argv)}\n{start}\n", flush=True)
    work = Path(tempfile.mkdtemp(prefix="bench-proxy-"))
    cluster = Cluster.plan(
        work / "cluster", bookies=3, brokers=2, proxies=1, die_with_parent=True, broker_options=QUORUMS
    )
    try:
        cluster.up()
        urls = {"direct": cluster.broker_service_url, "proxy": cluster.pulsar_service_url}
        clients = {way: pulsar.Client(str(url), operation_timeout_seconds=60) for way, url in urls.items()}
        results: dict[str, dict[str, tuple[float, ...]]] = {"direct": {}, "proxy": {}}
        try:
            # The fixed-rate rows first: a 2-second warm-up on each path (not recorded; the brokers' first
            # ledgers and lookups), then two rounds in alternation, so that neither way always runs first.
            for way in ("direct", "proxy"):
                fixed_rate(clients[way], args.rate, 2.0)
            for round_ in (1, 2):
                for way in ("direct", "proxy"):
                    results[way][f"fixed {round_}"] = fixed_rate(clients[way], args.rate, args.seconds)
            for name, size, batching in (("async unbatched", 1024, False), ("async batched 1 KiB", 1024, True)):
                for way in ("direct", "proxy"):
                    results[way][name] = (async_send(clients[way], args.messages, size, batching),)
            for way in ("direct", "proxy"):
                results[way]["consume batched"] = (consume_backlog(clients[way], args.backlog, True),)
        finally:
            for client in clients.values():
                client.close()
    finally:
        cluster.down()
        shutil.rmtree(work, ignore_errors=True)

    direct, proxy = results["direct"], results["proxy"]
    lines = [
        "### proxy against direct: 2 brokers (E2/Qw2/Qa2), 1 proxy, the official client",
        "",
        "| row | direct | through the proxy | proxy / direct | target |",
        "|---|---|---|---|---|",
    ]
    for round_ in (1, 2):
        d50, d99 = direct[f"fixed {round_}"][:2]
        p50, p99 = proxy[f"fixed {round_}"][:2]
        fixed = f"fixed {args.rate:,} msg/s, round {round_}, publish"
        lines.append(f"| {fixed} p50 ms | {d50:.2f} | {p50:.2f} | {p50 - d50:+.2f} ms | |")
        lines.append(f"| {fixed} p99 ms | {d99:.2f} | {p99:.2f} | {p99 - d99:+.2f} ms | within +2 ms |")
    for name in MSG_ROWS:
        d, p = direct[name][0], proxy[name][0]
        lines.append(f"| {name} msg/s | {d:,.0f} | {p:,.0f} | {p / d:.0%} | >= 70% |")
    end = calibration()
    lines += ["", end, ""]
    print("\n".join(lines), flush=True)
    # the record bench/dashboard.py reads: the proxied figures with the direct ones as their peer
    records = [row(f"through the proxy: {r}", proxy[r][0], "msg/s", "direct", direct[r][0]) for r in MSG_ROWS]
    p99 = f"fixed {args.rate:,} msg/s, publish p99"
    records.append(row(f"through the proxy: {p99}", proxy["fixed 2"][1], "ms", "direct", direct["fixed 2"][1]))
    append("proxy", records, calibration=f"{start} (start); {end} (end)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
