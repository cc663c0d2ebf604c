"""Real bookie processes over gRPC: crash consistency under SIGKILL, fencing across restart, bad input."""

from __future__ import annotations

import random
import threading
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from impl.bookie.channel import BookieChannel
from impl.bookie.entry_format import decode_entry, encode_entry, master_key
from impl.bookie.protocol import (
    LAST_ENTRY,
    AddRequest,
    AddResponse,
    ErrorCode,
    ReadLacRequest,
    ReadRequest,
    ReadResponse,
)
from impl.metadata.ledger import DigestType
from impl.metadata.registry import BookieRegistry
from impl.metadata.url import connect
from tests.bookie.bookie_process import BookieProcess

pytestmark = pytest.mark.processes
PASSWORD = b"secret"
KEY = master_key(PASSWORD)


def body(ledger: int, eid: int) -> bytes:
    return encode_entry(ledger, eid, eid - 1, eid, b"%d:%d" % (ledger, eid) * 20, DigestType.CRC32C, PASSWORD)


MAX_ADDS_PER_LIFE = 400


def test_sigkill_never_loses_an_acknowledged_entry(tmp_path: Path):
    metadata = f"embedded://{tmp_path / 'meta'}"
    rng = random.Random(4)
    acked: set[int] = set()
    next_id = 0
    for kill_point in range(20):
        bookie = BookieProcess(tmp_path / "data", metadata)
        try:
            channel = BookieChannel(bookie.address)
            # everything acknowledged before, across all earlier kills, reads back byte-identical and
            # verifies (reads pipelined: one round trip each would make the test quadratic in time)
            reads = {eid: channel.submit(ReadRequest(1, eid)) for eid in sorted(acked)}
            for eid, read in reads.items():
                resp = read.result(timeout=60)
                assert isinstance(resp, ReadResponse) and resp.code is ErrorCode.EOK, (kill_point, eid, resp)
                assert resp.body == body(1, eid)
                decode_entry(resp.body, DigestType.CRC32C, PASSWORD, 1, eid)
            # adds for a random while, at most MAX_ADDS_PER_LIFE (a loaded machine must not grow the test)
            stop = time.monotonic() + rng.uniform(0.05, 0.4)
            futures = []
            while time.monotonic() < stop and len(futures) < MAX_ADDS_PER_LIFE:
                eid = next_id
                next_id += 1
                fut = channel.submit(AddRequest(1, eid, KEY, body(1, eid)))
                fut.add_done_callback(
                    lambda f, eid=eid: (
                        acked.add(eid)
                        if f.exception() is None and f.result() == AddResponse(1, eid, ErrorCode.EOK)
                        else None
                    )
                )
                futures.append(fut)
                if len(futures) % 50 == 0:
                    time.sleep(0.001)
        finally:
            bookie.kill()  # SIGKILL while adds are in flight
        channel.close()
    assert len(acked) > 100


def test_fencing_survives_restart_and_wrong_key_fences_nothing(tmp_path: Path):
    metadata = f"embedded://{tmp_path / 'meta'}"
    bookie = BookieProcess(tmp_path / "data", metadata)
    try:
        ch = BookieChannel(bookie.address)
        assert ch.call(AddRequest(1, 0, KEY, body(1, 0))).code is ErrorCode.EOK
        assert ch.call(AddRequest(2, 0, KEY, body(2, 0))).code is ErrorCode.EOK
        assert ch.call(ReadRequest(2, LAST_ENTRY, fence=True, master_key=b"wrong")).code is ErrorCode.EUA
        fenced = ch.call(ReadRequest(1, LAST_ENTRY, fence=True, master_key=KEY))
        assert fenced.code is ErrorCode.EOK and fenced.entry_id == 0
        ch.close()
    finally:
        bookie.kill()
    bookie = BookieProcess(tmp_path / "data", metadata)
    try:
        ch = BookieChannel(bookie.address)
        assert ch.call(AddRequest(1, 1, KEY, body(1, 1))).code is ErrorCode.EFENCED
        assert ch.call(AddRequest(1, 1, KEY, body(1, 1), recovery=True)).code is ErrorCode.EOK
        assert ch.call(ReadRequest(1, 1)).body == body(1, 1)
        assert ch.call(AddRequest(2, 1, KEY, body(2, 1))).code is ErrorCode.EOK  # wrong key fenced nothing
        assert ch.call(ReadLacRequest(2)).lac == 0
        ch.close()
        # registered while alive, unregistered by a graceful shutdown
        store = connect(metadata)
        try:
            assert bookie.address in BookieRegistry(store).writable_bookies()
            assert bookie.terminate() == 0
            assert bookie.address not in BookieRegistry(store).writable_bookies()
        finally:
            store.close()
    finally:
        bookie.ensure_stopped()


ids = st.integers(min_value=-(2**63), max_value=2**63 - 1)


