"""A topic's stats as Pulsar's admin API shows them: TopicStats, PersistentTopicInternalStats and
PartitionedTopicStats, with Pulsar's field names, built from the topic's own state and counters."""

from __future__ import annotations

import time
from typing import Any

from impl.broker.service import ConsumerSink, Subscription, Topic
from impl.broker.topic_stats import Rate

# Our managed-ledger states under the names Pulsar's internal stats use.
_ML_STATES = {
    "closed": "Closed",
    "reading": "Initialized",
    "recovered": "Initialized",
    "open": "LedgerOpened",
    "fenced": "Fenced",
    "deleted": "Terminated",
}


# A partitioned topic's replication figures are its partitions' sums (Pulsar's aggregation).
REPLICATION_SUMS = ("msgRateOut", "msgThroughputOut", "msgOutCounter", "bytesOutCounter", "replicationBacklog")


# Pulsar's ProducerAccessMode names, by the wire's values.
_ACCESS_MODES = {0: "Shared", 1: "Exclusive", 2: "WaitForExclusive", 3: "ExclusiveWithFencing"}


def topic_stats(topic: Topic) -> dict[str, Any]:
    """Pulsar's TopicStats: rates, counters, storage and backlog, publishers and subscriptions."""
    topic.counters.roll()
    now = time.monotonic()
    ml = topic.ml.stats()
    inbound, outbound = topic.counters.inbound, topic.counters.outbound
    subscriptions = {}
    backlog_entries = 0
    for name, sub in sorted(topic.subscriptions.items()):
        backlog = sub.cursor.backlog()
        backlog_entries = max(backlog_entries, backlog)
        consumers = [_consumer(sub, cid, sink, now) for cid, sink in sorted(sub.sinks.items())]
        subscriptions[name] = {
            "msgRateOut": sum(c["msgRateOut"] for c in consumers),
            "msgThroughputOut": sum(c["msgThroughputOut"] for c in consumers),
            "bytesOutCounter": sum(c["bytesOutCounter"] for c in consumers),
            "msgOutCounter": sum(c["msgOutCounter"] for c in consumers),
            "msgBacklog": backlog,
            "unackedMessages": sub.dispatcher.unacked(),
            "msgDelayed": sub.dispatcher.delayed(),
            "type": sub.type.value,
            "isDurable": sub.durable,
            "isReplicated": False,
            "consumers": consumers,
        }
    publishers = []
    for name, (_owner, epoch, exclusive) in sorted(topic.attached.items()):
        info = topic.producer_info.get(name)
        rate = info.rate if info is not None else Rate()
        rate.roll(now)
        publishers.append(
            {
                "producerId": info.producer_id if info is not None else -1,
                "producerName": name,
                "accessMode": _ACCESS_MODES[_mode(topic, name, exclusive)],
                "epoch": epoch,
                "msgRateIn": rate.message_rate,
                "msgThroughputIn": rate.byte_rate,
                "averageMsgSize": rate.bytes / rate.messages if rate.messages else 0.0,
                "address": info.address if info is not None else "",
                "connectedSince": info.connected_since if info is not None else "",
                "clientVersion": info.client_version if info is not None else "",
                "metadata": dict(info.metadata) if info is not None else {},
            }
        )
    return {
        "msgRateIn": inbound.message_rate,
        "msgThroughputIn": inbound.byte_rate,
        "msgRateOut": outbound.message_rate,
        "msgThroughputOut": outbound.byte_rate,
        "msgInCounter": inbound.messages,
        "bytesInCounter": inbound.bytes,
        "msgOutCounter": outbound.messages,
        "bytesOutCounter": outbound.bytes,
        "averageMsgSize": inbound.bytes / inbound.messages if inbound.messages else 0.0,
        "storageSize": ml["size"],
        "backlogSize": backlog_entries,
        "publishers": publishers,
        "subscriptions": subscriptions,
        "replication": {remote: r.stats() for remote, r in sorted(topic.replicators.items())},
        "topicEpoch": topic.topic_epoch,
        "deduplicationStatus": "Enabled" if topic.deduplication else "Disabled",
    }


