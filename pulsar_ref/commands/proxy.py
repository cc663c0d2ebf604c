"""`pulsar-ref proxy`: a Pulsar proxy in front of a cluster's brokers."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
import threading

from impl import shutdown
from pulsar_ref.commands.security_options import add_security_options, security_of


def main(argv: list[str], prog: str) -> int:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Run a Pulsar proxy: clients connect to it only; it answers lookups from the brokers "
        "registered in the metadata store and relays each client connection to the broker that owns its "
        "topic. It keeps no state: run as many as you like, restart them at will. SIGTERM or Ctrl-C stops it.",
    )
    parser.add_argument(
        "--metadata",
        "--metadata-url",
        required=True,
        help="the cluster's metadata store URL (zk://127.0.0.1:2181/x or embedded:///dir)",
    )
    parser.add_argument("--port", type=int, default=6650, help="pulsar:// port on 127.0.0.1 (default 6650; 0 = any)")
    parser.add_argument(
        "--web-port", type=int, default=8080, help="HTTP port, passed to the brokers (default 8080; 0 = any)"
    )
    parser.add_argument(
        "--tls-port", type=int, default=0, help="pulsar+ssl:// port, with TLS on (default 0 = any free)"
    )
    parser.add_argument("--web-tls-port", type=int, default=0, help="https:// port, with TLS on (default 0 = any)")
    add_security_options(parser, authorization=False)
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    shutdown.add_argument(parser)
    args = parser.parse_args(argv)
    security = security_of(parser, args)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )

    from impl.metadata.store import MetadataError
    from impl.metadata.url import connect
    from impl.proxy.proxy import Proxy

    try:
        proxy = Proxy(
            lambda: connect(args.metadata),
            port=args.port,
            web_port=args.web_port,
            security=security,
            tls_ports=(args.tls_port, args.web_tls_port),
        )
        proxy.start()
    except (MetadataError, OSError, ValueError) as e:
        print(f"error: cannot start the proxy: {e}", file=sys.stderr)
        return 2
    address = proxy.service_url.removeprefix("pulsar://")
    tls = f"; TLS: {proxy.tls_urls[0]}, {proxy.tls_urls[1]}" if proxy.tls_urls else ""
    print(
        f"proxy {address} listening; Pulsar clients: {proxy.service_url}; web service: {proxy.web_url}{tls}", flush=True
    )
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    stop.wait()
    shutdown.halt_after(args.shutdown_timeout, "proxy")
    proxy.stop()
    print("proxy stopped", flush=True)
    return 0
