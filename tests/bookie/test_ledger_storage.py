"""Ledger storage, checkpoints and garbage collection: entry logs + index, restart from a
checkpoint, journal deletion, SIGKILL between the storage flush and the mark, deleted ledgers."""

from __future__ import annotations

import queue
import threading
from pathlib import Path

import pytest

from impl.bookie import journal as journal_module
from impl.bookie.channel import BookieChannel
from impl.bookie.checkpoint import CorruptCheckpoint, read_mark, write_mark
from impl.bookie.entry_format import encode_entry, master_key
from impl.bookie.entry_log import CorruptEntryLog, log_ids
from impl.bookie.journal import JournalMissing, JournalPosition, file_no, journal_files
from impl.bookie.ledger_index import LedgerMeta, index_path
from impl.bookie.ledger_storage import LedgerStorage
from impl.bookie.protocol import (
    LAST_ENTRY,
    AddRequest,
    ErrorCode,
    ReadLacRequest,
    ReadRequest,
    Request,
    Response,
    WriteLacRequest,
)
from impl.bookie.server import CRASH_AFTER_STORAGE_FLUSH, Bookie
from impl.metadata.ledger import Fragment, LedgerMetadata
from impl.metadata.ledger_store import LedgerMetadataStore
from impl.metadata.store import SessionExpired
from impl.metadata.url import connect
from pulsar_ref.commands import bookie as bookie_command
from tests.bookie.bookie_process import BookieProcess
from tests.waiting import wait_for

KEY = master_key(b"secret")
SLOW = 3600.0  # no periodic checkpoint or GC unless a test asks for one


def body(ledger: int, eid: int, size: int = 100) -> bytes:
    return encode_entry(ledger, eid, eid - 1, eid + 1, bytes([eid % 251]) * size)


def call(bookie: Bookie, request: Request) -> Response:
    answer: queue.Queue[Response] = queue.Queue(1)
    bookie.submit(request, answer.put)
    return answer.get(timeout=10)


def add(bookie: Bookie, ledger: int, eids: range, size: int = 100) -> None:
    for eid in eids:
        assert call(bookie, AddRequest(ledger, eid, KEY, body(ledger, eid, size))).code is ErrorCode.EOK


def crash(bookie: Bookie) -> None:
    """Stop an in-process bookie without its final checkpoint (files stay as a crash leaves them,
    except that the entry log buffer reaches the file: the mark is what matters here)."""
    bookie._stop.set()
    bookie._maintenance_thread.join()
    bookie.journal.close()
    bookie.storage.close()


def test_entry_log_and_index_round_trip(tmp_path: Path):
    storage = LedgerStorage(tmp_path, entry_log_size=2000, read_cache_bytes=0)
    for eid in range(40):
        for ledger in (1, 2):
            storage.put(ledger, eid, body(ledger, eid))
    assert storage.read(2, 39) == body(2, 39)  # still in the entry log's buffer
    assert storage.read(1, 0) == body(1, 0)  # in a rolled log's file
    storage.checkpoint({1: LedgerMeta(KEY, fenced=True, piggybacked_lac=38), 2: LedgerMeta(b"k2", explicit_lac=7)})
    storage.put(3, 0, body(3, 0))  # never checkpointed: not in the index after a restart
    storage.close()
    assert len(log_ids(tmp_path)) > 3  # rolled at 2000 bytes

    reopened = LedgerStorage(tmp_path, read_cache_bytes=0)
    ledgers = reopened.ledgers()
    assert sorted(ledgers) == [1, 2]
    assert ledgers[1].meta == LedgerMeta(KEY, fenced=True, piggybacked_lac=38)
    assert ledgers[2].meta == LedgerMeta(b"k2", explicit_lac=7)
    assert sorted(ledgers[1].locations) == list(range(40))
    for eid in range(40):
        assert reopened.read(1, eid) == body(1, eid) and reopened.read(2, eid) == body(2, eid)
    assert reopened.report.index_damage == [] and reopened.missing_entries() == []

    # a flipped byte in an entry log is a typed error, never a wrong body
    location = ledgers[1].locations[5]
    log_id, offset, size = location
    path = tmp_path / f"entrylog-{log_id}.log"
    data = bytearray(path.read_bytes())
    data[offset + size - 1] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptEntryLog, match="checksum mismatch") as damaged:
        LedgerStorage(tmp_path, read_cache_bytes=0).read(1, 5)
    assert str(damaged.value).startswith(f"{path} offset {offset}: ")  # where, for the operator

    # a torn index tail (crash inside a checkpoint) is reported, cut back, and the whole records kept
    reopened.close()
    index_file = index_path(tmp_path / "index", 2)
    whole = index_file.read_bytes()
    index_file.write_bytes(whole + b"\x00\x00\x00\x30garbage")
    damaged = LedgerStorage(tmp_path, read_cache_bytes=0)
    assert [d.reason for d in damaged.report.index_damage] == ["truncated record"]
    assert sorted(damaged.ledgers()[2].locations) == list(range(40))
    assert index_file.read_bytes() == whole and index_file.with_name(f"{index_file.name}.damaged").exists()
    damaged.close()


