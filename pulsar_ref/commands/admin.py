"""`pulsar-ref admin ...`: tenants, namespaces, topics, brokers and bookies through the brokers'
admin REST API v2, as `pulsar-admin` (so it administers any Pulsar service too)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_ADMIN_URL = "http://127.0.0.1:8080"


@dataclass(frozen=True)
class Verb:
    method: str
    path: str  # {tenant}, {namespace} (tenant/ns), {topic} (its admin path), {cluster}, {subscription}, ...
    positional: str | None = None  # tenant | namespace | topic | cluster
    options: tuple[tuple[str, type, Any, str], ...] = ()  # (flag, type, default (None = required), help)
    body: Callable[[argparse.Namespace], Any] | None = None
    aliases: tuple[str, ...] = ()
    help: str = ""
    raw: bool = False  # the answer is text, not JSON
    message: bool = False  # the answer is a message: X-Pulsar-* headers and its payload


_SUB = ("--subscription", str, None, "subscription name")
_ROLE = ("--role", str, None, "the role (a token's subject)")
_ACTIONS = ("--actions", str, None, "comma-separated actions: produce, consume (Pulsar's AuthAction names)")


def _actions(args: argparse.Namespace) -> list[str]:
    return [a.strip() for a in args.actions.split(",") if a.strip()]


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


# pulsar-admin's flags for ClusterData (serviceUrl, serviceUrlTls, brokerServiceUrl, brokerServiceUrlTls)
_CLUSTER_URLS = (
    ("--url", str, "", "the cluster's web service, http://host:port"),
    ("--url-secure", str, "", "its https:// web service, if any"),
    ("--broker-url", str, "", "its brokers' Pulsar service, pulsar://host:port"),
    ("--broker-url-secure", str, "", "its pulsar+ssl:// service, if any"),
)


def _cluster_data(a: argparse.Namespace) -> dict[str, str]:
    return {
        "serviceUrl": a.url,
        "serviceUrlTls": a.url_secure,
        "brokerServiceUrl": a.broker_url,
        "brokerServiceUrlTls": a.broker_url_secure,
    }


_SCHEMA_FILE = ("--filename", str, None, 'a JSON file: {"type": "AVRO", "schema": "<definition>", "properties": {}}')


def _message_id(a: argparse.Namespace) -> dict[str, int]:
    """--message-id earliest | latest | LEDGER:ENTRY as the body of PUT subscription (Pulsar's MessageId)."""
    text = a.message_id.strip().lower()
    if text == "latest":
        return {"ledgerId": 2**63 - 1, "entryId": 2**63 - 1}  # Pulsar's MessageId.latest
    if text == "earliest":
        return {"ledgerId": -1, "entryId": -1}
    ledger, sep, entry = text.partition(":")
    try:
        return {"ledgerId": int(ledger), "entryId": int(entry.split(":")[0])}
    except ValueError:
        raise SystemExit(
            f"error: --message-id must be earliest, latest or LEDGER:ENTRY, not {a.message_id!r}"
        ) from None


def _delayed_delivery(a: argparse.Namespace) -> dict[str, Any]:
    return {"active": not a.disable, "tickTime": a.time}


def _schema_file(a: argparse.Namespace) -> Any:
    try:
        return json.loads(Path(a.filename).read_text())
    except ValueError as e:
        raise OSError(f"{a.filename} is not JSON: {e}") from None


def _tenant_info(a: argparse.Namespace) -> dict[str, list[str]]:
    return {"adminRoles": _names(a.admin_roles)} | (
        {"allowedClusters": _names(a.allowed_clusters)} if a.allowed_clusters else {}
    )


VERBS: dict[str, dict[str, Verb]] = {
    "clusters": {
        "list": Verb("GET", "/admin/v2/clusters", help="the clusters"),
        "get": Verb("GET", "/admin/v2/clusters/{cluster}", "cluster", help="a cluster's service URLs"),
        "create": Verb(
            "PUT",
            "/admin/v2/clusters/{cluster}",
            "cluster",
            options=_CLUSTER_URLS,
            body=_cluster_data,
            help="add a cluster to the instance (--url and/or --broker-url)",
        ),
        "update": Verb(
            "POST",
            "/admin/v2/clusters/{cluster}",
            "cluster",
            options=_CLUSTER_URLS,
            body=_cluster_data,
            help="replace a cluster's service URLs",
        ),
        "delete": Verb(
            "DELETE",
            "/admin/v2/clusters/{cluster}",
            "cluster",
            help="remove a cluster no tenant allows and no namespace replicates to",
        ),
    },
    "tenants": {
        "list": Verb("GET", "/admin/v2/tenants", help="the tenants"),
        "get": Verb("GET", "/admin/v2/tenants/{tenant}", "tenant", help="a tenant's admin roles and clusters"),
        "create": Verb(
            "PUT",
            "/admin/v2/tenants/{tenant}",
            "tenant",
            options=(
                ("--allowed-clusters", str, "", "comma-separated clusters (default: this one)"),
                ("--admin-roles", str, "", "comma-separated roles that administer the tenant"),
            ),
            body=_tenant_info,
            help="create a tenant",
        ),
        "update": Verb(
            "POST",
            "/admin/v2/tenants/{tenant}",
            "tenant",
            options=(
                ("--allowed-clusters", str, None, "comma-separated clusters the tenant may use"),
                ("--admin-roles", str, "", "comma-separated roles that administer the tenant"),
            ),
            body=_tenant_info,
            help="replace a tenant's admin roles and allowed clusters",
        ),
        "delete": Verb("DELETE", "/admin/v2/tenants/{tenant}", "tenant", help="delete a tenant without namespaces"),
    },
    "namespaces": {
        "list": Verb("GET", "/admin/v2/namespaces/{tenant}", "tenant", help="a tenant's namespaces"),
        "create": Verb(
            "PUT",
            "/admin/v2/namespaces/{namespace}",
            "namespace",
            options=(("--bundles", int, 4, "number of bundles (default 4)"),),
            body=lambda a: {"bundles": {"numBundles": a.bundles}},
            help="create a namespace (tenant/namespace)",
        ),
        "delete": Verb("DELETE", "/admin/v2/namespaces/{namespace}", "namespace", help="delete an empty namespace"),
        "policies": Verb("GET", "/admin/v2/namespaces/{namespace}", "namespace", help="a namespace's policies"),
        "topics": Verb("GET", "/admin/v2/namespaces/{namespace}/topics", "namespace", help="a namespace's topics"),
        "get-deduplication": Verb("GET", "/admin/v2/namespaces/{namespace}/deduplication", "namespace"),
        "set-deduplication": Verb(
            "POST",
            "/admin/v2/namespaces/{namespace}/deduplication",
            "namespace",
            options=(("--enable", bool, False, "turn it on (the default)"), ("--disable", bool, False, "turn it off")),
            body=lambda a: not a.disable,
            help="de-duplicate producers in the namespace (applies as its topics load)",
        ),
        "get-delayed-delivery": Verb(
            "GET",
            "/admin/v2/namespaces/{namespace}/delayedDelivery",
            "namespace",
            help="the namespace's delayed-delivery policy (nothing: the broker's, on with a 1 s tick)",
        ),
        "set-delayed-delivery": Verb(
            "POST",
            "/admin/v2/namespaces/{namespace}/delayedDelivery",
            "namespace",
            options=(
                ("--enable", bool, False, "honour deliver_after / deliver_at on Shared and Key_Shared (the default)"),
                ("--disable", bool, False, "deliver delayed messages at once"),
                ("--time", int, 1000, "the tick, in milliseconds: how late a delayed message may be at most"),
            ),
            body=_delayed_delivery,
            help="delayed delivery for the namespace's topics (applies as its topics load)",
        ),
        "remove-delayed-delivery": Verb(
            "DELETE",
            "/admin/v2/namespaces/{namespace}/delayedDelivery",
            "namespace",
            help="back to the broker's delayed-delivery setting",
        ),
        "get-clusters": Verb(
            "GET",
            "/admin/v2/namespaces/{namespace}/replication",
            "namespace",
            help="a namespace's replication clusters",
        ),
        "set-clusters": Verb(
            "POST",
            "/admin/v2/namespaces/{namespace}/replication",
            "namespace",
            options=(("--clusters", str, None, "comma-separated clusters, each allowed by the tenant"),),
            body=lambda a: _names(a.clusters),
            help="set the clusters a namespace is replicated to",
        ),
        "get-retention": Verb("GET", "/admin/v2/namespaces/{namespace}/retention", "namespace"),
        "set-retention": Verb(
            "POST",
            "/admin/v2/namespaces/{namespace}/retention",
            "namespace",
            options=(
                ("--time", int, 0, "minutes to keep acknowledged data (-1 = for ever)"),
                ("--size", int, 0, "megabytes to keep (-1 = no limit)"),
            ),
            body=lambda a: {"retentionTimeInMinutes": a.time, "retentionSizeInMB": a.size},
        ),
        "get-message-ttl": Verb("GET", "/admin/v2/namespaces/{namespace}/messageTTL", "namespace"),
        "set-message-ttl": Verb(
            "POST",
            "/admin/v2/namespaces/{namespace}/messageTTL",
            "namespace",
            options=(("--ttl", int, None, "seconds after which unacknowledged messages expire (0 = never)"),),
            body=lambda a: a.ttl,
            help="expire messages older than the TTL from every subscription",
        ),
        "remove-message-ttl": Verb("DELETE", "/admin/v2/namespaces/{namespace}/messageTTL", "namespace"),
        "get-offload-threshold": Verb("GET", "/admin/v2/namespaces/{namespace}/offloadThreshold", "namespace"),
        "set-offload-threshold": Verb(
            "PUT",
            "/admin/v2/namespaces/{namespace}/offloadThreshold",
            "namespace",
            options=(
                ("--size", int, None, "bytes kept on the bookies before older ledgers are offloaded (-1 = never)"),
            ),
            body=lambda a: a.size,
            help="offload topics' oldest ledgers to tiered storage past a size (offloadThresholdInBytes)",
        ),
        "get-compaction-threshold": Verb("GET", "/admin/v2/namespaces/{namespace}/compactionThreshold", "namespace"),
        "set-compaction-threshold": Verb(
            "PUT",
            "/admin/v2/namespaces/{namespace}/compactionThreshold",
            "namespace",
            options=(
                ("--threshold", int, None, "bytes after the compaction horizon that start a compaction (0 = never)"),
            ),
            body=lambda a: a.threshold,
            help="compact topics automatically past a backlog size",
        ),
        "remove-compaction-threshold": Verb(
            "DELETE", "/admin/v2/namespaces/{namespace}/compactionThreshold", "namespace"
        ),
        "get-auto-topic-creation": Verb("GET", "/admin/v2/namespaces/{namespace}/autoTopicCreation", "namespace"),
        "set-auto-topic-creation": Verb(
            "POST",
            "/admin/v2/namespaces/{namespace}/autoTopicCreation",
            "namespace",
            options=(
                ("--enable", bool, False, "topics are created by using them (the default)"),
                ("--disable", bool, False, "they are not: producers and consumers get TopicNotFound"),
                ("--type", str, "non-partitioned", "non-partitioned or partitioned"),
                ("--num-partitions", int, 0, "partitions of an auto-created partitioned topic"),
            ),
            body=lambda a: {
                "allowAutoTopicCreation": not a.disable,
                "topicType": a.type,
                **({"defaultNumPartitions": a.num_partitions} if a.num_partitions else {}),
            },
            help="override the broker's auto topic creation in the namespace",
        ),
        "remove-auto-topic-creation": Verb("DELETE", "/admin/v2/namespaces/{namespace}/autoTopicCreation", "namespace"),
        "get-backlog-quotas": Verb("GET", "/admin/v2/namespaces/{namespace}/backlogQuotaMap", "namespace"),
        "set-backlog-quota": Verb(
            "POST",
            "/admin/v2/namespaces/{namespace}/backlogQuota",
            "namespace",
            options=(
                ("--limit-size", int, None, "bytes a subscription's backlog may hold (-1 = unlimited)"),
                ("--limit-time", int, -1, "seconds since the oldest unacknowledged message (-1 = unlimited)"),
                ("--policy", str, None, "producer_request_hold, producer_exception or consumer_backlog_eviction"),
            ),
            body=lambda a: {"limitSize": a.limit_size, "limitTime": a.limit_time, "policy": a.policy},
            help="set the namespace's backlog quota (destination_storage)",
        ),
        "remove-backlog-quota": Verb("DELETE", "/admin/v2/namespaces/{namespace}/backlogQuota", "namespace"),
        "permissions": Verb(
            "GET", "/admin/v2/namespaces/{namespace}/permissions", "namespace", help="roles and their actions"
        ),
        "grant-permission": Verb(
            "POST",
            "/admin/v2/namespaces/{namespace}/permissions/{role}",
            "namespace",
            options=(_ROLE, _ACTIONS),
            body=_actions,
            help="let a role produce and/or consume on every topic of the namespace",
        ),
        "revoke-permission": Verb(
            "DELETE",
            "/admin/v2/namespaces/{namespace}/permissions/{role}",
            "namespace",
            options=(_ROLE,),
            help="take a role's namespace permissions away",
        ),
    },
    "topics": {
        "list": Verb("GET", "/admin/v2/persistent/{namespace}", "namespace", help="a namespace's topics"),
        "create": Verb("PUT", "{topic}", "topic", help="create a non-partitioned topic"),
        "delete": Verb(
            "DELETE",
            "{topic}",
            "topic",
            options=(("--force", bool, False, "close its producers and consumers first"),),
            help="delete a topic and its data",
        ),
        "create-partitioned": Verb(
            "PUT",
            "{topic}/partitions",
            "topic",
            options=(("--partitions", int, None, "number of partitions"),),
            body=lambda a: a.partitions,
            aliases=("create-partitioned-topic",),
            help="create a partitioned topic",
        ),
        "partitions": Verb(
            "GET",
            "{topic}/partitions",
            "topic",
            aliases=("get-partitioned-topic-metadata",),
            help="a topic's partition count (0: not partitioned)",
        ),
        "delete-partitioned": Verb(
            "DELETE",
            "{topic}/partitions",
            "topic",
            aliases=("delete-partitioned-topic",),
            help="delete every partition",
        ),
        "stats": Verb("GET", "{topic}/stats", "topic", help="rates, counters, publishers, subscriptions"),
        "internal-stats": Verb(
            "GET", "{topic}/internalStats", "topic", aliases=("stats-internal",), help="its ledgers and cursors"
        ),
        "partitioned-stats": Verb("GET", "{topic}/partitioned-stats", "topic", help="stats summed over partitions"),
        "unload": Verb("PUT", "{topic}/unload", "topic", help="close it on its broker (the next lookup reloads it)"),
        "compact": Verb("PUT", "{topic}/compaction", "topic", help="start a compaction (latest message per key)"),
        "compaction-status": Verb("GET", "{topic}/compaction", "topic", help="the last compaction's status"),
        "offload": Verb(
            "PUT",
            "{topic}/offload",
            "topic",
            options=(
                (
                    "--message-id",
                    str,
                    "latest",
                    "offload the closed ledgers before the one holding LEDGER:ENTRY (default latest: every closed one)",
                ),
            ),
            body=_message_id,
            help="offload closed ledgers to tiered storage, in the background",
        ),
        "offload-status": Verb("GET", "{topic}/offload", "topic", help="the last offload's status"),
        "subscriptions": Verb("GET", "{topic}/subscriptions", "topic", help="its subscriptions"),
        "unsubscribe": Verb(
            "DELETE", "{topic}/subscription/{subscription}", "topic", options=(_SUB,), help="delete a subscription"
        ),
        "reset-cursor": Verb(
            "POST",
            "{topic}/subscription/{subscription}/resetcursor/{time}",
            "topic",
            options=(_SUB, ("--time", int, None, "milliseconds since the epoch")),
            help="move a subscription to the first message published at or after a time",
        ),
        "expire-messages": Verb(
            "POST",
            "{topic}/subscription/{subscription}/expireMessages/{expire_time}",
            "topic",
            options=(_SUB, ("--expire-time", int, None, "seconds: messages published earlier are acknowledged")),
            help="expire a subscription's messages older than a number of seconds",
        ),
        "expire-messages-all-subscriptions": Verb(
            "POST",
            "{topic}/all_subscription/expireMessages/{expire_time}",
            "topic",
            options=(("--expire-time", int, None, "seconds: messages published earlier are acknowledged"),),
            help="expire every subscription's messages older than a number of seconds",
        ),
        "create-subscription": Verb(
            "PUT",
            "{topic}/subscription/{subscription}",
            "topic",
            options=(
                _SUB,
                ("--message-id", str, "latest", "where it starts: latest (the default), earliest or LEDGER:ENTRY"),
            ),
            body=_message_id,
            help="create a durable subscription without a consumer (409 if it exists)",
        ),
        "skip": Verb(
            "POST",
            "{topic}/subscription/{subscription}/skip/{count}",
            "topic",
            options=(_SUB, ("--count", int, None, "how many messages to skip (entries: a batch counts once)")),
            help="acknowledge a subscription's next messages without delivering them",
        ),
        "skip-all": Verb(
            "POST",
            "{topic}/subscription/{subscription}/skip_all",
            "topic",
            options=(_SUB,),
            aliases=("clear-backlog",),
            help="acknowledge everything a subscription has not consumed yet",
        ),
        "examine-message": Verb(
            "GET",
            "{topic}/examinemessage?initialPosition={initial_position}&messagePosition={message_position}",
            "topic",
            options=(
                ("--initial-position", str, "latest", "count from the first (earliest) or the last (latest) message"),
                ("--message-position", int, 1, "which one: 1 is the first or the last"),
            ),
            message=True,
            help="show one message of the topic: its X-Pulsar-* metadata headers, then its payload",
        ),
        "terminate": Verb(
            "POST",
            "{topic}/terminate",
            "topic",
            help="no more messages: producers are refused (TopicTerminatedError); prints the last message id",
        ),
        "get-deduplication": Verb(
            "GET",
            "{topic}/deduplicationEnabled",
            "topic",
            help="the topic's own de-duplication setting (null: none, its namespace's applies)",
        ),
        "set-deduplication": Verb(
            "POST",
            "{topic}/deduplicationEnabled",
            "topic",
            options=(("--enable", bool, False, "turn it on (the default)"), ("--disable", bool, False, "turn it off")),
            body=lambda a: not a.disable,
            help="de-duplicate the topic's producers, whatever its namespace says (applies at once)",
        ),
        "remove-deduplication": Verb(
            "DELETE", "{topic}/deduplicationEnabled", "topic", help="back to the namespace's de-duplication setting"
        ),
        "last-message-id": Verb("GET", "{topic}/lastMessageId", "topic", help="the last persisted message's id"),
        "permissions": Verb("GET", "{topic}/permissions", "topic", help="roles and their actions on the topic"),
        "grant-permission": Verb(
            "POST",
            "{topic}/permissions/{role}",
            "topic",
            options=(_ROLE, _ACTIONS),
            body=_actions,
            help="let a role produce and/or consume on this topic",
        ),
        "revoke-permission": Verb(
            "DELETE", "{topic}/permissions/{role}", "topic", options=(_ROLE,), help="take the topic's grant away"
        ),
    },
    "schemas": {
        "get": Verb(
            "GET",
            "{schema_topic}/schema",
            "topic",
            options=(("--version", int, -1, "this version (default: the latest)"),),
            help="a topic's schema",
        ),
        "versions": Verb("GET", "{schema_topic}/schemas", "topic", help="every schema version of a topic"),
        "upload": Verb(
            "POST",
            "{schema_topic}/schema",
            "topic",
            options=(_SCHEMA_FILE,),
            body=_schema_file,
            help='add a schema version (the file: {"type": "AVRO", "schema": "...", "properties": {}})',
        ),
        "delete": Verb("DELETE", "{schema_topic}/schema", "topic", help="delete every version and its ledger"),
        "compatibility": Verb(
            "POST",
            "{schema_topic}/compatibility",
            "topic",
            options=(_SCHEMA_FILE,),
            body=_schema_file,
            help="test a schema against the topic's versions without storing it",
        ),
    },
    "brokers": {
        "list": Verb("GET", "/admin/v2/brokers/{cluster}", "cluster", help="the live brokers of a cluster"),
        "leader-broker": Verb("GET", "/admin/v2/brokers/leaderBroker", help="the leader broker"),
        "healthcheck": Verb("GET", "/admin/v2/brokers/health", raw=True, help="ok when the broker serves"),
    },
    "bookies": {
        "list-bookies": Verb("GET", "/admin/v2/bookies/all", aliases=("list",), help="bookies and their state"),
    },
}


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Administer clusters, tenants, namespaces, topics, brokers and bookies through the admin REST API, "
        "as pulsar-admin does (works against any Pulsar service).",
        epilog="example: %(prog)s --admin-url http://127.0.0.1:8080 topics internal-stats my-topic",
    )
    parser.add_argument(
        "--admin-url",
        default=DEFAULT_ADMIN_URL,
        help="a broker's web service URL, http[s]://HOST:PORT[,HOST:PORT...] (what `standalone` prints under "
        f"'web service', or `cluster status` under web; default {DEFAULT_ADMIN_URL})",
    )
    parser.add_argument(
        "--token", help="a token, when the brokers require authentication (sent as Authorization: Bearer)"
    )
    parser.add_argument("--token-file", help="a file holding the token")
    parser.add_argument(
        "--tls-trust-certs-file", metavar="PEM", help="CAs to trust for an https:// admin URL (default: the system's)"
    )
    groups = parser.add_subparsers(dest="group", required=True)
    for group, verbs in VERBS.items():
        sub = groups.add_parser(group, help=f"{group} commands").add_subparsers(dest="verb", required=True)
        for name, verb in verbs.items():
            command = sub.add_parser(name, aliases=list(verb.aliases), help=verb.help or f"{group} {name}")
            command.set_defaults(verb_name=name)
            if verb.positional:
                command.add_argument(verb.positional)
            for flag, kind, default, text in verb.options:
                if kind is bool:
                    command.add_argument(flag, action="store_true", help=text)
                else:
                    command.add_argument(flag, type=kind, default=default, required=default is None, help=text)
    return parser


