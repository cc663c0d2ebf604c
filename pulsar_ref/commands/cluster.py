"""`pulsar-ref cluster`: deploy a multi-process reference cluster on 127.0.0.1 and inject faults into it.

The process management lives in impl/cluster/ (nodes, deployment, sessions); this module is its CLI.
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

from impl.cluster.deployment import STATE_FILE, Cluster, ClusterError, InProcessNode, describe_offload

OFFLOAD_DRIVERS = ("filesystem", "aws-s3", "S3")  # `pulsar-ref broker --offload-driver`'s
DEFAULT_OFFLOAD_DELETION_LAG_MS = 4 * 3600 * 1000  # the broker's (managedLedgerOffloadDeletionLagMs)


def _progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=(
            "Run a reference cluster as separate processes on 127.0.0.1: real ZooKeeper (Debian's package), "
            "bookies and brokers. Its state (pids, ports, roles) is in DIR/cluster.json; every node's output "
            "is in DIR/<node>/ (see `logs`)."
        ),
        epilog=(
            "examples:\n"
            "  %(prog)s up --dir var/c                      1 ZooKeeper, 3 bookies, 2 brokers on free ports\n"
            "  %(prog)s up --dir var/c --zookeepers 3 --brokers 0\n"
            "  %(prog)s status --dir var/c\n"
            "  %(prog)s kill --dir var/c bookie-2           SIGKILL;  restart = kill + start, same data and port\n"
            "  %(prog)s pause --dir var/c broker-1          SIGSTOP;  resume = SIGCONT\n"
            "  %(prog)s expire-session --dir var/c broker-1 ZooKeeper ends the node's session\n"
            "  %(prog)s down --dir var/c"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    up = sub.add_parser(
        "up",
        help="start the cluster, wait until every node is healthy, print the service URL",
        description=(
            "Start ZooKeeper, then the bookies, then the brokers, and wait until all are healthy. Prints the "
            "service URL (pulsar://...) on stdout, or the metadata URL when there are no brokers. Nodes run "
            "detached until `down` (or, with --foreground, until Ctrl-C). Given the --dir of a stopped cluster, "
            "starts it again with the same ports and data. If start-up fails, everything launched is stopped."
        ),
    )
    up.add_argument("--dir", required=True, type=Path, help="directory for cluster.json, data and logs")
    up.add_argument("--zookeepers", type=int, choices=(1, 3), default=1, help="ZooKeeper servers (default 1)")
    up.add_argument("--bookies", type=int, default=3, help="bookie processes (default 3)")
    up.add_argument("--brokers", type=int, default=2, help="broker processes (default 2; 0 = metadata and bookies)")
    up.add_argument(
        "--proxies",
        type=int,
        default=0,
        help="Pulsar proxy processes in front of the brokers (default 0); with some, the printed service URL is "
        "the proxies'",
    )
    up.add_argument(
        "--secure",
        action="store_true",
        help="brokers and proxies with TLS, token authentication and authorization: a CA, certificate, secret key "
        "and a super-user token are made in DIR/security (status prints the paths)",
    )
    up.add_argument(
        "--authentication-refresh-check-seconds",
        type=float,
        metavar="S",
        help="with --secure: how often the brokers' and proxies' connections check whether a token has expired "
        "(Pulsar's authenticationRefreshCheckSeconds; default theirs, 60)",
    )
    up.add_argument("--ensemble", type=int, help="brokers' ledger ensemble size E (default: the broker's, 3)")
    up.add_argument("--write-quorum", type=int, help="brokers' ledger write quorum Qw (default: the broker's, 3)")
    up.add_argument("--ack-quorum", type=int, help="brokers' ledger ack quorum Qa (default: the broker's, 2)")
    up.add_argument(
        "--max-entries-per-ledger",
        type=int,
        metavar="N",
        help="brokers roll a topic's ledger over after N entries (default: the broker's, 50000); small N makes "
        "many closed ledgers, for offload and trimming",
    )
    up.add_argument(
        "--max-message-size",
        type=int,
        metavar="BYTES",
        help="brokers' maxMessageSize (default: the broker's, 5 MiB); the bookies' --netty-max-frame-size-bytes "
        "is set to it plus 10240 bytes of metadata allowance, so every message accepted can be stored",
    )
    _add_offload_options(up)
    up.add_argument(
        "--name",
        default="standalone",
        help="the cluster's name in its Pulsar instance (default standalone, as a one-cluster instance's)",
    )
    up.add_argument(
        "--configuration-store",
        metavar="URL",
        help="join the Pulsar instance whose configuration store (clusters, tenants, namespaces) is at URL, e.g. "
        "zk://127.0.0.1:2184/pulsar-ref-configuration; the cluster registers its URLs there as --name "
        "(default: the cluster's own ZooKeeper, a one-cluster instance)",
    )
    up.add_argument(
        "--standalone", action="store_true", help="instead: one `pulsar-ref standalone` process (embedded metadata)"
    )
    up.add_argument(
        "--base-port",
        type=int,
        default=0,
        help="first port: ZooKeeper, then bookies, then brokers on consecutive ports (default 0 = free ports)",
    )
    up.add_argument(
        "--trace-dir",
        type=Path,
        help="every bookie and broker appends its protocol events to TRACE_DIR/<node>.trace.jsonl, for "
        "`pulsar-ref conform --check-cluster-traces TRACE_DIR` (slower; off by default)",
    )
    up.add_argument("--timeout", type=float, default=90.0, help="seconds to wait for health (default 90)")
    up.add_argument(
        "--foreground", action="store_true", help="stay attached; Ctrl-C (or SIGTERM) stops the cluster and exits"
    )

    for name, text in (
        ("down", "stop every process of the cluster (also after a failed `up`)"),
        (
            "status",
            "per node: role, state, pid, port, id (a bookie's bookie id, as ledger ensembles name it), "
            "bundles (brokers) or ledgers (bookies); exit 1 if any is down",
        ),
    ):
        p = sub.add_parser(name, help=text, description=text)
        p.add_argument("--dir", required=True, type=Path, help="the directory given to `up`")

    logs = sub.add_parser("logs", help="print a node's log (use --lines 0 for all of it)")
    logs.add_argument("--dir", required=True, type=Path, help="the directory given to `up`")
    logs.add_argument("node", help="node name, e.g. zk-1, bookie-2, broker-1 (see `status`)")
    logs.add_argument("--lines", type=int, default=50, help="last N lines (default 50, 0 = all)")

    verbs = {
        "kill": "SIGKILL the node (a crash); bring it back with `restart`",
        "pause": "SIGSTOP the node; `resume` sends SIGCONT",
        "resume": "SIGCONT a paused node",
        "restart": "kill -9 the node (if running), then start it with the same data directory and port",
        "expire-session": "make ZooKeeper end the node's metadata session (bookies and brokers; see --help)",
    }
    for verb, text in verbs.items():
        description = text
        if verb == "expire-session":
            description = (
                "Force the node's ZooKeeper session to expire, as a long GC pause would: the session is found "
                "through the node's registration znode (its ephemeralOwner), then a second client attaches to "
                "that session and closes it, so ZooKeeper ends it and deletes its ephemerals. The node itself "
                "keeps running and learns of the expiry on its next contact."
            )
        p = sub.add_parser(verb, help=text, description=description)
        p.add_argument("--dir", required=True, type=Path, help="the directory given to `up`")
        p.add_argument("node", help="node name, e.g. zk-1, bookie-2, broker-1 (see `status`)")
    return parser


def _add_offload_options(up: argparse.ArgumentParser) -> None:
    """`pulsar-ref broker`'s tiered-storage options, passed to every broker (Pulsar's managedLedgerOffload*)."""
    group = up.add_argument_group(
        "tiered storage, the same for every broker (docs/storage-lifecycle.md; default: no offloader)"
    )
    group.add_argument(
        "--offload-driver",
        choices=OFFLOAD_DRIVERS,
        help="Pulsar's managedLedgerOffloadDriver: filesystem (one directory all brokers share, so any broker "
        "reads what another offloaded; default DIR/offload) or aws-s3 / S3 (a bucket on any S3 endpoint; the "
        "brokers take credentials from the environment, AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY). "
        "Default: filesystem if --offload-dir is given, aws-s3 if --s3-offload-bucket is, else no offloader",
    )
    group.add_argument(
        "--offload-dir", metavar="PATH", help="the filesystem offloader's directory, shared by the brokers (must exist)"
    )
    group.add_argument("--s3-offload-bucket", metavar="BUCKET", help="s3ManagedLedgerOffloadBucket (must exist)")
    group.add_argument(
        "--s3-offload-endpoint", metavar="URL", help="s3ManagedLedgerOffloadServiceEndpoint (default AWS)"
    )
    group.add_argument("--s3-offload-region", metavar="REGION", help="s3ManagedLedgerOffloadRegion")
    group.add_argument(
        "--offload-deletion-lag-ms",
        type=int,
        metavar="MS",
        help="Pulsar's managedLedgerOffloadDeletionLagMs: how long an offloaded ledger's bookie copy stays "
        f"(default: the broker's, {DEFAULT_OFFLOAD_DELETION_LAG_MS}, 4 hours; 0: deleted at once)",
    )


OFFLOAD_OPTIONS = (
    "offload_driver",
    "offload_dir",
    "s3_offload_bucket",
    "s3_offload_endpoint",
    "s3_offload_region",
    "offload_deletion_lag_ms",
)


def _option(dest: str) -> str:
    return "--" + dest.replace("_", "-")


class Refused(Exception):
    """A bad combination of `up`'s options (exit 2); the message says which."""


