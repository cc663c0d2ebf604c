"""`workload --lifecycle`: the run's topics in a namespace of their own whose storage policies act during the run
(docs/storage-lifecycle.md, Under faults).

Before the first operation the namespace `public/lifecycle-<run>` is created with

- retention unlimited (`retentionTimeInMinutes` and `retentionSizeInMB` -1): nothing is ever trimmed, so
  every acknowledged append must still be in the final read of its topic ("nothing retained lost");
- `offloadThreshold` small (OFFLOAD_THRESHOLD_BYTES): past that many bytes on the bookies, a topic's oldest
  closed ledgers are offloaded to the broker's offloader (the standalone's default: a directory) at each
  rollover and on the topic ticker, while the nemesis acts; later reads of those ledgers, the final reads
  among them, go to the offloaded copies;
- `compactionThreshold` small (COMPACTION_THRESHOLD_BYTES): the topic ticker starts a compaction once that
  many bytes follow the horizon (keyed messages only are kept in the compacted ledger: a run with consumers
  appends keyed messages);
- `messageTTL` small (MESSAGE_TTL_S): the topic ticker moves each subscription's cursor past the messages
  published more than that long ago (a subscription without a consumer, or whose consumers lag, skips them);
  each drain records it (`message_ttl`), and the audit excuses from `lost-message` what the TTL may have expired
  and flags what went missing sooner (`expired-early`).

Every append of the run carries a key (compaction keeps the last message per key), and TOMBSTONE_FRACTION of them
are tombstones: an empty payload, which compaction takes for the key's deletion (as Pulsar's TwoPhaseCompactor),
their value named in a message property (impl/workload/operations.py TOMBSTONE_PROPERTY) for the reads. Once the
faults are healed each topic is given a value and a tombstone of one key, compacted on demand up to its end, then
given TAIL_APPENDS more appends (`around_compaction`), before the final reads. After the drain each topic is read
with a `read_compacted` reader from the earliest: a `read-compacted` operation recording what it read and the
horizon the `__compaction` cursor reports (docs/history.md, Compacted reads): per key its last value at or before
the horizon, a key whose last is a tombstone not at all, then the appends after the horizon; judged by the audit's
`compacted-stale`, `compacted-missing` and `compacted-reorder`. Earlier, while the producers send and the nemesis
acts, each topic is compacted on demand (COMPACTION_UNDER_FAULTS_TIMEOUT_S; under a fault it may end `ERROR` or
time out, no error of the run) and then read so, so that a read with a horizon races the faults and the appends.

Ledgers are offloaded only once they are closed: the brokers must roll over often (`pulsar-ref standalone
--max-entries-per-ledger 20`, say) for the offload to happen during a short run. Everything here is set-up
and observation through the admin REST API, outside the history's operations; the final reads carry what it
saw (docs/history.md, Storage lifecycle).
"""

from __future__ import annotations

import contextlib
import random
import time
from typing import Any

from impl.broker.web.admin_client import AdminClient
from impl.workload.operations import Credentials

OFFLOAD_THRESHOLD_BYTES = 1024
COMPACTION_THRESHOLD_BYTES = 1024
# Seconds: short enough that the broker's ticker (every 10 s) expires messages during a run of a few dozen seconds,
# long enough that the appends of the last seconds before the drain must still be delivered.
MESSAGE_TTL_S = 5
COMPACTION_CURSOR = "__compaction"
COMPACTED_LEDGER_PROPERTY = "CompactedTopicLedger"
COMPACTION_TIMEOUT_S = 30.0
# Per topic, the compaction on demand while the nemesis acts: long enough to outlast a broker restart, short enough
# that its compacted read still races the producers of a run of a few seconds.
COMPACTION_UNDER_FAULTS_TIMEOUT_S = 5.0
# Of a run's operations: invoked before the compactions on demand under faults begin, so that appends precede and
# follow them.
COMPACTION_UNDER_FAULTS_AFTER = 0.25
# Of a run's appends: tombstones (an empty payload with a key; compaction deletes the key).
TOMBSTONE_FRACTION = 0.1
# Appended to each topic after the compaction on demand: fewer bytes than COMPACTION_THRESHOLD_BYTES (a few
# dozen bytes an entry), so the ticker leaves them after the horizon.
TAIL_APPENDS = 6


def around_compaction(rng: random.Random, keys: int, tombstones: bool) -> tuple[list[Any], list[Any]]:
    """The (key, tombstone) of the appends just before the compaction on demand and after it. With `tombstones`:
    before, a value and then a tombstone of one key, so the horizon has a deleted key behind it; after, a tombstone
    first and a value of the same key last, so a key deleted after the horizon is written again; the others of
    the TAIL_APPENDS random."""
    after = [(f"k{rng.randrange(keys)}", tombstones and rng.random() < 0.3) for _ in range(TAIL_APPENDS)]
    if not tombstones:
        return [], after
    deleted, again = f"k{rng.randrange(keys)}", after[0][0]
    after[0], after[-1] = (again, True), (again, False)
    return [(deleted, False), (deleted, True)], after


def policies() -> dict[str, Any]:
    """What the run's namespace is given (recorded on every final read as `lifecycle`)."""
    return {
        "retentionTimeInMinutes": -1,
        "retentionSizeInMB": -1,
        "offloadThreshold": OFFLOAD_THRESHOLD_BYTES,
        "compactionThreshold": COMPACTION_THRESHOLD_BYTES,
        "messageTTL": MESSAGE_TTL_S,
    }


