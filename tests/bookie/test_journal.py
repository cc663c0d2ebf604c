"""Journal: group commit callbacks after fdatasync, rolling, and replay of torn/corrupt tails."""

from __future__ import annotations

import threading
from pathlib import Path

from impl.bookie.core import JournalRecord, RecordKind
from impl.bookie.entry_format import encode_entry
from impl.bookie.journal import Journal, ReplayReport, encode_record, journal_files, replay


def records(n: int) -> list[JournalRecord]:
    out = [JournalRecord(RecordKind.MASTER_KEY, 1, master_key=b"k" * 20)]
    for i in range(n):
        out.append(JournalRecord(RecordKind.ENTRY, 1, i, b"k" * 20, encode_entry(1, i, i - 1, i, b"x" * (i % 7))))
    out.append(JournalRecord(RecordKind.FENCE, 1, master_key=b"k" * 20))
    out.append(JournalRecord(RecordKind.EXPLICIT_LAC, 1, master_key=b"k" * 20, lac=5))
    return out


def write(directory: Path, recs: list[JournalRecord], roll_size: int = 1 << 30) -> None:
    journal = Journal(directory, roll_size=roll_size)
    done = threading.Event()
    acked: list[int] = []
    for i, r in enumerate(recs):
        journal.append([r], lambda i=i: acked.append(i))
    journal.append([], done.set)
    assert done.wait(10)
    journal.close()
    assert acked == list(range(len(recs)))  # callbacks in append order, all after a flush


def test_roundtrip_and_roll(tmp_path: Path):
    recs = records(50)
    write(tmp_path, recs, roll_size=300)
    assert len(journal_files(tmp_path)) > 1
    report = ReplayReport()
    assert list(replay(tmp_path, report)) == recs
    assert report.torn == [] and report.records == len(recs)


def test_every_truncation_and_flip_of_last_records(tmp_path: Path):
    recs = records(6)
    write(tmp_path, recs)
    (path,) = journal_files(tmp_path)
    original = path.read_bytes()
    ends = []
    pos = 0
    for r in recs:
        pos += len(encode_record(r))
        ends.append(pos)
    assert ends[-1] == len(original)
    start = ends[-4]  # damage anywhere in the last three records
    for offset in range(start, len(original)):
        whole_before = sum(1 for e in ends if e <= offset)
        # truncation at offset
        path.write_bytes(original[:offset])
        report = ReplayReport()
        assert list(replay(tmp_path, report)) == recs[:whole_before]
        assert len(report.torn) == (1 if offset > ends[whole_before - 1] else 0)
        # flip one byte at offset
        damaged = bytearray(original)
        damaged[offset] ^= 0xFF
        path.write_bytes(bytes(damaged))
        report = ReplayReport()
        got = list(replay(tmp_path, report))
        assert got == recs[:whole_before], offset
        assert len(report.torn) == 1 and report.torn[0].offset == ends[whole_before - 1]


def test_journal_files_are_written_synchronously(tmp_path: Path):
    """The writer's one write() per flush is its fdatasync: the file must be open with O_DSYNC."""
    import fcntl
    import os

    journal = Journal(tmp_path)
    try:
        assert fcntl.fcntl(journal._fd, fcntl.F_GETFL) & os.O_DSYNC == os.O_DSYNC
    finally:
        journal.close()


def test_records_checksummed_with_crc32_still_replay(tmp_path: Path):
    """Journals written before the CRC32C frame flag hold CRC32 checksums and a plain length."""
    import struct
    import zlib

    recs = records(4)
    old = b""
    for r in recs:
        payload = encode_record(r)[8:]
        old += struct.pack(">II", len(payload), zlib.crc32(payload)) + payload
    (tmp_path / "journal-0.log").write_bytes(old)
    report = ReplayReport()
    assert list(replay(tmp_path, report)) == recs
    assert report.torn == []
    (tmp_path / "journal-0.log").write_bytes(old[:-1] + bytes([old[-1] ^ 1]))
    report = ReplayReport()
    assert list(replay(tmp_path, report)) == recs[:-1]
    assert report.torn[0].reason == "checksum mismatch"


def test_a_short_write_is_finished_before_the_callbacks(tmp_path: Path, monkeypatch):
    """writev may write less than asked; the rest must reach the file before anyone hears "durable"."""
    import os

    import impl.bookie.journal as journal_module

    real = os.writev
    monkeypatch.setattr(journal_module.os, "writev", lambda fd, parts: real(fd, [b"".join(parts)[:7]]))
    recs = records(5)
    write(tmp_path, recs)
    assert list(replay(tmp_path)) == recs


def test_without_o_dsync_the_writer_calls_fdatasync_before_the_callbacks(tmp_path: Path, monkeypatch):
    """Platforms without O_DSYNC: each flush is a write and then an fdatasync, and only then "durable"."""
    import os

    import impl.bookie.journal as journal_module

    monkeypatch.setattr(journal_module, "O_DSYNC", 0)
    events: list[str] = []
    real = os.fdatasync
    monkeypatch.setattr(journal_module.os, "fdatasync", lambda fd: (events.append("fdatasync"), real(fd))[1])
    journal = Journal(tmp_path)
    done = threading.Event()
    journal.append(records(2), lambda: (events.append("durable"), done.set()))
    assert done.wait(10)
    journal.close()
    assert events == ["fdatasync", "durable"]
    assert list(replay(tmp_path)) == records(2)
