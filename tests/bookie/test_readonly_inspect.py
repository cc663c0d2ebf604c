"""Read-only mode below the free-disk threshold, and `pulsar-ref bookie inspect`."""

from __future__ import annotations

import queue
from pathlib import Path

import pytest

from impl.bookie.entry_format import encode_entry
from impl.bookie.protocol import AddRequest, ErrorCode, ReadRequest, Request, Response
from impl.bookie.server import Bookie
from pulsar_ref.commands import bookie as bookie_command

KEY = b"k" * 20


def call(bookie: Bookie, request: Request) -> Response:
    answer: queue.Queue[Response] = queue.Queue(1)
    bookie.submit(request, answer.put)
    return answer.get(timeout=10)


def test_readonly_when_disk_below_threshold(tmp_path: Path):
    seen: list[bool] = []
    bookie = Bookie(tmp_path, on_readonly=seen.append)
    try:
        assert call(bookie, AddRequest(1, 0, KEY, encode_entry(1, 0, -1, 1, b"a"))).code is ErrorCode.EOK
        bookie.min_free_bytes = 1 << 62  # more than any disk has free
        bookie.check_disk()
        assert seen == [True]
        assert call(bookie, AddRequest(1, 1, KEY, encode_entry(1, 1, 0, 2, b"b"))).code is ErrorCode.EREADONLY
        assert call(bookie, ReadRequest(1, 0)).code is ErrorCode.EOK
        bookie.min_free_bytes = 0
        bookie.check_disk()
        assert seen == [True, False]
        assert call(bookie, AddRequest(1, 1, KEY, encode_entry(1, 1, 0, 2, b"b"))).code is ErrorCode.EOK
    finally:
        bookie.close()


def test_inspect_lists_ledgers_and_journal(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    bookie = Bookie(tmp_path)
    try:
        for eid in range(3):
            assert call(bookie, AddRequest(5, eid, KEY, encode_entry(5, eid, eid - 1, eid, b"x"))).code is ErrorCode.EOK
        assert call(bookie, ReadRequest(5, 0, fence=True, master_key=KEY)).code is ErrorCode.EOK
    finally:
        bookie.close()
    assert bookie_command.main(["inspect", "--data", str(tmp_path)], "pulsar-ref bookie") == 0
    out = capsys.readouterr().out
    assert "ledger 5: entries 3 [0..2] fenced=True lac=1" in out
    assert bookie_command.main(["inspect", "--data", str(tmp_path / "nope")], "pulsar-ref bookie") == 2
