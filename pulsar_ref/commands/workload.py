"""`pulsar-ref workload`: the Jepsen-style workload; writes a history for `pulsar-ref audit`.

The workload itself lives in impl/workload/ (history writer, operations, nemesis, run).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from impl.cluster.deployment import Cluster, ClusterError
from impl.cluster.instance import Instance
from impl.workload.geo import InstanceNodes
from impl.workload.history import HistoryWriter
from impl.workload.lifecycle import (
    COMPACTION_THRESHOLD_BYTES,
    MESSAGE_TTL_S,
    OFFLOAD_THRESHOLD_BYTES,
    describe_compactions,
)
from impl.workload.nemesis import DEFAULT_STALL_S, FAULTS, Nemesis, NemesisError
from impl.workload.non_persistent import DOMAINS, PERSISTENT
from impl.workload.operations import Credentials
from impl.workload.run import Summary, Workload, WorkloadConfig, WorkloadError
from impl.workload.schemas import SCHEMA_KINDS


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(
            'Run P logical processes that append unique values ("<process>-<n>") and read (full scans and '
            "tail reads, some with a limit) on N topics plus the partitions of one partitioned topic, while "
            "an optional nemesis injects faults into a `pulsar-ref cluster`. Every invoke and completion is "
            "written to the history (docs/history.md). At the end all faults are healed and one final "
            "read per topic reads everything. Audit the result with: pulsar-ref audit HISTORY"
        ),
        epilog=(
            "examples:\n"
            "  %(prog)s --service pulsar://127.0.0.1:6650 --out var/h.jsonl\n"
            "  %(prog)s --service $(pulsar-ref cluster up --dir var/c) --cluster-dir var/c \\\n"
            "      --nemesis kill-bookie,kill-broker,pause-broker --nemesis-interval 5 --ops 2000 --out var/h.jsonl\n"
            "  %(prog)s --instance-dir var/i --nemesis kill-brokers,kill-broker,expire-session --out var/geo.jsonl\n"
            f"fault kinds: {', '.join(FAULTS)}"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--service",
        help="the brokers' Pulsar service URL, e.g. pulsar://127.0.0.1:6650[,127.0.0.1:6651] "
        "(default: the pulsar:// URL of --cluster-dir)",
    )
    parser.add_argument(
        "--client",
        choices=("project", "official"),
        default="project",
        help="which client appends and reads: the project's own (default) or Apache Pulsar's official one "
        "(pulsar-client), which can judge any Pulsar service; with --cluster-dir it uses the cluster's "
        "pulsar:// URL",
    )
    parser.add_argument(
        "--admin-url",
        help="the brokers' admin REST API, http://HOST:PORT[,HOST:PORT...], that creates the partitioned topic "
        "(any Pulsar service's; default: the web services of --cluster-dir); without one, use --partitions 0",
    )
    parser.add_argument(
        "--schema",
        choices=SCHEMA_KINDS,
        default="none",
        help="typed producers, readers and consumers with a JSON or Avro schema (needs --client official and an "
        "admin URL); halfway through the ops the schema evolves (a new field with a default), and the registry's "
        "versions are recorded at the end (default none: plain bytes)",
    )
    parser.add_argument(
        "--lifecycle",
        action="store_true",
        help="put the topics in a namespace of their own, public/lifecycle-<run>, with unlimited retention, "
        f"offloadThreshold {OFFLOAD_THRESHOLD_BYTES} bytes, compactionThreshold {COMPACTION_THRESHOLD_BYTES} "
        f"bytes and messageTTL {MESSAGE_TTL_S} s (each drain records it, the audit counts what expired), so "
        "ledgers are offloaded and topics compacted while the nemesis acts and the final reads go "
        "through the offloaded ledgers; appends are keyed, and at the end each topic is compacted and read "
        "with read_compacted, which the audit judges (needs an admin URL and brokers with an offloader, e.g. "
        "`pulsar-ref standalone --max-entries-per-ledger 20`; docs/storage-lifecycle.md, Under faults); the "
        "summary prints each topic's offloaded ledgers",
    )
    parser.add_argument("--out", required=True, type=Path, help="history file to write (JSON Lines)")
    parser.add_argument("--topics", type=int, default=3, help="plain (non-partitioned) topics (default 3)")
    parser.add_argument(
        "--partitions", type=int, default=2, help="partitions of the one partitioned topic (default 2; 0 = none)"
    )
    parser.add_argument("--processes", type=int, default=5, help="concurrent logical processes (default 5)")
    parser.add_argument("--ops", type=int, default=1000, help="operations to invoke, final reads excluded (1000)")
    parser.add_argument("--rate", type=float, default=50.0, help="invocations per second, all processes (50; 0 = max)")
    parser.add_argument("--read-fraction", type=float, default=0.4, help="share of reads among operations (0.4)")
    parser.add_argument(
        "--consumers",
        type=int,
        default=0,
        help="consumer processes on a subscription of every type (Exclusive, Failover, Shared, Key_Shared) of every "
        "topic; they run while the appenders do, and every subscription drains at the end (default 0: none)",
    )
    parser.add_argument(
        "--domain",
        choices=DOMAINS,
        default=PERSISTENT,
        help="the topics' domain: persistent (default), non-persistent (appended to and consumed live, never read "
        "or drained; the audit counts their loss, docs/history.md), or mixed (even plain topics persistent, odd "
        "ones and the partitioned topic non-persistent)",
    )
    parser.add_argument(
        "--nemesis",
        default="",
        help=f"comma-separated fault kinds to inject (needs --cluster-dir): {', '.join(FAULTS)}",
    )
    parser.add_argument(
        "--nemesis-interval",
        type=float,
        default=5.0,
        help="seconds of calm before each fault and seconds each fault lasts (default 5)",
    )
    parser.add_argument(
        "--nemesis-order",
        choices=("random", "cycle"),
        default="random",
        help="pick each fault at random (default) or take the kinds in turn",
    )
    parser.add_argument("--nemesis-max", type=int, default=0, help="inject at most this many faults (0 = no limit)")
    parser.add_argument(
        "--stall-seconds",
        type=float,
        default=DEFAULT_STALL_S,
        metavar="S",
        help=f"how long the `stall` fault keeps a process stopped (default {DEFAULT_STALL_S:g}: past the "
        "10 s metadata session timeout, so its sessions expire)",
    )
    parser.add_argument("--cluster-dir", type=Path, help="the --dir of `pulsar-ref cluster up` (for the nemesis)")
    parser.add_argument(
        "--instance-dir",
        type=Path,
        help="the --dir of `pulsar-ref instance up`: every operation goes to one of its clusters (recorded as "
        "its `cluster`), on topics of a namespace replicated to all of them; the nemesis acts on every "
        "cluster (nodes <cluster>/<node>, and <cluster>/brokers for kill-brokers and pause-brokers); the "
        "final reads wait for replication and read every topic in every cluster (docs/geo-replication.md)",
    )
    parser.add_argument(
        "--replication-dedup",
        choices=("on", "off"),
        default="on",
        help="with --instance-dir: de-duplication of the replicated namespace (on: exactly-once replication; "
        "off: at-least-once, so replication-duplicate may be found)",
    )
    parser.add_argument(
        "--deduplication",
        choices=("on", "off"),
        default="on",
        help="one cluster: topic-level de-duplication of the persistent topics, set through the admin API "
        "(on: a producer's resend after a fault is not stored twice; off: as the namespace has it, Pulsar's "
        "default off, so duplicate-value may be found)",
    )
    parser.add_argument(
        "--final-read-timeout",
        type=float,
        default=120.0,
        help="seconds the final reads may keep failing before the run is declared unrecovered (120)",
    )
    parser.add_argument("--seed", type=int, help="random seed for operation choice and fault schedule")
    parser.add_argument("--token", help="a token for brokers with authentication (default: a secure cluster's)")
    parser.add_argument("--token-file", type=Path, help="a file holding the token")
    parser.add_argument(
        "--tls-trust-certs-file",
        help="CAs to trust for a pulsar+ssl:// service (official client; default: a secure cluster's CA)",
    )
    return parser


def main(argv: list[str], prog: str) -> int:
    args = build_parser(prog).parse_args(argv)
    faults = [f.strip() for f in args.nemesis.split(",") if f.strip()]
    if args.topics < 0 or args.partitions < 0 or args.topics + args.partitions == 0:
        print("error: need at least one topic: --topics N and/or --partitions M", file=sys.stderr)
        return 2
    if args.processes < 1 or args.ops < 0 or args.consumers < 0:
        print("error: --processes must be >= 1, --ops and --consumers >= 0", file=sys.stderr)
        return 2
    if args.schema != "none" and args.client != "official":
        print(
            f"error: --schema {args.schema} uses the official client's schema classes: add --client official",
            file=sys.stderr,
        )
        return 2
    if args.instance_dir is not None:
        if args.lifecycle:
            print("error: --lifecycle runs on one cluster; drop --instance-dir", file=sys.stderr)
            return 2
        return _geo(args, faults)
    try:
        cluster = Cluster.load(args.cluster_dir) if args.cluster_dir else None
    except ClusterError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if faults and cluster is None:
        print("error: --nemesis needs --cluster-dir (the cluster whose nodes it may kill)", file=sys.stderr)
        return 2
    token, trust = cluster.credentials() if cluster else (None, None)
    try:
        token = args.token or (args.token_file.read_text().strip() if args.token_file else None) or token
    except OSError as e:
        print(f"error: cannot read the token file: {e}", file=sys.stderr)
        return 2
    trust = args.tls_trust_certs_file or trust
    cluster_service = cluster.pulsar_service_url if cluster else None
    if cluster and cluster.security and args.client == "official":
        cluster_service = cluster.security["pulsar_service_tls"]  # a secure cluster: over TLS
    service = args.service or cluster_service
    if service and service.startswith("pulsar+ssl://") and args.client != "official":
        print("error: the project's client speaks plain pulsar:// only; use --client official", file=sys.stderr)
        return 2
    if not service:
        print("error: give --service pulsar://HOST:PORT (or --cluster-dir of a cluster with brokers)", file=sys.stderr)
        return 2
    admin_url = args.admin_url or (cluster.admin_url if cluster else None)
    if args.partitions > 0 and not admin_url:
        print(
            "error: the partitioned topic is created through the brokers' admin REST API: give "
            "--admin-url or --cluster-dir, or run with --partitions 0",
            file=sys.stderr,
        )
        return 2
    if args.schema != "none" and not admin_url:
        print(
            "error: the schema registry's versions are read through the brokers' admin REST API: give "
            "--admin-url or --cluster-dir, or run with --schema none",
            file=sys.stderr,
        )
        return 2
    if args.lifecycle and not admin_url:
        print(
            "error: --lifecycle sets the namespace's policies and reads the topics' ledgers through the brokers' "
            "admin REST API: give --admin-url or --cluster-dir",
            file=sys.stderr,
        )
        return 2
    if args.consumers > 0 and not admin_url:
        print(
            "error: draining the subscriptions asks the brokers' admin REST API for their backlog: give "
            "--admin-url or --cluster-dir, or run with --consumers 0",
            file=sys.stderr,
        )
        return 2
    config = _config(
        args,
        service=service,
        admin_url=admin_url,
        credentials=Credentials(token, trust),
        consumers=args.consumers,
    )
    where = f"via {service} ({args.client} client); {config.consumers} consumers"
    return _run(args, config, cluster, faults, where)


def _config(args: argparse.Namespace, **specific: Any) -> WorkloadConfig:
    """The run's configuration: the command's common options, and what the deployment decides."""
    return WorkloadConfig(
        out=args.out,
        topics=args.topics,
        partitions=args.partitions,
        processes=args.processes,
        ops=args.ops,
        rate=args.rate,
        read_fraction=args.read_fraction,
        seed=args.seed,
        final_read_timeout_s=args.final_read_timeout,
        client=args.client,
        domain=args.domain,
        schema=args.schema,
        lifecycle=args.lifecycle,
        deduplication=args.deduplication == "on",
        **specific,
    )


def _run(
    args: argparse.Namespace,
    config: WorkloadConfig,
    target: Cluster | InstanceNodes | None,
    faults: list[str],
    where: str,
) -> int:
    """Run the workload (with a nemesis on `target` when there are faults), print the summary."""
    history = HistoryWriter(args.out)
    try:
        nemesis = None
        if target is not None and faults:
            nemesis = Nemesis(
                target,
                faults,
                args.nemesis_interval,
                history,
                args.seed,
                cycle=args.nemesis_order == "cycle",
                max_faults=args.nemesis_max,
                stall_s=args.stall_seconds,
            )
        _progress(
            f"workload {config.run_id}: {config.processes} processes, {config.ops} ops at {config.rate or 'max'}/s "
            f"on {len(config.log_topics())} topic logs {where}; nemesis: {', '.join(faults) or 'none'}"
        )
        summary = Workload(config, nemesis, history).run(_progress)
    except (WorkloadError, NemesisError) as e:
        print(f"error: {e}\nthe history so far is in {args.out}", file=sys.stderr)
        return 1
    finally:
        history.close()
    return _finish(summary)


def _finish(summary: Summary) -> int:
    """Print the run's summary; 1 when something was left broken."""
    print(
        f"history {summary.history}: {summary.events} events; ok {summary.ok}, fail {summary.fail}, "
        f"info {summary.info}; {summary.faults} faults injected"
    )
    if summary.schema_versions:
        print("schema versions: " + ", ".join(f"{t} {v}" for t, v in summary.schema_versions.items()))
    if summary.subscriptions:
        print(f"{summary.drained} of {summary.subscriptions} subscriptions drained")
    if summary.live_subscriptions:
        counted = f"; the broker reports {sum(summary.dropped.values())} dropped" if summary.dropped else ""
        print(f"{summary.live_subscriptions} non-persistent subscriptions consumed live{counted}")
    if summary.offloaded:
        shown = ", ".join(
            f"{t.rsplit('/', 1)[-1]} {'?' if n is None else f'{n[0]} of {n[1]}'}" for t, n in summary.offloaded.items()
        )
        total = sum(n[0] for n in summary.offloaded.values() if n is not None)
        print(f"ledgers offloaded: {total} (per topic, of those listed: {shown})")
        print(f"topics compacted: {len(summary.compacted)} of {len(summary.offloaded)}")
    if summary.compacted_under_faults:
        # Under a fault a compaction may fail or time out: reported, no error of the run.
        ended = summary.compacted_under_faults
        others = describe_compactions({t: e for t, e in ended.items() if e != "SUCCESS"})
        done = sum(e == "SUCCESS" for e in ended.values())
        print(f"compactions on demand under faults: {done} of {len(ended)} SUCCESS" + (others and f" ({others})"))
    if summary.unhealed:
        print(f"warning: not healed: {', '.join(summary.unhealed)}", file=sys.stderr)
        return 1
    if summary.drained < summary.subscriptions:
        print("warning: some subscriptions did not drain; lost-message cannot be judged on them", file=sys.stderr)
        return 1
    return 0


