"""A bookie's small HTTP service, as BookKeeper's bookie HTTP server: `/metrics` (Prometheus text,
under BookKeeper's metric names) and `/api/v1/bookie/info` and `/api/v1/bookie/state` (what the
cluster view shows: free space, read-only state)."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily, Metric

from impl.bookie.core import BookieCore
from impl.bookie.journal import Journal
from impl.bookie.ledger_storage import LedgerStorage
from impl.latency import LatencyBuckets
from impl.web.http import Request, Response, Router
from impl.web.server import WebServer


class Bookie(Protocol):
    """What this service reads of the bookie (impl/bookie/server.py's Bookie, which starts this
    service: typed here as an interface so that this module does not import the server)."""

    core: BookieCore
    journal: Journal
    storage: LedgerStorage
    data_dir: Path
    add_latency: LatencyBuckets
    read_latency: LatencyBuckets


PROMETHEUS_TEXT = "text/plain; version=0.0.4; charset=utf-8"


def histogram(name: str, documentation: str, latency: LatencyBuckets) -> HistogramMetricFamily:
    return HistogramMetricFamily(name, documentation, buckets=latency.cumulative(), sum_value=latency.sum_ms / 1000)


class BookieCollector:
    """Read at each scrape from the bookie's own counters (nothing is kept twice)."""

    def __init__(self, bookie: Bookie) -> None:
        self.bookie = bookie

    def collect(self) -> Iterator[Metric]:
        bookie = self.bookie
        yield GaugeMetricFamily(
            "bookie_SERVER_STATUS", "1 while writable, 0 while read-only", 0 if bookie.core.readonly else 1
        )
        yield histogram("bookkeeper_server_ADD_ENTRY_REQUEST", "add latency, arrival to reply (s)", bookie.add_latency)
        yield histogram(
            "bookkeeper_server_READ_ENTRY_REQUEST", "read latency, arrival to reply (s)", bookie.read_latency
        )
        journal = bookie.journal
        yield histogram("bookie_journal_JOURNAL_SYNC", "one journal write + fdatasync (s)", journal.sync_latency)
        yield CounterMetricFamily("bookie_journal_JOURNAL_FORCE_WRITE_BATCH", "journal flushes", journal.flushes)
        yield CounterMetricFamily(
            "bookie_journal_JOURNAL_FORCE_WRITE_BATCH_BYTES", "bytes written by journal flushes", journal.flushed_bytes
        )
        ledgers, entries = bookie.storage.counts()
        yield GaugeMetricFamily("bookie_ledgers_count", "ledgers stored here", ledgers)
        yield GaugeMetricFamily("bookie_entries_count", "entries stored here", entries)
        usage = shutil.disk_usage(bookie.data_dir)
        yield GaugeMetricFamily("bookie_ledger_dir_free_bytes", "free bytes on the ledger disk", usage.free)
        yield GaugeMetricFamily("bookie_ledger_dir_total_bytes", "size of the ledger disk", usage.total)


def router(bookie: Bookie) -> Router:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(BookieCollector(bookie))
    r = Router()

    def metrics(req: Request) -> Response:
        return Response(200, generate_latest(registry), PROMETHEUS_TEXT)

    def info(req: Request) -> Response:
        usage = shutil.disk_usage(bookie.data_dir)
        return Response.json({"freeSpace": usage.free, "totalSpace": usage.total})

    def state(req: Request) -> Response:
        return Response.json({"running": True, "readOnly": bookie.core.readonly, "shuttingDown": False})

    r.add("GET", "/metrics", metrics)
    r.add("GET", "/api/v1/bookie/info", info)
    r.add("GET", "/api/v1/bookie/state", state)
    return r


def http_server(bookie: Bookie, host: str, port: int) -> WebServer:
    return WebServer(router(bookie), host, port, name="bookie", threads=2)
