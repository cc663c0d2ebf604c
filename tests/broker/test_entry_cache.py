"""The broker's bounded entry cache (Pulsar's managedLedgerCacheSizeMB): one bound for every topic,
eviction by size (largest caches first) and once every active reader has read an entry; and over a
real standalone, a backlog larger than the bound written and read back whole, in order, with the cache
never over its bound."""

from __future__ import annotations

import threading
import urllib.request
from pathlib import Path

import pulsar
import pytest
from prometheus_client.parser import text_string_to_metric_families

from impl.broker.entry_cache import EVICTION_WATERMARK, EntryCacheManager
from impl.broker.ledger_list import Position
from impl.broker.standalone import Standalone
from impl.protocol.entry_codec import DispatchMetadata
from tests.waiting import wait_for

KIB = 1024


def test_one_bound_for_all_caches_evicts_the_largest_first() -> None:
    manager = EntryCacheManager(10 * KIB)
    big, small = manager.new_cache(), manager.new_cache()
    for i in range(2):
        small.put(Position(1, i), b"s" * KIB)
    for i in range(8):
        big.put(Position(2, i), b"b" * KIB)
    assert manager.size == 10 * KIB and manager.evicted == 0
    big.put(Position(2, 8), b"b" * KIB)  # over the bound: down to the watermark, from the largest cache
    assert manager.size <= 10 * KIB * EVICTION_WATERMARK
    assert len(small) == 2 and small.get(Position(1, 0)) == b"s" * KIB
    assert big.get(Position(2, 0)) is None and big.get(Position(2, 8)) == b"b" * KIB  # the oldest went
    assert manager.evicted == 2 and manager.hits == 2 and manager.misses == 1
    assert manager.size == big.size + small.size


def test_two_caches_of_the_same_size_still_make_room() -> None:
    manager = EntryCacheManager(4 * KIB)
    a, b = manager.new_cache(), manager.new_cache()
    for i in range(2):
        a.put(Position(1, i), b"a" * KIB)
        b.put(Position(2, i), b"b" * KIB)
    a.put(Position(1, 2), b"a" * KIB)
    assert manager.size <= 4 * KIB * EVICTION_WATERMARK and manager.size == a.size + b.size


def test_entries_every_reader_read_leave_and_a_closed_cache_frees_its_share() -> None:
    manager = EntryCacheManager(100 * KIB)
    cache = manager.new_cache()
    for i in range(5):
        cache.put(Position(3, i), b"%d" % i)
    assert cache.evict_through(Position(3, 2)) == 3
    assert [cache.get(Position(3, i)) for i in range(5)] == [None, None, None, b"3", b"4"]
    cache.close()
    assert manager.size == 0 and manager.entries == 0
    cache.put(Position(3, 5), b"late")  # an add completing after the close is not cached
    assert manager.size == 0


def test_the_publish_time_metadata_stays_and_leaves_with_its_entry() -> None:
    manager = EntryCacheManager(3 * KIB)
    cache = manager.new_cache()
    meta = DispatchMetadata(1, 0, ("",))
    cache.annotate(Position(1, 0), meta)  # not cached: nothing kept
    assert cache.metadata(Position(1, 0)) is None
    for i in range(4):
        cache.put(Position(1, i), b"x" * KIB)
        cache.annotate(Position(1, i), meta)
    # The fourth put evicted by size: the evicted entries' metadata went with them.
    assert [cache.metadata(Position(1, i)) is meta for i in range(4)] == [
        cache.get(Position(1, i)) is not None for i in range(4)
    ]
    cache.evict_through(Position(1, 2))
    cache.evict_ledgers({1})
    assert cache.metadata(Position(1, 3)) is None and not cache._metadata


def test_an_entry_larger_than_the_bound_and_a_zero_bound_cache_nothing() -> None:
    none = EntryCacheManager(0).new_cache()
    none.put(Position(1, 0), b"x")
    assert len(none) == 0 and none.manager.size == 0
    with pytest.raises(ValueError, match=">= 0"):
        EntryCacheManager(-1)


def test_a_backlog_larger_than_the_bound_is_read_back_whole_and_in_order_within_it(tmp_path: Path) -> None:
    s = Standalone(tmp_path / "standalone", port=0, web_port=0)
    s.config.managed_ledger_cache_size_mb = 1  # the bound; the backlog below is 3 MiB
    s.start()
    try:
        assert s.broker is not None
        manager = s.broker.service.entry_cache
        assert manager.max_bytes == 1024 * 1024
        largest = [0]
        stop = threading.Event()

        def watch() -> None:  # the cache's size, sampled all along
            while not stop.wait(0.001):
                largest[0] = max(largest[0], manager.size)

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        topic = "persistent://public/default/bounded-cache"
        n = 3 * 1024
        client = pulsar.Client(s.pulsar_service_url, operation_timeout_seconds=30)
        try:
            client.subscribe(topic, "all", consumer_type=pulsar.ConsumerType.Shared).close()
            producer = client.create_producer(
                topic, batching_enabled=False, max_pending_messages=1000, block_if_queue_full=True
            )
            for i in range(n):  # nobody reads while the backlog is written: the bound alone holds the cache
                producer.send_async(b"%06d" % i + b"x" * (KIB - 6), None)
            producer.flush()
            assert manager.size <= manager.max_bytes
            consumer = client.subscribe(topic, "all", consumer_type=pulsar.ConsumerType.Shared)
            got = []
            for _ in range(n):
                m = consumer.receive(20_000)
                got.append(int(m.data()[:6]))
                consumer.acknowledge(m)
            assert got == list(range(n))  # whole and in order (one consumer on Shared delivers in order)
            # Its only subscription, with a consumer, read everything: nothing is kept for it.
            wait_for(lambda: manager.size == 0, "the entries every active reader read to leave the cache")
        finally:
            client.close()
            stop.set()
            watcher.join()
        stats = manager.stats()
        assert largest[0] <= manager.max_bytes and stats["bytes"] <= manager.max_bytes
        assert stats["evicted"] > 0 and stats["misses"] > 0  # the oldest were evicted and read from the bookies

        with urllib.request.urlopen(s.web_service_url + "/metrics", timeout=10) as response:
            text = response.read().decode()
        metrics = {f.name: f.samples[0].value for f in text_string_to_metric_families(text) if "ml_cache" in f.name}
        assert metrics["pulsar_ml_cache_max_size"] == 1024 * 1024
        assert 0 <= metrics["pulsar_ml_cache_used_size"] <= 1024 * 1024
        assert metrics["pulsar_ml_cache_evictions"] >= stats["evicted"]
        assert metrics["pulsar_ml_cache_hits_total"] >= stats["hits"] and metrics["pulsar_ml_cache_misses_total"] > 0
    finally:
        s.stop()
