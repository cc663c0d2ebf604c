"""Non-persistent topics in the workload (docs/non-persistent.md, docs/history.md's Non-persistent topics).

A non-persistent topic keeps nothing: there is nothing to read back, no backlog to drain and no retention to
hold, so the workload only appends to it and consumes it live. These are the few decisions that follow from the
topic's domain; the run (impl/workload/run.py) asks them and otherwise treats every topic alike.
"""

from __future__ import annotations

from impl.workload.consumers import Subscription
from impl.workload.operations import Credentials

PERSISTENT, NON_PERSISTENT, MIXED = "persistent", "non-persistent", "mixed"
DOMAINS = (PERSISTENT, NON_PERSISTENT, MIXED)


def is_non_persistent(topic: str) -> bool:
    return topic.startswith(f"{NON_PERSISTENT}://")


def plain_domain(domain: str, i: int) -> str:
    """The domain of plain topic `i`: a mixed run alternates, t0 persistent, t1 non-persistent, ..."""
    if domain == MIXED:
        return NON_PERSISTENT if i % 2 else PERSISTENT
    return domain


def partitioned_domain(domain: str) -> str:
    """A mixed run's partitioned topic is non-persistent: its partitions are where routing meets dropping."""
    return PERSISTENT if domain == PERSISTENT else NON_PERSISTENT


def persistent(topics: list[str]) -> list[str]:
    """The topics that can be read back, retained and drained."""
    return [t for t in topics if not is_non_persistent(t)]


def drop_counts(admin_url: str, credentials: Credentials, subs: list[Subscription]) -> dict[tuple[str, str], int]:
    """What the broker dropped for each non-persistent subscription (its `msgDropCount`, summed over partitions),
    as it reports now: counters start afresh whenever the topic is loaded again (a restart, an unload), so this is
    a lower bound of the run's drops. A broker without the field (Apache Pulsar has only `msgDropRate`) gives none.
    """
    from impl.broker.web.admin_client import AdminClient, topic_path
    from impl.security.tls import client_context

    tls = client_context(credentials.tls_trust_certs_file) if credentials.tls_trust_certs_file else None
    admin = AdminClient(admin_url, timeout_s=10.0, token=credentials.token, tls=tls)
    counts: dict[tuple[str, str], int] = {}
    for sub in subs:
        if not is_non_persistent(sub.topic):
            continue
        logs = [f"{sub.topic}-partition-{i}" for i in range(sub.partitions)] if sub.partitions else [sub.topic]
        total = 0
        for log in logs:
            try:
                stats = admin.call("GET", topic_path(log) + "/stats")
            except Exception:
                continue  # not loaded now (never used, or unloaded): nothing to report for it
            dropped = stats.get("subscriptions", {}).get(sub.name, {}).get("msgDropCount")
            if dropped is None:
                break
            total += int(dropped)
        else:
            counts[(sub.topic, sub.name)] = total
    return counts