def main(argv: list[str], prog: str) -> int:
    args = _parser(prog).parse_args(argv)
    verb = VERBS[args.group][args.verb_name]

    from impl.broker.web.admin_client import AdminClient, topic_path
    from impl.metadata.naming import InvalidNamespaceName, InvalidTopicName
    from impl.security.tls import TlsConfigError, client_context
    from impl.web.http import HttpError

    try:
        path = verb.path
        if verb.positional == "topic":
            path = path.replace("{topic}", topic_path(args.topic))
            path = path.replace("{schema_topic}", topic_path(args.topic).replace("/persistent/", "/schemas/", 1))
            if getattr(args, "version", -1) >= 0 and path.endswith("/schema"):
                path += f"/{args.version}"
        values = {k: str(v) for k, v in vars(args).items() if v is not None}
        path = path.format(
            **{
                k: values.get(k, "")
                for k in (
                    "tenant",
                    "namespace",
                    "cluster",
                    "subscription",
                    "time",
                    "role",
                    "expire_time",
                    "count",
                    "initial_position",
                    "message_position",
                )
            }
        )
        token = args.token or (Path(args.token_file).read_text().strip() if args.token_file else None)
        tls = client_context(args.tls_trust_certs_file) if args.tls_trust_certs_file else None
        admin = AdminClient(args.admin_url, token=token, tls=tls)
        if verb.message:
            headers, payload = admin.message(path)
            for name, value in sorted(headers.items()):
                if name.lower().startswith("x-pulsar-"):
                    print(f"{name}: {value}")
            print()
            sys.stdout.flush()
            sys.stdout.buffer.write(payload + b"\n")
            return 0
        result = admin.call(verb.method, path, verb.body(args) if verb.body else None, raw=verb.raw)
    except (InvalidTopicName, InvalidNamespaceName, TlsConfigError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"error: cannot read the token or schema file: {e}", file=sys.stderr)
        return 2
    except HttpError as e:
        status = f" ({e.status})" if e.status else ""
        print(f"error{status}: {e.reason}", file=sys.stderr)
        return 2
    if result is not None:
        print(result if verb.raw else json.dumps(result, indent=2, sort_keys=True))
    return 0