def offload_of(args: argparse.Namespace) -> dict[str, object] | None:
    """The brokers' offloader the options name (Cluster.plan's `offload`), None for none; Refused if they
    do not make one. With --standalone only checked (its default is a filesystem offloader in DATA/offloaded)."""
    given = [_option(o) for o in OFFLOAD_OPTIONS if getattr(args, o) is not None]
    if not given:
        return None
    if args.brokers == 0 and not args.standalone:
        raise Refused(f"{', '.join(given)}: a cluster without brokers has no offloader")
    default = "filesystem" if args.offload_dir or args.standalone else ""
    driver = args.offload_driver or ("aws-s3" if args.s3_offload_bucket else default)
    if not driver:
        raise Refused(f"{', '.join(given)} needs an offloader: give --offload-driver (or --offload-dir)")
    lag = args.offload_deletion_lag_ms
    if lag is not None and lag < 0:
        raise Refused("--offload-deletion-lag-ms must be >= 0")
    s3 = [_option(o) for o in OFFLOAD_OPTIONS if o.startswith("s3_") and getattr(args, o) is not None]
    if driver == "filesystem":
        if s3:
            raise Refused(f"{', '.join(s3)} with the filesystem offloader: give --offload-driver aws-s3")
        offload: dict[str, object] = {"driver": "filesystem"}
        if args.offload_dir is not None:
            directory = Path(args.offload_dir).resolve()
            if not directory.is_dir():
                raise Refused(f"--offload-dir {args.offload_dir}: no such directory (the brokers need it to exist)")
            offload["directory"] = str(directory)
    else:
        if args.offload_dir is not None:
            raise Refused(f"--offload-dir with --offload-driver {driver}: the S3 offloader writes to a bucket")
        if not args.s3_offload_bucket:
            raise Refused(f"--offload-driver {driver} needs --s3-offload-bucket")
        offload = {"driver": driver, "bucket": args.s3_offload_bucket}
        offload |= {"endpoint": args.s3_offload_endpoint or "", "region": args.s3_offload_region or ""}
    if lag is not None:
        offload["deletion_lag_ms"] = lag
    return offload


