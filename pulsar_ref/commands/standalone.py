"""`pulsar-ref standalone [--data DIR]`: embedded metadata, three bookies and a broker in one process."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import signal
import sys
import threading
from pathlib import Path

from impl import shutdown
from pulsar_ref.commands.broker import (
    add_backlog_quota_option,
    add_backpressure_option,
    add_instance_options,
    add_ledger_options,
    add_max_message_size_option,
    add_offload_options,
    check_max_message_size,
    check_quorums,
    offload_settings_of,
)
from pulsar_ref.commands.security_options import add_security_options, security_of


def main(argv: list[str], prog: str) -> int:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Run the embedded default in one process: an embedded metadata store, bookies and one broker, "
        "all under --data (survives restarts). SIGTERM or Ctrl-C stops it.",
    )
    parser.add_argument("--data", default="var/standalone", help="data directory (default var/standalone)")
    parser.add_argument(
        "--port",
        "--pulsar-port",
        dest="port",
        type=int,
        default=None,
        help="port of the pulsar:// listener for Pulsar clients, Pulsar's brokerServicePort (default: the last "
        "one used, else 6650 when free, else any free; 0 = any free)",
    )
    parser.add_argument(
        "--web-port",
        type=int,
        default=None,
        help="port of the web service: admin REST API, HTTP lookups, /metrics, the cluster view (default: the "
        "last one used, else 8080 when free, else any free; 0 = any free)",
    )
    parser.add_argument(
        "--tls-port",
        type=int,
        default=None,
        help="port of the pulsar+ssl:// listener, with TLS on (default: the last one used, else 6651 when free)",
    )
    parser.add_argument(
        "--web-tls-port",
        type=int,
        default=None,
        help="port of the https:// web service, with TLS on (default: the last one used, else 8443 when free)",
    )
    parser.add_argument(
        "--bookies", type=int, default=3, help="bookies (default 3), in the process unless --bookie-processes"
    )
    parser.add_argument(
        "--bookie-processes",
        action="store_true",
        help="run each bookie in a process of its own (`pulsar-ref bookie` on the embedded store) instead of in "
        "the broker's process: more CPU and latency per message on two cores, unbatched publish about 5%% faster "
        "(docs/broker.md)",
    )
    add_ledger_options(parser, 2, 2, 2)
    parser.add_argument(
        "--secure",
        action="store_true",
        help="TLS, token authentication and authorization on, with a CA, certificate, secret key and a super-user "
        "token made under DATA/security on first start (their paths are printed)",
    )
    add_security_options(parser)
    add_instance_options(parser)
    add_backpressure_option(parser)
    add_max_message_size_option(
        parser,
        "The embedded bookies take entries of up to this plus 10240 bytes of metadata allowance "
        "(their nettyMaxFrameSizeBytes), so every message accepted can be stored.",
    )
    add_offload_options(parser, "DATA/offloaded")
    add_backlog_quota_option(parser)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    parser.add_argument(
        "--session-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="metadata session timeout of the broker and the bookies (Pulsar's zooKeeperSessionTimeoutMillis; "
        "default 10): a stall longer than this expires them, and they register again when it ends",
    )
    shutdown.add_argument(parser)
    args = parser.parse_args(argv)
    check_quorums(parser, args)
    check_max_message_size(parser, args.max_message_size)
    security = security_of(parser, args)
    offload = offload_settings_of(parser, args, str(Path(args.data).resolve() / "offloaded"))
    secure_files = None
    if args.secure:
        if security.authenticator or security.authorization or security.tls:
            parser.error("--secure sets up authentication, authorization and TLS itself: give no other security option")
        from impl.security.secure_setup import ensure_secure_files

        secure_files = ensure_secure_files(Path(args.data) / "security")
        security = dataclasses.replace(
            secure_files.security(), auth_refresh_check_s=args.authentication_refresh_check_seconds
        )
    if args.bookies < args.ensemble:
        parser.error(f"--bookies {args.bookies} is fewer than the ensemble size {args.ensemble}")
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )

    from impl.broker.standalone import Standalone
    from impl.metadata.store import MetadataError

    try:
        standalone = Standalone(
            Path(args.data),
            port=args.port,
            web_port=args.web_port,
            tls_ports=(args.tls_port, args.web_tls_port),
            security=security,
            bookies=args.bookies,
            ensemble=args.ensemble,
            write_quorum=args.write_quorum,
            ack_quorum=args.ack_quorum,
            max_entries_per_ledger=args.max_entries_per_ledger,
            cluster=args.cluster,
            configuration_store=args.configuration_store,
            session_timeout_s=args.session_timeout,
            max_message_size=args.max_message_size,
            bookie_processes=args.bookie_processes,
        )
        standalone.config.max_pending_write_bytes = args.max_pending_write_bytes
        standalone.config.managed_ledger_cache_size_mb = args.managed_ledger_cache_size_mb
        if offload is not None and offload.driver == "filesystem" and not args.offload_dir:
            Path(offload.directory).mkdir(exist_ok=True)  # the embedded default: a directory under the data
        standalone.config.offload = offload
        standalone.config.offload_deletion_lag_s = args.offload_deletion_lag_ms / 1000
        standalone.config.backlog_quota_check_interval_s = args.backlog_quota_check_interval_in_seconds
        standalone.start()
    except (MetadataError, OSError, ValueError, RuntimeError) as e:
        print(f"error: cannot start standalone: {e}", file=sys.stderr)
        return 2
    print(
        f"standalone {standalone.broker_address} listening; Pulsar clients: {standalone.pulsar_service_url}; "
        f"web service (admin, lookups, metrics, cluster view): {standalone.web_service_url}; "
        f"control http://127.0.0.1:{standalone.control_port}; "
        f"bookies {', '.join(b.bookie_id for b in standalone.bookies)}; data {standalone.data_dir}"
        + (f"; TLS: {standalone.tls_urls[0]}, {standalone.tls_urls[1]}" if standalone.tls_urls else "")
        + (
            f"; super-user token {secure_files.super_user_token.resolve()}; "
            f"trust certs {secure_files.tls.trust_certs_file.resolve()}"  # type: ignore[union-attr]
            if secure_files
            else ""
        ),
        flush=True,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    shutdown.halt_after(args.shutdown_timeout, "standalone")
    standalone.stop()
    print("standalone stopped", flush=True)
    return 0