def test_checkpoint_mark_is_checked(tmp_path: Path):
    assert read_mark(tmp_path) is None
    write_mark(tmp_path, JournalPosition(3, 4096))
    assert read_mark(tmp_path) == JournalPosition(3, 4096)
    (tmp_path / "checkpoint").write_text((tmp_path / "checkpoint").read_text().replace("4096", "4097"))
    with pytest.raises(CorruptCheckpoint, match="restore the file"):
        read_mark(tmp_path)


def test_a_lost_journal_file_after_the_checkpoint_refuses_to_start(tmp_path: Path):
    bookie = Bookie(tmp_path, checkpoint_interval=SLOW)
    add(bookie, 1, range(3))
    crash(bookie)
    write_mark(tmp_path / "ledgers", JournalPosition(0, 10))  # entries after offset 10 are only in journal-0
    (tmp_path / "journal" / "journal-0.log").unlink()
    with pytest.raises(JournalMissing, match="restore it"):
        Bookie(tmp_path, checkpoint_interval=SLOW)


def test_restart_after_checkpoint_replays_only_the_tail(tmp_path: Path):
    bookie = Bookie(tmp_path, checkpoint_interval=SLOW)
    add(bookie, 1, range(100))
    bookie.checkpoint()
    add(bookie, 1, range(100, 107))
    assert call(bookie, ReadRequest(1, LAST_ENTRY, fence=True, master_key=KEY)).code is ErrorCode.EOK
    assert call(bookie, WriteLacRequest(2, KEY, 5)).code is ErrorCode.EOK  # new ledger: key + LAC records
    crash(bookie)

    restarted = Bookie(tmp_path, checkpoint_interval=SLOW)
    try:
        assert restarted.replay_report.records == 7 + 1 + 2  # the tail only: 7 entries, a fence, ledger 2
        for eid in range(107):
            assert call(restarted, ReadRequest(1, eid)).body == body(1, eid)
        assert call(restarted, AddRequest(1, 107, KEY, body(1, 107))).code is ErrorCode.EFENCED
        assert call(restarted, ReadLacRequest(2)).lac == 5
        assert call(restarted, ReadLacRequest(1)).lac == 105  # piggybacked on entry 106
    finally:
        restarted.close()
    # a graceful close checkpoints: nothing left to replay, the state comes from the index
    again = Bookie(tmp_path, checkpoint_interval=SLOW)
    try:
        assert again.replay_report.records == 0
        assert again.core.ledgers[1].fenced and len(again.core.ledgers[1].entries) == 107
        assert call(again, ReadLacRequest(2)).lac == 5
    finally:
        again.close()


