"""The `pulsar-ref` command: dispatches to one module per subcommand.

Subcommand modules are imported only when chosen, so `pulsar-ref --help` stays
fast and a broken or heavy dependency of one command (Spark, gRPC) never breaks
the others. Each module exposes `main(argv: list[str], prog: str) -> int`.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from dataclasses import dataclass

from pulsar_ref import __version__


@dataclass(frozen=True)
class Command:
    module: str
    summary: str
    issue: int


COMMANDS: dict[str, Command] = {
    "zk": Command("pulsar_ref.commands.zk", "start/stop a real ZooKeeper (standalone or 3-server ensemble)", 2),
    "metadata": Command("pulsar_ref.commands.metadata", "inspect and edit a metadata store (zk:// or embedded://)", 2),
    "spec": Command("pulsar_ref.commands.spec", "model-check the TLA+ specs with TLC", 3),
    "bookie": Command("pulsar_ref.commands.bookie", "run a bookie, or inspect a bookie's data directory", 4),
    "ledger": Command("pulsar_ref.commands.ledger", "BookKeeper client: create, write, read, recover ledgers", 5),
    "broker": Command("pulsar_ref.commands.broker", "run a broker", 6),
    "standalone": Command(
        "pulsar_ref.commands.standalone", "embedded metadata, three bookies and a broker in one process", 6
    ),
    "produce": Command("pulsar_ref.commands.produce", "publish messages to a topic", 6),
    "consume": Command("pulsar_ref.commands.consume", "consume messages from a subscription", 6),
    "admin": Command("pulsar_ref.commands.admin", "tenants, namespaces, topics and their stats (admin REST API)", 6),
    "tokens": Command("pulsar_ref.commands.tokens", "keys and tokens for token authentication", 31),
    "proxy": Command("pulsar_ref.commands.proxy", "a Pulsar proxy: one gateway in front of a cluster's brokers", 29),
    "conform": Command("pulsar_ref.commands.conform", "replay TLC behaviours against the implementation", 7),
    "cluster": Command("pulsar_ref.commands.cluster", "deploy a multi-process reference cluster and inject faults", 8),
    "instance": Command(
        "pulsar_ref.commands.instance", "several clusters sharing one configuration store (a Pulsar instance)", 30
    ),
    "workload": Command("pulsar_ref.commands.workload", "run a Jepsen-style workload and write a history", 8),
    "demo": Command("pulsar_ref.commands.demo", "the main job: cluster, workload with faults, Spark audit", 8),
    "audit": Command("pulsar_ref.commands.audit", "Spark linearizability audit of run logs (histories)", 9),
}


def _available(cmd: Command) -> bool:
    return importlib.util.find_spec(cmd.module) is not None


def _usage() -> str:
    lines = [
        f"pulsar-ref {__version__}: reference Pulsar / BookKeeper / ZooKeeper storage stack",
        "",
        "usage: pulsar-ref COMMAND [ARGS...]   (pulsar-ref COMMAND --help for details)",
        "",
        "commands:",
    ]
    for name, cmd in COMMANDS.items():
        note = "" if _available(cmd) else f"  [not built yet: issue {cmd.issue}]"
        lines.append(f"  {name:<11} {cmd.summary}{note}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-h", "--help", "help"):
        print(_usage())
        return 0
    if args[0] == "--version":
        print(__version__)
        return 0
    name = args[0]
    cmd = COMMANDS.get(name)
    if cmd is None:
        print(f"pulsar-ref: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    if not _available(cmd):
        print(
            f"pulsar-ref {name}: not built yet (tracked in issue {cmd.issue}); "
            "see `pulsar-ref --help` for the commands that work today",
            file=sys.stderr,
        )
        return 2
    module = importlib.import_module(cmd.module)
    result: int = module.main(args[1:], prog=f"pulsar-ref {name}")
    return result


if __name__ == "__main__":
    sys.exit(main())
