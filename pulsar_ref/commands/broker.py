"""`pulsar-ref broker --metadata URL [--port P] [--web-port W]`: run one broker until SIGTERM.

The broker is known (registration, ownership nodes, lookups) by its web service's address,
127.0.0.1:W, as Pulsar knows a broker by its advertised address and web service port."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading
from typing import TYPE_CHECKING, Any

from impl import shutdown
from pulsar_ref.commands.security_options import add_security_options, security_of

if TYPE_CHECKING:
    from impl.trace import Tracer


def add_ledger_options(parser: argparse.ArgumentParser, ensemble: int, write_quorum: int, ack_quorum: int) -> None:
    parser.add_argument("--ensemble", type=int, default=ensemble, help=f"bookies per ledger, E (default {ensemble})")
    parser.add_argument("--write-quorum", type=int, default=write_quorum, help=f"Qw (default {write_quorum})")
    parser.add_argument("--ack-quorum", type=int, default=ack_quorum, help=f"Qa (default {ack_quorum})")
    parser.add_argument(
        "--max-entries-per-ledger",
        type=int,
        default=50_000,
        help="roll the topic's ledger over after this many entries (default 50000)",
    )
    parser.add_argument(
        "--managed-ledger-cache-size-mb",
        type=_cache_size,
        default=64.0,
        help="Pulsar's managedLedgerCacheSizeMB: one bound for the entry caches of all the broker's topics "
        "(default 64; 0: no cache, every read goes to the bookies)",
    )


def _cache_size(text: str) -> float:
    try:
        size = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a size in MB, not {text!r}") from None
    if not size >= 0:
        raise argparse.ArgumentTypeError(f"the cache size must be >= 0 MB, got {text}")
    return size


DEFAULT_MAX_PENDING_WRITE_BYTES = 2 * 1024 * 1024  # BrokerConfig's default (not imported: the CLI starts light)


def add_backpressure_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--max-pending-write-bytes",
        type=int,
        default=DEFAULT_MAX_PENDING_WRITE_BYTES,
        metavar="BYTES",
        help="backpressure towards consumers: bytes queued for writing on one client connection past which its "
        f"consumers are given nothing more until it drains (default {DEFAULT_MAX_PENDING_WRITE_BYTES}, 2 MiB; "
        "0 = no bound; docs/security.md)",
    )


DEFAULT_BACKLOG_QUOTA_CHECK_INTERVAL_S = 60  # BrokerConfig's default, Pulsar's


def _positive_seconds(text: str) -> int:
    try:
        seconds = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"a whole number of seconds, not {text!r}") from None
    if seconds < 1:
        raise argparse.ArgumentTypeError(f"the interval must be >= 1 second, got {text}")
    return seconds


def add_backlog_quota_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--backlog-quota-check-interval-in-seconds",
        type=_positive_seconds,
        default=DEFAULT_BACKLOG_QUOTA_CHECK_INTERVAL_S,
        metavar="SECONDS",
        help="Pulsar's backlogQuotaCheckIntervalInSeconds: how often each topic's backlog is held against its "
        "namespace's backlogQuota; over it, producer_request_hold and producer_exception disconnect the "
        "producers already attached, consumer_backlog_eviction skips the oldest messages "
        f"(default {DEFAULT_BACKLOG_QUOTA_CHECK_INTERVAL_S}; docs/storage-lifecycle.md)",
    )


DEFAULT_OFFLOAD_DELETION_LAG_MS = 4 * 3600 * 1000  # Pulsar's managedLedgerOffloadDeletionLagMs


def add_offload_options(parser: argparse.ArgumentParser, default_directory: str) -> None:
    """Tiered storage: the offloader (Pulsar's managedLedgerOffloadDriver and its options) and the deletion lag."""
    group = parser.add_argument_group("tiered storage (docs/storage-lifecycle.md)")
    group.add_argument(
        "--offload-driver",
        choices=("filesystem", "aws-s3", "S3"),
        default=None,
        help="Pulsar's managedLedgerOffloadDriver: filesystem (a directory) or aws-s3 / S3 (any S3 endpoint; "
        "credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY). Default: filesystem "
        + (f"in {default_directory}" if default_directory else "if --offload-dir is given, else no offloader"),
    )
    group.add_argument("--offload-dir", metavar="DIR", help="the filesystem offloader's directory (must exist)")
    group.add_argument("--s3-offload-bucket", metavar="BUCKET", help="s3ManagedLedgerOffloadBucket (must exist)")
    group.add_argument(
        "--s3-offload-endpoint", metavar="URL", default="", help="s3ManagedLedgerOffloadServiceEndpoint (default AWS)"
    )
    group.add_argument("--s3-offload-region", metavar="REGION", default="", help="s3ManagedLedgerOffloadRegion")
    group.add_argument(
        "--offload-deletion-lag-ms",
        type=int,
        default=DEFAULT_OFFLOAD_DELETION_LAG_MS,
        metavar="MS",
        help="Pulsar's managedLedgerOffloadDeletionLagMs: how long an offloaded ledger's bookie copy stays "
        f"(default {DEFAULT_OFFLOAD_DELETION_LAG_MS}, 4 hours)",
    )


def offload_settings_of(parser: argparse.ArgumentParser, args: argparse.Namespace, default_directory: str) -> Any:
    """The OffloadSettings the options name (None: no offloader)."""
    from impl.broker.offload.registry import OffloadSettings

    if args.offload_deletion_lag_ms < 0:
        parser.error("--offload-deletion-lag-ms must be >= 0")
    driver = args.offload_driver
    if driver is None:
        driver = "aws-s3" if args.s3_offload_bucket else "filesystem"
    if driver == "filesystem":
        directory = args.offload_dir or default_directory
        if not directory:
            return None
        return OffloadSettings("filesystem", directory=directory)
    if not args.s3_offload_bucket:
        parser.error(f"--offload-driver {driver} needs --s3-offload-bucket")
    return OffloadSettings(
        driver, bucket=args.s3_offload_bucket, endpoint=args.s3_offload_endpoint, region=args.s3_offload_region
    )


def _cluster_name(name: str) -> str:
    from impl.metadata.naming import InvalidNamespaceName, check_named_entity

    try:
        return check_named_entity("cluster", name)
    except InvalidNamespaceName as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def add_instance_options(parser: argparse.ArgumentParser) -> None:
    """--cluster and --configuration-store: the cluster this broker serves, in which Pulsar instance."""
    parser.add_argument(
        "--cluster",
        type=_cluster_name,
        default="standalone",
        help="the name of this broker's cluster, registered in the configuration store with the broker's URLs "
        "if the instance does not know it yet (default standalone)",
    )
    parser.add_argument(
        "--configuration-store",
        metavar="URL",
        help="the instance's configuration store (clusters, tenants, namespaces and their policies): a metadata "
        "store URL such as zk://127.0.0.1:2184/config, possibly the same ZooKeeper under another root "
        "(default: this broker's own metadata store, a one-cluster instance)",
    )


DEFAULT_MAX_MESSAGE_SIZE = 5 * 1024 * 1024  # BrokerConfig's, Pulsar's maxMessageSize (not imported: light CLI)


def add_max_message_size_option(parser: argparse.ArgumentParser, bookies: str) -> None:
    parser.add_argument(
        "--max-message-size",
        type=int,
        default=DEFAULT_MAX_MESSAGE_SIZE,
        metavar="BYTES",
        help="Pulsar's maxMessageSize: the largest message payload, advertised to clients in CONNECTED and "
        f"checked on SEND; producers with chunking on send larger ones in chunks of this size (default "
        f"{DEFAULT_MAX_MESSAGE_SIZE}, 5 MiB). {bookies}",
    )


def check_max_message_size(parser: argparse.ArgumentParser, max_message_size: int) -> None:
    """Exit 2 (parser.error) if no bookie can store the entries of messages this large."""
    from impl.broker.service import size_settings_error

    error = size_settings_error(max_message_size)
    if error:
        parser.error(error)


def check_quorums(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    if not args.ensemble >= args.write_quorum >= args.ack_quorum >= 1:
        parser.error("need ensemble >= write quorum >= ack quorum >= 1")


def main(argv: list[str], prog: str) -> int:
    parser = argparse.ArgumentParser(prog=prog, description="Run one broker (SIGTERM or Ctrl-C stops it gracefully).")
    parser.add_argument(
        "--metadata", required=True, help="metadata store URL (zk://127.0.0.1:2181/x or embedded:///dir)"
    )
    parser.add_argument(
        "--port",
        "--pulsar-port",
        dest="port",
        type=int,
        default=0,
        help="port of the pulsar:// listener (Pulsar's binary protocol, brokerServicePort) on 127.0.0.1 "
        "(default 0 = any free port)",
    )
    parser.add_argument(
        "--web-port",
        type=int,
        default=0,
        help="port of the web service (admin REST API, HTTP lookups, /metrics, the cluster view) on 127.0.0.1; "
        "127.0.0.1:PORT is also the broker's identity (default 0 = any free port)",
    )
    parser.add_argument(
        "--tls-port", type=int, default=0, help="port of the pulsar+ssl:// listener, with TLS on (default 0 = any free)"
    )
    parser.add_argument(
        "--web-tls-port",
        type=int,
        default=0,
        help="port of the https:// web service, with TLS on (default 0 = any free)",
    )
    add_ledger_options(parser, 3, 3, 2)
    add_security_options(parser)
    add_instance_options(parser)
    add_backpressure_option(parser)
    add_max_message_size_option(
        parser,
        "Its bookies' frame limit (pulsar-ref bookie --netty-max-frame-size-bytes) must be at least this plus "
        "10240 bytes of metadata allowance: the broker refuses to start (exit 2) over a registered bookie with "
        "less, and leaves bookies that register later with less out of new ledgers.",
    )
    add_offload_options(parser, "")
    add_backlog_quota_option(parser)
    parser.add_argument(
        "--session-timeout", type=float, default=10.0, help="metadata session timeout in seconds (default 10)"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    parser.add_argument(
        "--trace",
        metavar="FILE",
        help="append the protocol events of the broker's BookKeeper client cores (impl/trace.py: each ledger "
        "created, add sent and answered, ensemble change, close, recovery step) to FILE as JSON lines, for "
        "trace validation (conformance/cluster_traces.py); slower, off by default",
    )
    shutdown.add_argument(parser)
    args = parser.parse_args(argv)
    check_quorums(parser, args)
    check_max_message_size(parser, args.max_message_size)
    args.security = security_of(parser, args)
    args.offload = offload_settings_of(parser, args, "")
    if not args.trace:
        return _run(args)
    from impl.trace import TraceFile

    recorder = TraceFile(args.trace, role="broker")
    try:
        return _run(args, recorder)
    finally:
        recorder.close()


def _run(args: argparse.Namespace, tracer: Tracer | None = None) -> int:
    """`tracer`: the recorder of the broker's BookKeeper client (its writers and recovery ops), if traced."""
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )

    from impl.broker.broker import Broker
    from impl.broker.errors import BookieFrameTooSmall
    from impl.broker.managed_ledger import ManagedLedgerConfig
    from impl.broker.service import BrokerConfig
    from impl.metadata.store import MetadataError
    from impl.metadata.url import connect

    config = BrokerConfig(
        managed_ledger=ManagedLedgerConfig(
            ensemble=args.ensemble,
            write_quorum=args.write_quorum,
            ack_quorum=args.ack_quorum,
            max_entries_per_ledger=args.max_entries_per_ledger,
        ),
        security=args.security,
        max_message_size=args.max_message_size,
        max_pending_write_bytes=args.max_pending_write_bytes,
        managed_ledger_cache_size_mb=args.managed_ledger_cache_size_mb,
        offload=args.offload,
        offload_deletion_lag_s=args.offload_deletion_lag_ms / 1000,
        backlog_quota_check_interval_s=args.backlog_quota_check_interval_in_seconds,
    )
    try:
        broker = Broker(
            lambda: connect(args.metadata, session_timeout_s=args.session_timeout),
            config,
            pulsar_port=args.port,
            web_port=args.web_port,
            tls_ports=(args.tls_port, args.web_tls_port),
            cluster=args.cluster,
            connect_configuration_store=(
                None  # the metadata store itself: one session for both
                if args.configuration_store in (None, args.metadata)
                else lambda: connect(args.configuration_store, session_timeout_s=args.session_timeout)
            ),
            tracer=tracer,
        )
        broker.start()
    except (MetadataError, OSError, BookieFrameTooSmall) as e:
        print(f"error: cannot start the broker: {e}", file=sys.stderr)
        return 2
    tls = f"; TLS: {broker.service_url_tls}, {broker.web_url_tls}" if broker.service_url_tls else ""
    print(
        f"broker {broker.address} listening; Pulsar clients: {broker.service_url}; web service: {broker.web_url}{tls}",
        flush=True,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    shutdown.halt_after(args.shutdown_timeout, "broker")
    broker.stop()
    print("broker stopped", flush=True)
    return 0