def _standalone_options(args: argparse.Namespace) -> list[str]:
    """The ledger and tiered-storage options of `up --standalone`, passed as they are (the standalone's own
    default offloader is DATA/offloaded)."""
    options = []
    for dest in ("max_entries_per_ledger", "max_message_size", *OFFLOAD_OPTIONS):
        value = getattr(args, dest)
        if value is not None:
            options += [_option(dest), str(Path(value).resolve() if dest == "offload_dir" else value)]
    return options


def up(args: argparse.Namespace) -> int:
    directory: Path = args.dir.resolve()
    if args.max_entries_per_ledger is not None and args.max_entries_per_ledger < 1:
        print("error: --max-entries-per-ledger must be >= 1", file=sys.stderr)
        return 2
    try:
        offload = offload_of(args)
    except Refused as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.secure and args.standalone:
        print("error: for a secure standalone run `pulsar-ref standalone --secure`", file=sys.stderr)
        return 2
    refresh = args.authentication_refresh_check_seconds
    if refresh is not None and (not args.secure or refresh <= 0):
        why = "must be > 0" if args.secure else "needs --secure (without it no token is checked)"
        print(f"error: --authentication-refresh-check-seconds {why}", file=sys.stderr)
        return 2
    if args.max_message_size is not None:
        from impl.broker.service import size_settings_error

        error = size_settings_error(args.max_message_size)
        if error:
            print(f"error: --max-message-size: {error}", file=sys.stderr)
            return 2
    if (directory / STATE_FILE).exists():
        cluster = Cluster.load(directory)
        running = [n.name for n in cluster.nodes() if n.pid() is not None]
        if running:
            print(
                f"error: the cluster in {directory} is already running ({', '.join(running)}); "
                f"see `pulsar-ref cluster status --dir {args.dir}`",
                file=sys.stderr,
            )
            return 1
        cluster.die_with_parent = args.foreground
        _progress(f"starting the stopped cluster in {directory} again (same ports and data)")
        changed = [_option(o) for o in ("max_entries_per_ledger", *OFFLOAD_OPTIONS) if getattr(args, o) is not None]
        if changed:
            _progress(f"note: {', '.join(changed)} ignored: the stopped cluster keeps the settings it was made with")
    elif args.standalone:
        cluster = Cluster.plan_standalone(
            directory, args.base_port, die_with_parent=args.foreground, options=_standalone_options(args)
        )
    else:
        broker_options: list[str] = []
        bookie_options: list[str] = []
        for option in ("ensemble", "write_quorum", "ack_quorum", "max_entries_per_ledger", "max_message_size"):
            if getattr(args, option) is not None:
                broker_options += [f"--{option.replace('_', '-')}", str(getattr(args, option))]
        if args.max_message_size is not None:
            from impl.broker.service import bookie_frame_for

            bookie_options += ["--netty-max-frame-size-bytes", str(bookie_frame_for(args.max_message_size))]
        cluster = Cluster.plan(
            directory,
            args.zookeepers,
            args.bookies,
            args.brokers,
            args.base_port,
            die_with_parent=args.foreground,
            broker_options=tuple(broker_options),
            bookie_options=tuple(bookie_options),
            trace_dir=args.trace_dir,
            proxies=args.proxies,
            secure=args.secure,
            name=args.name,
            configuration_store=args.configuration_store,
            auth_refresh_check_s=refresh,
            offload=offload,
        )
    cluster.up(args.timeout, _progress)
    _progress(f"cluster up; state in {directory / STATE_FILE}; metadata {cluster.metadata_url}")
    if cluster.configuration_store_url != cluster.metadata_url:
        _progress(
            f"cluster {cluster.name} of the instance whose configuration store is {cluster.configuration_store_url}"
        )
    if cluster.pulsar_service_url:
        through = " (through the proxies)" if cluster.pulsar_service_url != cluster.broker_service_url else ""
        _progress(f"Pulsar clients: {cluster.pulsar_service_url}{through}")
    if cluster.web_service_urls:
        _progress(f"web service (admin REST API, cluster view): {', '.join(cluster.web_service_urls)}")
    if cluster.security:
        _progress(_security_line(cluster.security))
    if cluster.offload:
        _progress(f"tiered storage: {describe_offload(cluster.offload)}")
    print(cluster.pulsar_service_url or cluster.metadata_url, flush=True)
    if not args.foreground:
        return 0
    stop = [False]

    def on_signal(*_: object) -> None:
        stop[0] = True

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    _progress("running in the foreground; Ctrl-C stops the cluster")
    while not stop[0]:
        time.sleep(0.2)
    cluster.down(_progress)
    return 0


