"""A bookie process's HTTP service: /metrics under BookKeeper's names, parsed by Prometheus' own
text parser, its registration naming the service, and the read-only state as it changes."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from impl.bookie.channel import BookieChannel
from impl.bookie.entry_format import encode_entry, master_key
from impl.bookie.protocol import AddRequest, ErrorCode, ReadRequest
from impl.metadata.ledger import DigestType
from impl.metadata.registry import BookieRegistry
from impl.metadata.url import connect
from tests.bookie.bookie_process import BookieProcess

pytestmark = pytest.mark.processes

KEY = master_key(b"pw")


def samples(url: str) -> dict[str, float]:
    """name{labels} -> value of every sample at url/metrics."""
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            found[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return found


def get_json(url: str) -> dict:
    return json.loads(urllib.request.urlopen(url, timeout=10).read())


def test_bookie_metrics_count_adds_reads_and_journal_syncs(tmp_path: Path) -> None:
    metadata = f"embedded://{tmp_path / 'meta'}"
    bookie = BookieProcess(tmp_path / "data", metadata)
    try:
        http = re.search(r"\(HTTP: (http://\S+)\)", bookie.banner)
        assert http, bookie.banner
        url = http.group(1)
        store = connect(metadata)
        assert BookieRegistry(store).bookie_info(bookie.address).http_url == url
        store.close()
        before = samples(url)
        assert before["bookie_SERVER_STATUS"] == 1
        channel = BookieChannel(bookie.address)
        for entry in range(20):
            body = encode_entry(7, entry, -1, entry, b"x" * 100, DigestType.CRC32C, b"")
            assert channel.call(AddRequest(7, entry, KEY, body)).code is ErrorCode.EOK
        assert channel.call(ReadRequest(7, 3)).code is ErrorCode.EOK
        channel.close()
        after = samples(url)
        assert (
            after["bookkeeper_server_ADD_ENTRY_REQUEST_count"] - before["bookkeeper_server_ADD_ENTRY_REQUEST_count"]
            == 20
        )
        assert after["bookkeeper_server_READ_ENTRY_REQUEST_count"] >= 1
        assert (
            after["bookkeeper_server_ADD_ENTRY_REQUEST_bucket{le=+Inf}"]
            == after["bookkeeper_server_ADD_ENTRY_REQUEST_count"]
        )
        assert (
            after["bookie_journal_JOURNAL_SYNC_count"] >= 1
            and after["bookie_journal_JOURNAL_FORCE_WRITE_BATCH_total"] >= 1
        )
        assert after["bookie_ledgers_count"] >= 1 and after["bookie_entries_count"] >= 20
        info = get_json(url + "/api/v1/bookie/info")
        assert 0 < info["freeSpace"] <= info["totalSpace"]
        assert get_json(url + "/api/v1/bookie/state")["readOnly"] is False
    finally:
        bookie.kill()


def test_a_read_only_bookie_says_so(tmp_path: Path) -> None:
    metadata = f"embedded://{tmp_path / 'meta'}"
    bookie = BookieProcess(tmp_path / "data", metadata, "--min-free-mb", str(1 << 40))  # never enough space
    try:
        url = re.search(r"\(HTTP: (http://\S+)\)", bookie.banner).group(1)  # type: ignore[union-attr]
        assert samples(url)["bookie_SERVER_STATUS"] == 0
        assert get_json(url + "/api/v1/bookie/state")["readOnly"] is True
        store = connect(metadata)
        info = BookieRegistry(store).bookie_info(bookie.address)
        store.close()
        assert info.readonly and info.http_url == url  # moved to the read-only set with its HTTP address
    finally:
        bookie.kill()
