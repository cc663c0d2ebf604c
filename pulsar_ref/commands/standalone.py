"""`pulsar-ref standalone [--data DIR]`: embedded metadata, three bookies and a broker in one process."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from pulsar_ref.commands.broker import add_authentication_options, add_ledger_options, authenticator_of, check_quorums


def main(argv: list[str], prog: str) -> int:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Run the embedded default in one process: an embedded metadata store, bookies and one broker, "
        "all under --data (survives restarts). SIGTERM or Ctrl-C stops it.",
    )
    parser.add_argument("--data", default="var/standalone", help="data directory (default var/standalone)")
    parser.add_argument(
        "--port", type=int, default=0, help="broker's gRPC API port (default: the last one used, else any free)"
    )
    parser.add_argument(
        "--pulsar-port",
        type=int,
        default=None,
        help="port of the pulsar:// listener for Pulsar clients (default: the last one used, else 6650 when free, "
        "else any free; 0 = any free)",
    )
    parser.add_argument(
        "--web-port",
        type=int,
        default=None,
        help="port of the web service: admin REST API, HTTP lookups, /metrics, the cluster view (default: the "
        "last one used, else 8080 when free, else any free; 0 = any free)",
    )
    parser.add_argument("--bookies", type=int, default=3, help="in-process bookies (default 3)")
    add_ledger_options(parser, 2, 2, 2)
    add_authentication_options(parser)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    args = parser.parse_args(argv)
    check_quorums(parser, args)
    authenticator = authenticator_of(parser, args)
    if args.bookies < args.ensemble:
        parser.error(f"--bookies {args.bookies} is fewer than the ensemble size {args.ensemble}")
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )

    from pathlib import Path

    from impl.broker.standalone import Standalone
    from impl.metadata.store import MetadataError

    try:
        standalone = Standalone(
            Path(args.data),
            port=args.port,
            pulsar_port=args.pulsar_port,
            web_port=args.web_port,
            authenticator=authenticator,
            bookies=args.bookies,
            ensemble=args.ensemble,
            write_quorum=args.write_quorum,
            ack_quorum=args.ack_quorum,
        )
        standalone.start()
    except (MetadataError, OSError, ValueError) as e:
        print(f"error: cannot start standalone: {e}", file=sys.stderr)
        return 2
    print(
        f"standalone {standalone.service_url} listening; Pulsar clients: {standalone.pulsar_service_url}; "
        f"web service (admin, lookups, metrics, cluster view): {standalone.web_service_url}; "
        f"control 127.0.0.1:{standalone.control_port}; "
        f"bookies {', '.join(b.bookie_id for b in standalone.bookies)}; data {standalone.data_dir}",
        flush=True,
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    standalone.stop()
    print("standalone stopped", flush=True)
    return 0