def _security_line(security: dict[str, str]) -> str:
    return (
        f"TLS {security['pulsar_service_tls']} (trust {security['trust_certs_file']}); super-user token "
        f"{security['super_user_token']}; every client needs a token"
    )


def down(args: argparse.Namespace) -> int:
    directory: Path = args.dir.resolve()
    if not (directory / STATE_FILE).exists():
        print(f"nothing to stop: no cluster in {directory}", file=sys.stderr)
        return 0
    Cluster.load(directory).down(_progress)
    return 0


def status(args: argparse.Namespace) -> int:
    cluster = Cluster.load(args.dir)
    rows = cluster.status()
    print(f"{'NODE':<13} {'ROLE':<10} {'STATE':<12} {'PID':>8} {'PORT':>6}  {'ID':<16}  DETAILS")
    for r in rows:
        print(f"{r.name:<13} {r.role:<10} {r.state:<12} {r.pid or '-':>8} {r.port:>6}  {r.node_id:<16}  {r.details}")
    print(f"metadata: {cluster.metadata_url}")
    print(f"pulsar:   {cluster.pulsar_service_url or '(no brokers)'}")
    if cluster.pulsar_service_url != cluster.broker_service_url:
        print(f"brokers:  {cluster.broker_service_url}")
    print(f"web:      {', '.join(cluster.web_service_urls) or '(no brokers)'}")
    if cluster.security:
        print(f"secure:   {_security_line(cluster.security)}")
    if cluster.topology == "cluster" and cluster.web_service_urls:
        print(f"offload:  {describe_offload(cluster.offload)}")
    return 0 if all(r.state == "up" for r in rows) else 1