def admin(url: str, credentials: Credentials) -> AdminClient:
    from impl.security.tls import client_context

    tls = client_context(credentials.tls_trust_certs_file) if credentials.tls_trust_certs_file else None
    return AdminClient(url, timeout_s=10.0, token=credentials.token, tls=tls)


def create_namespace(admin_url: str, namespace: str, credentials: Credentials) -> None:
    """The namespace with the policies above (a namespace that exists already, from an earlier try, is fine)."""
    client = admin(admin_url, credentials)
    with contextlib.suppress(Exception):  # it exists: an earlier try reached the broker
        client.call("PUT", f"/admin/v2/namespaces/{namespace}")
    p = policies()
    retention = {k: p[k] for k in ("retentionTimeInMinutes", "retentionSizeInMB")}
    client.call("POST", f"/admin/v2/namespaces/{namespace}/retention", retention)
    client.call("PUT", f"/admin/v2/namespaces/{namespace}/offloadThreshold", p["offloadThreshold"])
    client.call("PUT", f"/admin/v2/namespaces/{namespace}/compactionThreshold", p["compactionThreshold"])
    client.call("POST", f"/admin/v2/namespaces/{namespace}/messageTTL", p["messageTTL"])


def _path(topic: str) -> str:
    domain, rest = topic.split("://", 1)
    return f"/admin/v2/{domain}/{rest}"


def internal_stats(admin_url: str, topic: str, credentials: Credentials) -> dict[str, Any] | None:
    """The topic's internal stats, or None when they cannot be read now (the topic moving, a broker down)."""
    try:
        found: dict[str, Any] = admin(admin_url, credentials).call("GET", _path(topic) + "/internalStats")
    except Exception:
        return None
    return found


def offloaded_ledgers(stats: dict[str, Any]) -> list[int]:
    """The ids of the ledgers the topic's list records as offloaded."""
    return [int(x["ledgerId"]) for x in stats.get("ledgers", []) if x.get("offloaded")]


def compacted(stats: dict[str, Any]) -> bool:
    """A compaction of the topic has completed (its cursor names a compacted ledger)."""
    cursor = stats.get("cursors", {}).get(COMPACTION_CURSOR)
    return bool(cursor and cursor.get("properties", {}).get(COMPACTED_LEDGER_PROPERTY) is not None)


def horizon(stats: dict[str, Any]) -> list[int] | None:
    """The compaction horizon, [ledger, entry]: the `__compaction` cursor's mark-delete once it names a compacted
    ledger (Pulsar keeps it there); None before the first compaction."""
    if not compacted(stats):
        return None
    ledger, _, entry = str(stats["cursors"][COMPACTION_CURSOR]["markDeletePosition"]).partition(":")
    return [int(ledger), int(entry)]


def compact(admin_url: str, topic: str, credentials: Credentials, timeout_s: float = COMPACTION_TIMEOUT_S) -> str:
    """One compaction on demand up to the topic's last message, waited for: how it ended within `timeout_s`,
    `SUCCESS`, else `ERROR` (the last try failed) or `timed out` (not triggered, or still running). One the ticker
    started meanwhile (409) is waited out and the trigger tried again, so the horizon is the end of the topic as it
    stood when the trigger was taken; one that failed is triggered again while time remains."""
    client = admin(admin_url, credentials)
    path = _path(topic) + "/compaction"
    deadline = time.monotonic() + timeout_s
    triggered, ended = False, "timed out"
    while time.monotonic() < deadline:
        try:
            if not triggered:
                client.call("PUT", path)
                triggered = True
            status = client.call("GET", path).get("status")
        except Exception:  # 409 (one is running), or a broker unreachable or moving: try again
            time.sleep(0.3)
            continue
        if status == "SUCCESS":
            return "SUCCESS"
        if status == "ERROR":
            triggered, ended = False, "ERROR"
        time.sleep(0.2)
    return ended


def describe_compactions(ended: dict[str, str]) -> str:
    """How each topic's compaction on demand ended, for a line of output: `t1 SUCCESS, t2 timed out`."""
    return ", ".join(f"{topic.rsplit('/', 1)[-1]} {outcome}" for topic, outcome in ended.items())


def read_back(events: list[dict[str, Any]]) -> dict[str, tuple[int, int]]:
    """Per topic, from a history's events: the ledgers an `ok` final read went through that its invoke named
    `offloaded`, and how many entries it returned from them (read from the offloaded copies)."""
    pending: dict[Any, set[int]] = {}  # process -> the offloaded ledgers its open final read named
    found: dict[str, tuple[int, int]] = {}
    for e in events:
        if not e.get("final"):
            continue
        if e["type"] == "invoke":
            pending[e["process"]] = set(e.get("offloaded", []))
        elif e["type"] == "ok":
            offloaded = pending.pop(e["process"], set())
            entries = [position for position, _ in e["value"] if position[0] in offloaded]
            key = f"{e['topic']} @{e['cluster']}" if e.get("cluster") else e["topic"]
            found[key] = (len({p[0] for p in entries}), len(entries))
        else:
            pending.pop(e["process"], None)
    return found
