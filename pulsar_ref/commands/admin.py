"""`pulsar-ref admin ...`: tenants, namespaces, topics and their stats, as pulsar-admin."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

# (group, verb) -> (positional argument name, extra options, whether it is about one topic's data)
VERBS: dict[tuple[str, str], tuple[str | None, list[tuple[str, type, Any]], bool]] = {
    ("tenants", "list"): (None, [], False),
    ("tenants", "create"): ("tenant", [], False),
    ("tenants", "delete"): ("tenant", [], False),
    ("namespaces", "list"): ("tenant", [], False),
    ("namespaces", "create"): ("namespace", [("--bundles", int, 4)], False),
    ("namespaces", "delete"): ("namespace", [], False),
    ("topics", "list"): ("namespace", [], False),
    ("topics", "create"): ("topic", [], True),
    ("topics", "create-partitioned"): ("topic", [("--partitions", int, None)], False),
    ("topics", "partitions"): ("topic", [], False),
    ("topics", "delete"): ("topic", [], True),
    ("topics", "unload"): ("topic", [], True),
    ("topics", "stats"): ("topic", [], True),
    ("topics", "internal-stats"): ("topic", [], True),
    ("topics", "unsubscribe"): ("topic", [("--subscription", str, None)], True),
    ("brokers", "list"): (None, [], False),
}


def main(argv: list[str], prog: str) -> int:
    parser = argparse.ArgumentParser(prog=prog, description="Administer tenants, namespaces and topics.")
    parser.add_argument(
        "--service-url",
        required=True,
        help="the brokers' admin (gRPC) URL: the grpc://HOST:PORT[,HOST:PORT...] that `standalone` prints first, "
        "or `cluster status` under admin",
    )
    groups = parser.add_subparsers(dest="group", required=True)
    group_parsers: dict[str, Any] = {}
    for (group, verb), (positional, options, _) in VERBS.items():
        if group not in group_parsers:
            group_parsers[group] = groups.add_parser(group, help=f"{group} commands").add_subparsers(
                dest="verb", required=True
            )
        sub = group_parsers[group].add_parser(verb, help=f"{group} {verb}")
        if positional:
            sub.add_argument(positional)
        for flag, kind, default in options:
            sub.add_argument(flag, type=kind, default=default, required=default is None)
    args = parser.parse_args(argv)
    positional, options, topic_data = VERBS[(args.group, args.verb)]
    call_args = {name.lstrip("-"): getattr(args, name.lstrip("-")) for name, _, _ in options}
    if positional:
        call_args[positional] = getattr(args, positional)

    from impl.broker.grpc_client import Client, ClientError

    try:
        with Client(args.service_url) as client:
            route = call_args["topic"] if topic_data else None
            result = client.admin(f"{args.group} {args.verb}", call_args, route_topic=route)
    except ClientError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if result is not None:
        print(json.dumps(result, indent=2, sort_keys=True))
    return 0