def logs(args: argparse.Namespace) -> int:
    node = Cluster.load(args.dir).node(args.node)
    try:
        text = node.log_file.read_text(errors="replace")
    except OSError:
        print(f"{args.node} has written no log yet ({node.log_file})", file=sys.stderr)
        return 1
    lines = text.splitlines(keepends=True)
    sys.stdout.write("".join(lines[-args.lines :] if args.lines > 0 else lines))
    return 0


def verb(args: argparse.Namespace) -> int:
    cluster = Cluster.load(args.dir)
    name = args.node
    node = cluster.node(name)
    if isinstance(node, InProcessNode) and args.action in ("kill", "expire-session"):
        # A bookie or the broker inside standalone: the verb acts in place, no process is signalled.
        if args.action == "kill":
            cluster.kill(name)
            print(f"{name}: stopped without a clean shutdown, inside {node.host.name} (pid {node.host.pid()})")
        else:
            cluster.expire_session(name)
            print(f"{name}: metadata session expired, inside {node.host.name}")
        return 0
    if args.action == "kill":
        print(f"{name}: killed pid {cluster.kill(name)} (SIGKILL)")
    elif args.action == "pause":
        print(f"{name}: paused pid {cluster.pause(name)} (SIGSTOP)")
    elif args.action == "resume":
        print(f"{name}: resumed pid {cluster.resume(name)} (SIGCONT)")
    elif args.action == "restart":
        cluster.restart(name)
        print(f"{name}: restarted, pid {cluster.node(name).pid()}")
    else:
        session = cluster.expire_session(name)
        print(f"{name}: ZooKeeper session 0x{session:x} expired")
    return 0


def main(argv: list[str], prog: str) -> int:
    args = build_parser(prog).parse_args(argv)
    actions = {"up": up, "down": down, "status": status, "logs": logs}
    try:
        return actions.get(args.action, verb)(args)
    except ClusterError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