def _geo(args: argparse.Namespace, faults: list[str]) -> int:
    """The workload across the clusters of an instance."""
    if args.cluster_dir or args.service or args.admin_url:
        print(
            "error: --instance-dir names the services itself; drop --cluster-dir, --service, --admin-url",
            file=sys.stderr,
        )
        return 2
    if args.consumers:
        print("error: consumers do not run across clusters yet; use --consumers 0 with --instance-dir", file=sys.stderr)
        return 2
    if args.domain != PERSISTENT:
        print("error: non-persistent topics are not replicated (as Pulsar); use --domain persistent", file=sys.stderr)
        return 2
    try:
        instance = Instance.load(args.instance_dir)
        clusters = {c.name: (c.pulsar_service_url, c.admin_url) for c in instance.clusters()}
    except ClusterError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    usable = {name: (p, a) for name, (p, a) in clusters.items() if p and a}
    if len(usable) < 2:
        print(
            f"error: {args.instance_dir} has {len(usable)} cluster(s) with brokers; replication needs 2",
            file=sys.stderr,
        )
        return 2
    first = sorted(usable)[0]
    config = _config(
        args,
        service=str(usable[first][0]),
        admin_url=usable[first][1],
        clusters={name: (str(p), str(a)) for name, (p, a) in usable.items()},
        geo_deduplication=args.replication_dedup == "on",
    )
    where = f"in each of {', '.join(sorted(usable))} ({args.client} client)"
    return _run(args, config, InstanceNodes(instance), faults, where)