def test_bad_input_gets_error_codes_and_bookie_keeps_serving(tmp_path: Path):
    bookie = BookieProcess(tmp_path / "data", f"embedded://{tmp_path / 'meta'}")
    try:
        bad = BookieChannel(bookie.address)
        good = BookieChannel(bookie.address)
        assert good.call(AddRequest(7, 0, KEY, body(7, 0))).code is ErrorCode.EOK

        @settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
        @given(ledger=ids, eid=ids, raw=st.binary(max_size=80), fence=st.booleans())
        def check(ledger: int, eid: int, raw: bytes, fence: bool) -> None:
            add = bad.call(AddRequest(ledger, eid, KEY, raw))
            assert add.code in (ErrorCode.EBADREQ, ErrorCode.EOK, ErrorCode.EFENCED, ErrorCode.EUA)
            if ledger < 0 or eid < 0 or len(raw) < 32:
                assert add.code is ErrorCode.EBADREQ
            read = bad.call(ReadRequest(ledger, eid, fence=fence))
            if fence or ledger < 0 or eid < -1:
                assert read.code is ErrorCode.EBADREQ
            assert good.call(ReadRequest(7, 0)).body == body(7, 0)

        check()
        oversize = bad.call(AddRequest(7, 1, KEY, body(7, 1) + b"x" * (6 * 1024 * 1024)))
        assert oversize.code is ErrorCode.EBADREQ
        assert good.call(ReadRequest(7, 0)).body == body(7, 0)
        bad.close()
        good.close()
    finally:
        bookie.kill()


def test_netty_max_frame_size_bytes_bounds_an_add(tmp_path: Path):
    """The frame limit is a setting (BookKeeper's nettyMaxFrameSizeBytes): an add up to it is stored, a
    bigger one refused (EBADREQ, for good), and the bookie keeps serving."""
    limit = 64 * 1024
    bookie = BookieProcess(
        tmp_path / "data", f"embedded://{tmp_path / 'meta'}", "--netty-max-frame-size-bytes", str(limit)
    )
    try:
        ch = BookieChannel(bookie.address)
        fits = encode_entry(5, 0, -1, 0, b"x" * 1000, DigestType.CRC32C, PASSWORD)
        fits = encode_entry(5, 0, -1, 0, b"x" * (1000 + limit - len(fits)), DigestType.CRC32C, PASSWORD)
        assert len(fits) == limit
        assert ch.call(AddRequest(5, 0, KEY, fits)).code is ErrorCode.EOK
        over = encode_entry(5, 1, 0, 1, b"x" * (limit - 8), DigestType.CRC32C, PASSWORD)
        assert len(over) > limit
        assert ch.call(AddRequest(5, 1, KEY, over)).code is ErrorCode.EBADREQ
        assert ch.call(AddRequest(5, 1, KEY, body(5, 1))).code is ErrorCode.EOK
        assert ch.call(ReadRequest(5, 0)).body == fits
        ch.close()
    finally:
        bookie.kill()


def test_reads_complete_while_journal_saturated(tmp_path: Path):
    bookie = BookieProcess(tmp_path / "data", f"embedded://{tmp_path / 'meta'}")
    try:
        writer = BookieChannel(bookie.address)
        reader = BookieChannel(bookie.address)
        for eid in range(10):
            assert writer.call(AddRequest(3, eid, KEY, body(3, eid))).code is ErrorCode.EOK
        stop = threading.Event()
        outstanding: list = []

        def flood() -> None:
            eid = 1000
            while not stop.is_set():
                outstanding.append(writer.submit(AddRequest(4, eid, KEY, body(4, eid))))
                eid += 1

        t = threading.Thread(target=flood)
        t.start()
        try:
            time.sleep(0.2)
            reads_done = 0
            for i in range(50):
                resp = reader.call(ReadRequest(3, i % 10), timeout=30)
                assert resp.body == body(3, i % 10)
                reads_done += 1
            pending_adds = sum(1 for f in outstanding if not f.done())
        finally:
            stop.set()
            t.join()
        assert reads_done == 50
        # the journal was genuinely saturated: adds were still queued when reads finished
        assert pending_adds > 0
        writer.close()
        reader.close()
    finally:
        bookie.kill()


def test_restart_on_its_old_port_right_after_sigkill_waits_for_the_old_registration(tmp_path: Path):
    metadata = f"embedded://{tmp_path / 'meta'}"
    crashed = BookieProcess(tmp_path / "data", metadata)
    crashed.kill()  # its session (and registration) live on until the store's session timeout
    restarted = BookieProcess(tmp_path / "data", metadata, "--port", str(crashed.port))
    try:
        assert restarted.address == crashed.address
        store = connect(metadata)
        try:
            assert restarted.address in BookieRegistry(store).writable_bookies()
        finally:
            store.close()
        assert restarted.terminate() == 0
        assert restarted.proc.stderr is not None
        assert "previous session's registration is still there" in restarted.proc.stderr.read()
    finally:
        restarted.ensure_stopped()
