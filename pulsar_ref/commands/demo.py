"""`pulsar-ref demo`: the main job in one command -- a cluster, the workload with faults, the Spark audit.

Without --cluster it runs on the embedded default (`pulsar-ref standalone` as a subprocess); with
--cluster on separate processes with a real ZooKeeper; with --geo on an instance of two such clusters
that replicate to each other (docs/geo-replication.md). Everything (cluster data and logs, history,
reports) goes to a fresh run directory under --dir, kept for inspection.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from impl.cluster.deployment import Cluster, ClusterError
from impl.cluster.instance import Instance
from impl.cluster.nodes import pulsar_ref_command
from impl.workload.geo import InstanceNodes
from impl.workload.history import HistoryWriter
from impl.workload.lifecycle import COMPACTION_THRESHOLD_BYTES, OFFLOAD_THRESHOLD_BYTES, read_back
from impl.workload.nemesis import Nemesis, NemesisError
from impl.workload.run import Summary, Workload, WorkloadConfig, WorkloadError

# Taken in turn (not at random), so that a one-minute demo shows every kind.
# `stall` stops a process past its metadata session timeout: it must recover by itself (issue 49).
STANDALONE_FAULTS = ["kill-bookie", "kill-broker", "pause-standalone", "expire-session", "stall"]
CLUSTER_FAULTS = [
    "kill-bookie",
    "kill-broker",
    "pause-bookie",
    "pause-broker",
    "expire-session",
    "restart-zookeeper",
    "stall",
]
# Across clusters: a whole remote side gone or frozen, a replicating broker killed or its session ended.
GEO_FAULTS = ["kill-brokers", "kill-broker", "pause-brokers", "expire-session", "kill-bookie"]
# Pulsar's own defaults (managedLedgerDefaultEnsembleSize etc.): with 3 bookies a ledger survives one dead bookie
# by an ensemble change.
LEDGER_QUORUMS = ("--ensemble", "2", "--write-quorum", "2", "--ack-quorum", "2")
# With --lifecycle: ledgers small enough that a one-minute demo closes many per topic, and the bookie copy of an
# offloaded ledger deleted at once (so the final reads read the offloaded copies).
LIFECYCLE_ENTRIES_PER_LEDGER = 20
LIFECYCLE_OPTIONS = ("--max-entries-per-ledger", str(LIFECYCLE_ENTRIES_PER_LEDGER), "--offload-deletion-lag-ms", "0")
# --cluster's brokers share one filesystem offloader (CLUSTER/offload, as `cluster up --offload-driver
# filesystem`): a broker that takes a topic over reads the ledgers the killed one offloaded.
CLUSTER_OFFLOAD = {"driver": "filesystem"}


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Start a cluster, run the Jepsen-style workload against it for about --seconds while a nemesis "
            "kills and pauses bookies and brokers, heal, read everything back, and audit the history with "
            "Spark (`pulsar-ref audit`). Prints the verdict and the path of the HTML report. Exit status is "
            "the audit's: 0 valid, 1 anomalies, 2 unusable history (3 = the run itself failed)."
        ),
        epilog=(
            "on the embedded default (no --cluster) the bookies and the broker share one process: bookie and "
            "broker kills and the broker's session expiry happen in place through standalone's control endpoint; "
            "only the whole process can be paused. --cluster runs ZooKeeper, 3 bookies and 2 brokers as separate "
            "processes and injects every fault kind."
        ),
    )
    parser.add_argument("--cluster", action="store_true", help="multi-process cluster with real ZooKeeper")
    parser.add_argument(
        "--geo",
        action="store_true",
        help="an instance of two such clusters (each ZooKeeper, 3 bookies, 2 brokers) sharing a configuration "
        "store, replicating each other's topics; operations go to both, and the audit adds the replication "
        "anomalies (no consumers)",
    )
    parser.add_argument(
        "--proxies",
        type=int,
        default=0,
        help="with --cluster: Pulsar proxies in front of the brokers; the workload goes through them and the "
        "nemesis also kills and pauses them (default 0)",
    )
    parser.add_argument("--seconds", type=float, default=60.0, help="workload duration, roughly (default 60)")
    parser.add_argument("--dir", type=Path, default=Path("var/demo"), help="parent of the run directory (var/demo)")
    parser.add_argument("--rate", type=float, default=40.0, help="operations per second (default 40)")
    parser.add_argument("--processes", type=int, default=5, help="logical processes (default 5)")
    parser.add_argument(
        "--consumers",
        type=int,
        default=8,
        help="consumer processes on a subscription of every type of every topic, drained at the end (default 8)",
    )
    parser.add_argument("--nemesis-interval", type=float, default=5.0, help="seconds per calm/fault phase (5)")
    parser.add_argument(
        "--lifecycle",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the workload's --lifecycle: its topics in a namespace with unlimited retention and small offload and "
        "compaction thresholds, on brokers that roll their ledgers over every "
        f"{LIFECYCLE_ENTRIES_PER_LEDGER} entries and offload them to a directory (the standalone's DATA/offloaded; "
        "with --cluster one directory all brokers share, CLUSTER/offload), so the final reads read offloaded "
        "ledgers back (default: on, except with --geo, whose brokers have no offloader)",
    )
    parser.add_argument("--keep", action="store_true", help="leave the cluster running afterwards")
    parser.add_argument("--seed", type=int, help="random seed (operations and fault schedule)")
    return parser


def main(argv: list[str], prog: str) -> int:
    args = build_parser(prog).parse_args(argv)
    run_dir = (args.dir / time.strftime("run-%Y%m%d-%H%M%S")).resolve()
    run_dir.mkdir(parents=True, exist_ok=False)
    history_path, json_path, html_path = run_dir / "history.jsonl", run_dir / "audit.json", run_dir / "audit.html"
    say(f"demo run directory: {run_dir}")
    if args.proxies and not args.cluster:
        say("error: --proxies needs --cluster (the standalone has no proxy)")
        return 2
    lifecycle = args.lifecycle if args.lifecycle is not None else not args.geo
    if lifecycle and args.geo:
        say("error: --lifecycle does not go with --geo (the demo plans its brokers without an offloader)")
        return 2
    if args.geo:
        return _geo(args, run_dir, history_path, json_path, html_path)
    if args.cluster:
        cluster = plan_cluster(run_dir / "cluster", args.proxies, lifecycle)
        faults = CLUSTER_FAULTS + (["kill-proxy", "pause-proxy"] if args.proxies else [])
        proxies = f", {args.proxies} proxies in front of them" if args.proxies else ""
        say(f"cluster: 1 ZooKeeper, 3 bookies, 2 brokers{proxies}, as separate processes (ledgers E=2, Qw=2, Qa=2)")
        if lifecycle:
            say(
                f"storage lifecycle on: ledgers of {LIFECYCLE_ENTRIES_PER_LEDGER} entries, offloaded to "
                f"{(cluster.offload or {}).get('directory')} (one directory every broker shares) past "
                f"{OFFLOAD_THRESHOLD_BYTES} bytes per topic, bookie copies deleted at once; unlimited retention; "
                f"compaction past {COMPACTION_THRESHOLD_BYTES} bytes (--no-lifecycle: off)"
            )
    else:
        cluster = Cluster.plan_standalone(run_dir / "cluster", options=LIFECYCLE_OPTIONS if lifecycle else ())
        faults = STANDALONE_FAULTS
        say(
            "embedded default: `pulsar-ref standalone` (embedded metadata, 3 bookies and a broker in one process); "
            "faults: bookie and broker kills in place, broker session expiry, pause of the whole process "
            "(per-bookie pauses and ZooKeeper restarts need --cluster)"
        )
        if lifecycle:
            say(
                f"storage lifecycle on: ledgers of {LIFECYCLE_ENTRIES_PER_LEDGER} entries, offloaded to "
                f"{run_dir / 'cluster' / 'standalone-1' / 'data' / 'offloaded'} past {OFFLOAD_THRESHOLD_BYTES} bytes "
                "per topic, bookie copies deleted at once; unlimited retention; compaction past "
                f"{COMPACTION_THRESHOLD_BYTES} bytes (--no-lifecycle: off)"
            )

    def start() -> tuple[WorkloadConfig, Cluster]:
        cluster.up(progress=say)
        service, admin = cluster.pulsar_service_url or "", cluster.admin_url
        config = _config(
            args, history_path, service=service, admin_url=admin, consumers=args.consumers, lifecycle=lifecycle
        )
        return config, cluster

    summary = _run(
        args,
        history_path,
        start,
        faults,
        f", {args.consumers} consumers",
        cluster.down,
        f"cluster left running; stop it with: pulsar-ref cluster down --dir {run_dir / 'cluster'}",
    )
    if summary is None:
        return 3
    return _audit(summary, run_dir, history_path, json_path, html_path)


def plan_cluster(directory: Path, proxies: int, lifecycle: bool) -> Cluster:
    """--cluster's deployment: 1 ZooKeeper, 3 bookies, 2 brokers; with the lifecycle, the brokers roll their
    ledgers over often and share a filesystem offloader with no deletion lag (as the standalone's default)."""
    if not lifecycle:
        return Cluster.plan(directory, 1, 3, 2, broker_options=LEDGER_QUORUMS, proxies=proxies)
    return Cluster.plan(
        directory,
        1,
        3,
        2,
        broker_options=(*LEDGER_QUORUMS, *LIFECYCLE_OPTIONS),
        proxies=proxies,
        offload=CLUSTER_OFFLOAD,
    )


def _config(args: argparse.Namespace, history_path: Path, **specific: Any) -> WorkloadConfig:
    ops = max(1, int(args.seconds * args.rate))
    return WorkloadConfig(
        out=history_path, processes=args.processes, ops=ops, rate=args.rate, seed=args.seed, **specific
    )


def _run(
    args: argparse.Namespace,
    history_path: Path,
    start: Callable[[], tuple[WorkloadConfig, Cluster | InstanceNodes]],
    faults: list[str],
    who: str,
    down: Callable[[], None],
    left_running: str,
) -> Summary | None:
    """Start the deployment, run the workload with the faults, stop the deployment (unless --keep)."""
    history = HistoryWriter(history_path)
    try:
        config, target = start()
        nemesis = Nemesis(target, faults, args.nemesis_interval, history, args.seed, cycle=True)
        say(
            f"workload: {config.ops} operations at {args.rate:g}/s by {args.processes} processes{who}; "
            f"faults: {', '.join(faults)}"
        )
        return Workload(config, nemesis, history).run(say)
    except (WorkloadError, NemesisError, ClusterError) as e:
        say(f"error: the run failed: {e}\nthe history so far is in {history_path}")
        return None
    finally:
        history.close()
        if args.keep:
            say(left_running)
        else:
            say("stopping ...")
            down()


def _audit(summary: Summary, run_dir: Path, history_path: Path, json_path: Path, html_path: Path) -> int:
    """Print what the run did, audit its history with Spark, print the verdict; the audit's exit status."""
    events = [json.loads(line) for line in history_path.read_text().splitlines()]
    injected = Counter(
        ev["f"] for ev in events if ev["process"] == "nemesis" and ev["f"] != "heal" and "error" not in ev
    )
    say(
        f"workload done: {summary.events} events, ok {summary.ok}, fail {summary.fail}, info {summary.info}; "
        f"faults injected: {', '.join(f'{k} x{v}' for k, v in sorted(injected.items())) or 'none'}"
        + (f"; {summary.drained} of {summary.subscriptions} subscriptions drained" if summary.subscriptions else "")
    )
    if summary.offloaded:
        back = read_back(events)
        shown = ", ".join(f"{t.rsplit('/', 1)[-1]} {n} ledgers/{m} entries" for t, (n, m) in back.items() if n)
        offloaded = sum(n[0] for n in summary.offloaded.values() if n is not None)
        say(
            f"storage lifecycle: {offloaded} ledgers offloaded; the final reads read "
            f"{sum(m for _, m in back.values())} entries back from {sum(n for n, _ in back.values())} offloaded "
            f"ledgers ({shown or 'none'}); {len(summary.compacted)} of {len(summary.offloaded)} topics compacted"
        )
    say("auditing the history with Spark (pulsar-ref audit) ...")
    with open(run_dir / "audit.log", "w") as log:
        audit = subprocess.run(
            pulsar_ref_command("audit", str(history_path), "--json", str(json_path), "--html", str(html_path)),
            stdout=subprocess.PIPE,
            stderr=log,
            text=True,
        )
    sys.stdout.write(audit.stdout)
    verdict = {0: "VALID", 1: "INVALID (anomalies found)", 2: "UNUSABLE HISTORY"}.get(audit.returncode, "AUDIT FAILED")
    print(f"verdict: {verdict}")
    print(f"HTML report: {html_path}" if html_path.exists() else f"no HTML report; see {run_dir / 'audit.log'}")
    return audit.returncode


def _geo(args: argparse.Namespace, run_dir: Path, history_path: Path, json_path: Path, html_path: Path) -> int:
    """Two clusters replicating each other, the workload on both, faults on either side, the audit."""
    try:
        instance = Instance.plan(run_dir / "instance", clusters=2, bookies=3, brokers=2, broker_options=LEDGER_QUORUMS)
    except ClusterError as e:
        say(f"error: {e}")
        return 3
    say(
        "instance: a configuration-store ZooKeeper and 2 clusters (each 1 ZooKeeper, 3 bookies, 2 brokers, as "
        "separate processes; ledgers E=2, Qw=2, Qa=2), replicating each other's topics"
    )

    def start() -> tuple[WorkloadConfig, InstanceNodes]:
        instance.up(progress=say)
        clusters = {c.name: (c.pulsar_service_url or "", c.admin_url or "") for c in instance.clusters()}
        first = sorted(clusters)[0]
        service, admin = clusters[first]
        config = _config(args, history_path, service=service, admin_url=admin, clusters=clusters)
        return config, InstanceNodes(instance)

    summary = _run(
        args,
        history_path,
        start,
        GEO_FAULTS,
        " on cluster-1 and cluster-2",
        instance.down,
        f"instance left running; stop it with: pulsar-ref instance down --dir {run_dir / 'instance'}",
    )
    if summary is None:
        return 3
    return _audit(summary, run_dir, history_path, json_path, html_path)