@pytest.mark.parametrize("sync_bytes", [64 * 1024, 0])
def test_entry_logs_are_fsynced_by_volume_between_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, sync_bytes: int
):
    """With `entry_log_sync_bytes`, the entry logs are fsynced as they fill, not only at checkpoints."""
    bookie = Bookie(tmp_path, checkpoint_interval=SLOW, entry_log_sync_bytes=sync_bytes)
    logger = bookie.storage.entry_logger
    assert logger is not None
    synced: list[list[int]] = []
    real_sync = logger.sync
    monkeypatch.setattr(logger, "sync", lambda logs, new: (synced.append(logs), real_sync(logs, new)))
    try:
        add(bookie, 1, range(150), size=1000)  # ~150 KiB
        if sync_bytes:  # the maintenance thread ticks often: wait for the sync, then a few more rounds
            wait_for(lambda: synced, "an entry-log sync by volume")
            rounds = bookie.maintenance_rounds
            wait_for(lambda: bookie.maintenance_rounds >= rounds + 3, "three more maintenance rounds")
        # (without entry_log_sync_bytes it ticks only at checkpoint_interval, which is SLOW: no round runs)
        assert bookie.checkpoints == 0
        if sync_bytes:
            assert synced and synced[0] == [logger.current], synced
            assert bookie.storage.unsynced_bytes < sync_bytes
        else:
            assert synced == [] and bookie.storage.unsynced_bytes > 150_000
    finally:
        bookie.close()


def test_journal_files_before_the_checkpoint_are_deleted(tmp_path: Path):
    bookie = Bookie(tmp_path, checkpoint_interval=SLOW, journal_roll_size=4096)
    try:
        add(bookie, 1, range(200))
        files = journal_files(tmp_path / "journal")
        assert len(files) > 5
        mark = bookie.checkpoint()
        left = journal_files(tmp_path / "journal")
        assert [int(p.stem.split("-")[1]) for p in left] == [mark.file_no]
        assert read_mark(tmp_path / "ledgers") == mark
    finally:
        bookie.close()
    restarted = Bookie(tmp_path, checkpoint_interval=SLOW)
    try:
        assert restarted.replay_report.records == 0
        for eid in range(200):  # from entry logs alone: the journal that held them is gone
            assert call(restarted, ReadRequest(1, eid)).body == body(1, eid)
    finally:
        restarted.close()


