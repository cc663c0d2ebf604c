"""`pulsar-ref zk`: start, stop and inspect real ZooKeeper servers (Debian's package, run with java).

Everything lives under --dir D: one subdirectory per server (D/zk-1, D/zk-2, ...) holding its
zoo.cfg, data, transaction log, log files and pidfile. Servers bind to 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from impl.metadata.zkserver import (
    ZooKeeperEnsemble,
    ZooKeeperError,
    servers_in,
)

DEFAULT_PORT = 2181


def build_parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Run real ZooKeeper servers from Debian's zookeeper package, bound to 127.0.0.1.",
        epilog=(
            "examples:\n"
            "  %(prog)s start --dir var/zk                 standalone on 127.0.0.1:2181\n"
            "  %(prog)s start --dir var/zk3 --port 0 --ensemble 3   three-server quorum on free ports\n"
            "  %(prog)s status --dir var/zk\n"
            "  %(prog)s stop --dir var/zk\n"
            "Then use the printed connect string, e.g. pulsar-ref metadata --url zk://127.0.0.1:2181 ls /"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="action", required=True, metavar="ACTION")

    start = sub.add_parser(
        "start",
        help="start servers in the background, wait until they serve, print the connect string",
        description=(
            "Start ZooKeeper in the background and wait until it serves (for an ensemble: until all servers "
            "joined one quorum). Prints the connect string. Starting again in the same --dir reuses its "
            "data and ports. If start-up fails, everything it launched is stopped."
        ),
    )
    start.add_argument("--dir", required=True, type=Path, help="directory for config, data, logs and pidfiles")
    start.add_argument(
        "--port",
        type=int,
        default=None,
        help=f"client port of the first server (others use the next ones); 0 = free ports chosen by the OS "
        f"(default: the ports already set up in --dir, else {DEFAULT_PORT})",
    )
    start.add_argument(
        "--ensemble", type=int, choices=(1, 3), default=None, help="1 = standalone (default), 3 = quorum"
    )
    start.add_argument("--timeout", type=float, default=90.0, help="seconds to wait for health (default 90)")

    stop = sub.add_parser("stop", help="stop every server started in --dir (SIGTERM, then SIGKILL)")
    stop.add_argument("--dir", required=True, type=Path, help="the directory given to `start`")

    status = sub.add_parser("status", help="show each server's pid, port and mode; exit 1 if any is down")
    status.add_argument("--dir", required=True, type=Path, help="the directory given to `start`")
    return parser


def start(args: argparse.Namespace) -> int:
    directory: Path = args.dir.resolve()
    existing = servers_in(directory) if directory.is_dir() else []
    running = [s for s in existing if s.pid() is not None]
    if running:
        pids = ", ".join(str(s.pid()) for s in running)
        print(
            f"error: ZooKeeper already running from {directory} (pids {pids}); "
            f"stop it first: pulsar-ref zk stop --dir {args.dir}",
            file=sys.stderr,
        )
        return 1
    reuse = existing and args.port is None and args.ensemble in (None, len(existing))
    if reuse:
        ensemble = ZooKeeperEnsemble.in_directory(directory)
    else:
        if existing:
            print(f"error: {directory} already holds a ZooKeeper set-up; use another --dir", file=sys.stderr)
            return 1
        port = DEFAULT_PORT if args.port is None else args.port
        size = args.ensemble or 1
        ensemble = ZooKeeperEnsemble(directory, size, port)
    print(f"starting {len(ensemble.servers)} ZooKeeper server(s) in {directory} ...", file=sys.stderr, flush=True)
    try:
        ensemble.start(args.timeout)
    except ZooKeeperError as e:
        ensemble.stop()
        print(f"error: {e}\nstopped everything that was launched; logs are in {directory}/zk-*/", file=sys.stderr)
        return 1
    for server in ensemble.servers:
        print(f"  zk-{server.server_id}: pid {server.pid()} {server.connect_string} {server.mode()}", file=sys.stderr)
    print(ensemble.connect_string)
    return 0


def stop(args: argparse.Namespace) -> int:
    directory: Path = args.dir.resolve()
    servers = servers_in(directory) if directory.is_dir() else []
    if not servers:
        print(f"nothing to stop: no ZooKeeper set up in {directory}", file=sys.stderr)
        return 0
    for server in servers:
        pid = server.pid()
        server.stop()
        state = f"stopped pid {pid}" if pid is not None else "was not running"
        print(f"zk-{server.server_id} ({server.connect_string}): {state}", file=sys.stderr)
    return 0


def status(args: argparse.Namespace) -> int:
    directory: Path = args.dir.resolve()
    servers = servers_in(directory) if directory.is_dir() else []
    if not servers:
        print(f"no ZooKeeper set up in {directory}; start one with: pulsar-ref zk start --dir {args.dir}")
        return 1
    healthy = True
    for server in servers:
        pid = server.pid()
        mode = server.mode() if pid is not None else None
        healthy = healthy and mode is not None
        shown = "not running" if pid is None else f"pid {pid}, {mode or 'not serving'}"
        print(f"zk-{server.server_id}  {server.connect_string}  {shown}")
    print("connect string: " + ",".join(s.connect_string for s in servers))
    return 0 if healthy else 1


def main(argv: list[str], prog: str) -> int:
    args = build_parser(prog).parse_args(argv)
    try:
        return {"start": start, "stop": stop, "status": status}[args.action](args)
    except ZooKeeperError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
