"""The broker's `/metrics`: Prometheus text under Pulsar's metric names, read at each scrape from the
topics' own counters (impl/broker/topic_stats.py). Per topic, labelled cluster, namespace, topic."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric

from impl.bookie.http import PROMETHEUS_TEXT, histogram
from impl.broker.non_persistent import NonPersistentCounters
from impl.broker.web.context import WebContext
from impl.latency import BUCKETS_MS, LatencyBuckets
from impl.web.http import Request, Response, Router

LABELS = ["cluster", "namespace", "topic"]
# Pulsar's per-topic latency buckets: pulsar_storage_write_latency_le_0_5, ..._le_1000, ..._overflow
_BUCKET_SUFFIXES = [f"le_{b:g}".replace(".", "_") for b in BUCKETS_MS] + ["overflow"]


class BrokerCollector:
    def __init__(self, ctx: WebContext) -> None:
        self.ctx = ctx

    def collect(self) -> Iterator[Metric]:
        families: dict[str, GaugeMetricFamily] = {}

        def gauge(name: str, documentation: str, labels: list[str], value: float) -> None:
            family = families.get(name)
            if family is None:
                family = families[name] = GaugeMetricFamily(name, documentation, labels=LABELS)
            family.add_metric(labels, value)

        def subscription(name: str, documentation: str, labels: list[str], value: float) -> None:
            family = families.get(name)
            if family is None:
                family = families[name] = GaugeMetricFamily(name, documentation, labels=[*LABELS, "subscription"])
            family.add_metric(labels, value)

        publish = LatencyBuckets()
        topics = sorted(self.ctx.service.topics.values(), key=lambda t: str(t.name))
        for topic in topics:
            topic.counters.roll()
            name = topic.name
            labels = [self.ctx.cluster, str(name.namespace_name), str(name)]
            inbound, outbound = topic.counters.inbound, topic.counters.outbound
            gauge("pulsar_rate_in", "messages/s published", labels, inbound.message_rate)
            gauge("pulsar_rate_out", "messages/s dispatched", labels, outbound.message_rate)
            gauge("pulsar_throughput_in", "bytes/s published", labels, inbound.byte_rate)
            gauge("pulsar_throughput_out", "bytes/s dispatched", labels, outbound.byte_rate)
            gauge("pulsar_in_messages_total", "messages published", labels, inbound.messages)
            gauge("pulsar_in_bytes_total", "bytes published", labels, inbound.bytes)
            gauge("pulsar_out_messages_total", "messages dispatched", labels, outbound.messages)
            gauge("pulsar_out_bytes_total", "bytes dispatched", labels, outbound.bytes)
            stored = name.persistent  # a non-persistent topic has no ledgers and no backlog
            backlogs = {n: sub.cursor.backlog() if stored else 0 for n, sub in topic.subscriptions.items()}
            size = topic.ml.stats()["size"] if stored else 0
            gauge("pulsar_storage_size", "bytes in the topic's ledgers", labels, size)
            backlog = max(backlogs.values(), default=0)
            gauge("pulsar_msg_backlog", "entries not yet acknowledged (largest subscription)", labels, backlog)
            gauge("pulsar_producers_count", "connected producers", labels, len(topic.attached))
            gauge("pulsar_subscriptions_count", "subscriptions", labels, len(topic.subscriptions))
            consumers = sum(len(sub.sinks) for sub in topic.subscriptions.values())
            gauge("pulsar_consumers_count", "connected consumers", labels, consumers)
            for sub_name, sub in sorted(topic.subscriptions.items()):
                sub_labels = [*labels, sub_name]
                subscription(
                    "pulsar_subscription_back_log", "entries not yet acknowledged", sub_labels, backlogs[sub_name]
                )
                unacked = sub.dispatcher.unacked()
                subscription("pulsar_subscription_unacked_messages", "delivered, not acknowledged", sub_labels, unacked)
                if isinstance(topic.counters, NonPersistentCounters):  # docs/non-persistent.md
                    drops = topic.counters.drops.get(sub_name)
                    rate = drops.message_rate if drops is not None else 0.0
                    subscription("pulsar_subscription_msg_drop_rate", "messages/s dropped", sub_labels, rate)
            latency = topic.counters.publish_latency
            for suffix, count in zip(_BUCKET_SUFFIXES, latency.counts, strict=True):
                gauge(f"pulsar_storage_write_latency_{suffix}", "publishes in this latency bucket (ms)", labels, count)
            gauge("pulsar_storage_write_latency_count", "publishes timed", labels, latency.count)
            gauge("pulsar_storage_write_latency_sum", "sum of publish latencies (ms)", labels, latency.sum_ms)
            for i, count in enumerate(latency.counts):
                publish.counts[i] += count
            publish.sum_ms += latency.sum_ms
        yield GaugeMetricFamily("pulsar_topics_count", "topics loaded on this broker", len(topics))
        yield from self._cache_metrics()
        yield from families.values()
        yield histogram("pulsar_broker_publish_latency", "publish latency of the loaded topics (s)", publish)

    def _cache_metrics(self) -> Iterator[Metric]:
        """The entry cache of all the topics (managedLedgerCacheSizeMB), under Pulsar's pulsar_ml_cache_*
        names, labelled by cluster. Pulsar reports hits and misses as rates over its stats interval; here
        they are running totals (`_total`), from which Prometheus' rate() gives the same; evictions too."""
        stats = self.ctx.service.entry_cache.stats()
        for name, documentation, value in (
            ("pulsar_ml_cache_used_size", "bytes of entries in the cache", stats["bytes"]),
            ("pulsar_ml_cache_max_size", "the cache's bound in bytes (managedLedgerCacheSizeMB)", stats["max_bytes"]),
            ("pulsar_ml_cache_entries", "entries in the cache", stats["entries"]),
            ("pulsar_ml_cache_hits_total", "reads served from the cache (entries)", stats["hits"]),
            ("pulsar_ml_cache_misses_total", "reads the cache could not serve (entries)", stats["misses"]),
            ("pulsar_ml_cache_evictions", "entries evicted (by size or once every active reader read them)",
             stats["evicted"]),
        ):  # fmt: skip
            family = GaugeMetricFamily(name, documentation, labels=["cluster"])
            family.add_metric([self.ctx.cluster], value)
            yield family


def install(router: Router, ctx: WebContext) -> None:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BrokerCollector(ctx))

    def metrics(req: Request) -> Response:
        return Response(200, generate_latest(registry), PROMETHEUS_TEXT)

    router.add("GET", "/metrics", metrics)
