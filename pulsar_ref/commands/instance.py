"""`pulsar-ref instance`: a Pulsar instance on 127.0.0.1, several clusters sharing one configuration store.

The process management lives in impl/cluster/instance.py (over impl/cluster/deployment.py's clusters);
this module is its CLI. docs/geo-replication.md says what an instance is here.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from impl.cluster.deployment import ClusterError
from impl.cluster.instance import INSTANCE_FILE, Instance


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Run a Pulsar instance as separate processes on 127.0.0.1: one ZooKeeper as the configuration store "
            "(clusters, tenants, namespaces) and N clusters named cluster-1 .. cluster-N, each with its own "
            "ZooKeeper, bookies and brokers. State in DIR/instance.json, each part in DIR/<part>/ (a cluster's "
            "directory works with `pulsar-ref cluster status|logs|kill|... --dir DIR/cluster-1`). Replicators "
            "between the clusters are not built yet (docs/geo-replication.md)."
        ),
        epilog=(
            "examples:\n"
            "  %(prog)s up --dir var/i                  2 clusters: 2 bookies and 1 broker each\n"
            "  %(prog)s up --dir var/i --clusters 3 --brokers 2\n"
            "  %(prog)s status --dir var/i\n"
            "  %(prog)s down --dir var/i"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    up = sub.add_parser(
        "up",
        help="start the configuration store and every cluster, print each cluster's URLs",
        description=(
            "Start the configuration-store ZooKeeper, then each cluster (ZooKeeper, bookies, brokers), "
            "register each cluster's ClusterData (its brokers' http:// and pulsar:// URLs) in the "
            "configuration store, and print one line per cluster on stdout: NAME PULSAR_URL HTTP_URL. "
            "If start-up fails, everything launched is stopped."
        ),
    )
    up.add_argument("--dir", required=True, type=Path, help="an empty directory for instance.json, data and logs")
    up.add_argument("--clusters", type=int, default=2, help="clusters in the instance (default 2)")
    up.add_argument("--bookies", type=int, default=2, help="bookie processes per cluster (default 2)")
    up.add_argument("--brokers", type=int, default=1, help="broker processes per cluster (default 1)")
    up.add_argument("--proxies", type=int, default=0, help="proxy processes per cluster (default 0)")
    up.add_argument(
        "--ensemble", type=int, help="brokers' ledger ensemble size E (default: the bookies per cluster, at most 3)"
    )
    up.add_argument("--write-quorum", type=int, help="brokers' ledger write quorum Qw (default: E)")
    up.add_argument("--ack-quorum", type=int, help="brokers' ledger ack quorum Qa (default: min(E, 2))")
    up.add_argument("--timeout", type=float, default=90.0, help="seconds to wait for each part's health (default 90)")
    for name, text in (
        ("down", "stop every process of the instance (also after a failed `up`)"),
        ("status", "per part (configuration store, each cluster): its nodes and URLs; exit 1 if any node is down"),
    ):
        p = sub.add_parser(name, help=text, description=text)
        p.add_argument("--dir", required=True, type=Path, help="the directory given to `up`")
    return parser


def _quorums(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[str, ...]:
    ensemble = args.ensemble or min(args.bookies, 3)
    write_quorum = args.write_quorum or ensemble
    ack_quorum = args.ack_quorum or min(write_quorum, 2)
    if not args.bookies >= ensemble >= write_quorum >= ack_quorum >= 1:
        parser.error(
            f"need bookies ({args.bookies}) >= ensemble ({ensemble}) >= write quorum ({write_quorum}) "
            f">= ack quorum ({ack_quorum}) >= 1"
        )
    return ("--ensemble", str(ensemble), "--write-quorum", str(write_quorum), "--ack-quorum", str(ack_quorum))


def up(parser: argparse.ArgumentParser, args: argparse.Namespace) -> int:
    options = _quorums(parser, args)
    instance = Instance.plan(args.dir, args.clusters, args.bookies, args.brokers, args.proxies, broker_options=options)
    instance.up(args.timeout, _progress)
    _progress(f"instance up; state in {instance.directory / INSTANCE_FILE}")
    _progress(f"configuration store: {instance.configuration_store_url}")
    for cluster in instance.clusters():
        print(f"{cluster.name} {cluster.pulsar_service_url} {cluster.admin_url}", flush=True)
    return 0


def down(args: argparse.Namespace) -> int:
    directory: Path = args.dir.resolve()
    if not (directory / INSTANCE_FILE).exists():
        print(f"nothing to stop: no instance in {directory}", file=sys.stderr)
        return 0
    Instance.load(directory).down(_progress)
    return 0


def status(args: argparse.Namespace) -> int:
    instance = Instance.load(args.dir)
    all_up = True
    print(f"configuration store: {instance.configuration_store_url}")
    for part in instance.status():
        print(f"\n{part.name}")
        print(f"  {'NODE':<13} {'ROLE':<10} {'STATE':<12} {'PID':>8} {'PORT':>6}  DETAILS")
        for r in part.nodes:
            print(f"  {r.name:<13} {r.role:<10} {r.state:<12} {r.pid or '-':>8} {r.port:>6}  {r.details}")
            all_up = all_up and r.state == "up"
        if part.pulsar_service_url:
            print(f"  pulsar: {part.pulsar_service_url}")
        if part.web_service_urls:
            print(f"  web:    {', '.join(part.web_service_urls)}")
    return 0 if all_up else 1


def main(argv: list[str], prog: str) -> int:
    parser = build_parser(prog)
    args = parser.parse_args(argv)
    try:
        if args.action == "up":
            return up(parser, args)
        return down(args) if args.action == "down" else status(args)
    except ClusterError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