def _consumer(sub: Subscription, cid: int, sink: ConsumerSink, now: float) -> dict[str, Any]:
    """Pulsar's ConsumerStats for one consumer of the subscription."""
    state = sub.dispatcher.consumers.get(cid)
    rate: Rate = getattr(sink, "rate", None) or Rate()
    rate.roll(now)
    unacked = sub.dispatcher.unacked_of(cid)
    return {
        "consumerName": state.name if state is not None else f"consumer-{cid}",
        "msgRateOut": rate.message_rate,
        "msgThroughputOut": rate.byte_rate,
        "bytesOutCounter": rate.bytes,
        "msgOutCounter": rate.messages,
        "msgRateRedeliver": 0.0,
        "availablePermits": state.permits if state is not None else 0,
        "unackedMessages": unacked,
        # Pulsar blocks a consumer at maxUnackedMessagesPerConsumer; the reference has no such limit.
        "blockedConsumerOnUnackedMsgs": False,
        "address": getattr(sink, "address", ""),
        "connectedSince": getattr(sink, "connected_since", ""),
        "clientVersion": getattr(sink, "client_version", ""),
        "lastAckedTimestamp": getattr(sink, "last_acked_ms", 0),
        "lastConsumedTimestamp": getattr(sink, "last_consumed_ms", 0),
        "metadata": dict(getattr(sink, "metadata", {})),
    }


def internal_stats(topic: Topic) -> dict[str, Any]:
    """Pulsar's PersistentTopicInternalStats: the managed ledger's ledgers and cursors."""
    ml = topic.ml.stats()
    ledgers = ml["ledgers"]
    current = next((ledger for ledger in ledgers if ledger["ledger_id"] == ml["current_ledger"]), None)
    return {
        "entriesAddedCounter": topic.counters.inbound.messages,
        "numberOfEntries": ml["entries"],
        "totalSize": ml["size"],
        "currentLedgerEntries": int(current["entries"] or 0) if current else 0,
        "currentLedgerSize": int(current["size"] or 0) if current else 0,
        "pendingAddEntriesCount": ml["pending_adds"],
        "lastConfirmedEntry": ml["last_confirmed"] or "-1:-1",
        "state": _ML_STATES.get(ml["state"], ml["state"]),
        "ledgers": [
            {
                "ledgerId": ledger["ledger_id"],
                "entries": int(ledger["entries"] or 0),
                "size": int(ledger["size"] or 0),
                "offloaded": bool(ledger.get("offload") and ledger["offload"]["complete"]),
                **({"offloadContext": ledger["offload"]} if ledger.get("offload") else {}),
            }
            for ledger in ledgers
        ],
        "cursors": {name: _cursor(c) for name, c in ml["cursors"].items()},
    }


def _cursor(cursor: dict[str, Any]) -> dict[str, Any]:
    deleted = cursor["individually_deleted"]
    return {
        "markDeletePosition": cursor["mark_delete"],
        "readPosition": cursor["read_position"] or "",
        "cursorLedger": cursor["cursor_ledger"] if cursor["cursor_ledger"] is not None else -1,
        "individuallyDeletedMessages": "[" + ",".join(deleted) + "]",
        "totalNonContiguousDeletedMessagesRange": len(deleted),
        "messagesConsumedCounter": 0,
        "numberOfEntriesSinceFirstNotAckedMessage": cursor["backlog"],
        "state": "Open",
        "properties": dict(cursor.get("properties", {})),  # the mark-delete's (Pulsar's cursor properties)
    }


def partitioned_stats(partitions: int, per_partition: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Pulsar's PartitionedTopicStats: the partitions' TopicStats added up, and each one by name."""
    total: dict[str, Any] = {
        key: 0
        for key in (
            "msgRateIn",
            "msgThroughputIn",
            "msgRateOut",
            "msgThroughputOut",
            "msgInCounter",
            "bytesInCounter",
            "msgOutCounter",
            "bytesOutCounter",
            "storageSize",
            "backlogSize",
        )
    }
    publishers: list[dict[str, Any]] = []
    subscriptions: dict[str, dict[str, Any]] = {}
    replication: dict[str, dict[str, Any]] = {}
    for stats in per_partition.values():
        for key in total:
            total[key] += stats[key]
        publishers.extend(stats["publishers"])
        for name, sub in stats["subscriptions"].items():
            merged = subscriptions.setdefault(name, {"msgBacklog": 0, "unackedMessages": 0, "type": sub["type"]})
            merged["msgBacklog"] += sub["msgBacklog"]
            merged["unackedMessages"] += sub["unackedMessages"]
        for remote, repl in stats["replication"].items():
            sums = replication.setdefault(remote, dict.fromkeys(REPLICATION_SUMS, 0) | {"connected": True})
            for key in REPLICATION_SUMS:
                sums[key] += repl[key]
            sums["connected"] = sums["connected"] and repl["connected"]
    messages = total["msgInCounter"]
    return total | {
        "averageMsgSize": total["bytesInCounter"] / messages if messages else 0.0,
        "publishers": publishers,
        "subscriptions": subscriptions,
        "replication": replication,
        "metadata": {"partitions": partitions},
        "partitions": per_partition,
    }


def _mode(topic: Topic, name: str, exclusive: bool) -> int:
    mode = topic.access_modes.get(name)
    return mode.value if mode is not None else (1 if exclusive else 0)