def test_reads_never_wait_for_the_journal_fsync(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    bookie = Bookie(tmp_path, checkpoint_interval=SLOW)
    try:
        add(bookie, 1, range(5))
        release = threading.Event()
        real = journal_module.os.writev
        journal_fd = bookie.journal._fd

        stuck = threading.Event()

        def stuck_disk(fd: int, parts: list[bytes]) -> int:  # the journal's write is its sync (O_DSYNC)
            if fd == journal_fd:
                stuck.set()
                release.wait(30)
            return real(fd, parts)

        monkeypatch.setattr(journal_module.os, "writev", stuck_disk)
        acked: queue.Queue[Response] = queue.Queue()
        bookie.submit(AddRequest(1, 5, KEY, body(1, 5)), acked.put)
        assert stuck.wait(10), "the journal never wrote the add"
        assert acked.empty()  # the journal is stuck in its synchronous write
        for eid in range(6):  # stored entries, and the one not yet durable (stored before its journal append)
            assert call(bookie, ReadRequest(1, eid)).body == body(1, eid)
        assert call(bookie, ReadLacRequest(1)).code is ErrorCode.EOK
        bookie.checkpoint()  # a checkpoint does not wait for the journal either
        assert acked.empty()
        release.set()
        assert acked.get(timeout=10).code is ErrorCode.EOK
    finally:
        release.set()
        bookie.close()


def _metadata() -> LedgerMetadata:
    return LedgerMetadata(1, 1, 1, (Fragment(0, ("127.0.0.1:1",)),), password=b"secret")


def test_gc_removes_deleted_ledgers_and_their_entry_logs(tmp_path: Path):
    store = connect(f"embedded://{tmp_path / 'meta'}")
    ledgers = LedgerMetadataStore(store)
    gone, live = ledgers.create(_metadata()), ledgers.create(_metadata())
    bookie = Bookie(tmp_path / "data", checkpoint_interval=SLOW, gc_interval=SLOW, metadata=store, entry_log_size=8192)
    try:
        add(bookie, gone, range(300), size=200)  # fills whole entry logs with `gone` alone
        add(bookie, live, range(20), size=200)
        assert bookie.collect_garbage().ledgers_deleted == []  # both have metadata
        logs_before = log_ids(tmp_path / "data" / "ledgers")
        ledgers.delete(gone)
        result = bookie.collect_garbage()
        assert result.ledgers_deleted == [gone]
        assert len(result.entry_logs_deleted) >= 5
        assert set(log_ids(tmp_path / "data" / "ledgers")) == set(logs_before) - set(result.entry_logs_deleted)
        assert not index_path(tmp_path / "data" / "ledgers" / "index", gone).exists()
        assert call(bookie, ReadRequest(gone, 0)).code is ErrorCode.ENOLEDGER
        for eid in range(20):
            assert call(bookie, ReadRequest(live, eid)).body == body(live, eid, 200)
        # no answer from the metadata store is not "deleted": the round fails, nothing is dropped
        store.close()
        with pytest.raises(SessionExpired, match="closed"):
            bookie.collect_garbage()
        assert live in bookie.core.ledgers
    finally:
        bookie.close()
    restarted = Bookie(tmp_path / "data", checkpoint_interval=SLOW)
    try:
        assert gone not in restarted.core.ledgers
        assert call(restarted, ReadRequest(live, 19)).body == body(live, 19, 200)
    finally:
        restarted.close()


def test_inspect_shows_checkpoint_entry_logs_and_index(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    for _ in range(2):  # the second start begins a new journal file; its checkpoint deletes the first
        bookie = Bookie(tmp_path, checkpoint_interval=SLOW)
        try:
            if 5 not in bookie.core.ledgers:
                add(bookie, 5, range(3))
                assert call(bookie, ReadRequest(5, 0, fence=True, master_key=KEY)).code is ErrorCode.EOK
        finally:
            bookie.close()
    assert [p.name for p in journal_files(tmp_path / "journal")] == ["journal-1.log"]
    assert bookie_command.main(["inspect", "--data", str(tmp_path)], "pulsar-ref bookie") == 0
    out = capsys.readouterr().out
    assert "checkpoint: journal file 1 offset 0" in out
    assert "journal" in out and "0 records" in out
    assert "entrylog-0.log:" in out and "3 live entries" in out
    assert "ledger index: 1 files" in out
    assert "ledger 5: entries 3 [0..2] fenced=True lac=1" in out


@pytest.mark.processes
def test_sigkill_between_storage_flush_and_checkpoint_loses_nothing(tmp_path: Path):
    metadata = f"embedded://{tmp_path / 'meta'}"
    options = ("--checkpoint-interval", "3600", "--journal-roll-size", "4096", "--entry-log-size", "8192")
    bookie = BookieProcess(tmp_path / "data", metadata, *options, "--crash-at", CRASH_AFTER_STORAGE_FLUSH)
    try:
        channel = BookieChannel(bookie.address)
        futures = [channel.submit(AddRequest(1, eid, KEY, body(1, eid))) for eid in range(300)]
        assert all(f.result(10).code is ErrorCode.EOK for f in futures)
        assert channel.call(ReadRequest(2, LAST_ENTRY, fence=True, master_key=KEY)).code is ErrorCode.ENOENTRY
        assert channel.call(WriteLacRequest(1, KEY, 299)).code is ErrorCode.EOK
        channel.close()
        assert bookie.terminate() == -9  # graceful stop checkpoints, and dies after the storage flush
    finally:
        bookie.ensure_stopped()
    storage_dir = tmp_path / "data" / "ledgers"
    assert index_path(storage_dir / "index", 1).exists()  # the flush happened...
    assert read_mark(storage_dir) is None  # ...the mark did not
    assert len(journal_files(tmp_path / "data" / "journal")) > 1  # so no journal file was deleted

    bookie = BookieProcess(tmp_path / "data", metadata, *options)
    try:
        assert bookie.replayed == 1 + 300 + 2 + 1  # the whole journal: key, entries, fence (key + flag), LAC
        channel = BookieChannel(bookie.address)
        for eid in range(300):
            assert channel.call(ReadRequest(1, eid)).body == body(1, eid)
        assert channel.call(AddRequest(2, 0, KEY, body(2, 0))).code is ErrorCode.EFENCED
        assert channel.call(ReadLacRequest(1)).lac == 299
        channel.close()
        assert bookie.terminate() == 0  # this time the checkpoint completes
    finally:
        bookie.ensure_stopped()
    assert read_mark(storage_dir) is not None
    assert len(journal_files(tmp_path / "data" / "journal")) == 1


@pytest.mark.processes
def test_bookie_process_checkpoints_and_collects_garbage_while_killed(tmp_path: Path):
    """Periodic checkpoints and GC in a real process, SIGKILLed repeatedly under load: every
    acknowledged entry of the live ledger survives, the deleted ledger goes away for good."""
    metadata = f"embedded://{tmp_path / 'meta'}"
    store = connect(metadata)
    ledgers = LedgerMetadataStore(store)
    live, doomed = ledgers.create(_metadata()), ledgers.create(_metadata())
    options = (
        *("--checkpoint-interval", "0.05", "--gc-interval", "0.3"),
        *("--journal-roll-size", "16384", "--entry-log-size", "16384"),
    )
    storage_dir, journal_dir = tmp_path / "data" / "ledgers", tmp_path / "data" / "journal"
    acked: list[int] = []
    try:
        for round_no in range(4):
            bookie = BookieProcess(tmp_path / "data", metadata, *options)
            try:
                channel = BookieChannel(bookie.address)
                for eid in acked:
                    assert channel.call(ReadRequest(live, eid)).body == body(live, eid), (round_no, eid)
                start = len(acked)
                eids = range(start, start + 400)
                futures = {eid: channel.submit(AddRequest(live, eid, KEY, body(live, eid))) for eid in eids}
                if round_no < 2:  # written before its metadata is deleted (a later add is refused, as fenced)
                    for eid in range(start, start + 50):
                        channel.submit(AddRequest(doomed, eid, KEY, body(doomed, eid)))
                for eid, fut in futures.items():
                    if fut.result(10).code is ErrorCode.EOK:
                        acked.append(eid)
                if round_no == 1:
                    ledgers.delete(doomed)
                if round_no == 3:
                    wait_for(
                        lambda c=channel: c.call(ReadLacRequest(doomed)).code is ErrorCode.ENOLEDGER,
                        "garbage collection of the deleted ledger",
                    )
                # A checkpoint after every add of the round, then crash in the middle of whatever runs next.
                wait_for(
                    lambda: read_mark(storage_dir) == _journal_end(journal_dir), "a checkpoint of the whole journal"
                )
                channel.close()
            finally:
                bookie.kill()
        assert acked == list(range(1600))
        assert len(journal_files(journal_dir)) < 10  # checkpoints deleted the rest
    finally:
        store.close()


def _journal_end(journal_dir: Path) -> JournalPosition:
    """Where a bookie's journal ends: its newest file, at that file's size (a journal file is written
    only by appends, so its size is the position after its last record)."""
    newest = journal_files(journal_dir)[-1]
    return JournalPosition(file_no(newest), newest.stat().st_size)
