"""The pure parts of compaction (impl/broker/compaction.py and the core's compaction events): keying an
entry's messages, rebuilding a batch with the kept messages, the compacted view's reads, the compacted
entry format, and the core after a failed compacted-ledger write."""

from __future__ import annotations

import pytest

from impl.broker import storage_lifecycle as sl
from impl.broker.compaction import CompactedView, decode_compacted, encode_compacted, keyed, rebuild
from impl.broker.ledger_list import Position
from impl.protocol import entry_codec
from impl.protocol.entry_codec import SingleMessage


def batch(*messages: tuple[str, bytes]) -> bytes:
    return entry_codec.build_messages("p", 7, 1_000, [SingleMessage(v, k) for k, v in messages])


def test_keyed_marks_empty_payloads_as_tombstones_and_skips_keyless_messages() -> None:
    p = Position(3, 4)
    found = keyed(p, batch(("a", b"1"), ("", b"no key"), ("b", b""), ("a", b"2")))
    assert found == [sl.KeyedEntry(p, "a", b"1"), sl.KeyedEntry(p, "b", None), sl.KeyedEntry(p, "a", b"2")]
    assert keyed(p, batch(("", b"alone"))) == []


def test_rebuild_keeps_per_kept_key_its_last_message_of_the_batch() -> None:
    data = batch(("x", b"x1"), ("y", b"y1"), ("x", b"x2"), ("z", b"z1"))
    rebuilt = entry_codec.parse(rebuild(data, {"x", "z"}))
    assert rebuilt.metadata.num_messages_in_batch == 2
    assert [(m.key, m.payload) for m in entry_codec.singles(rebuilt)] == [("x", b"x2"), ("z", b"z1")]
    assert rebuild(batch(("x", b"x1"), ("y", b"y1")), {"x", "y"}) == batch(("x", b"x1"), ("y", b"y1"))
    single = entry_codec.build_messages("p", 1, 1_000, [SingleMessage(b"v", "k")])
    assert rebuild(single, {"k"}) == single  # not a batch: as stored


def test_the_compacted_view_reads_after_a_position() -> None:
    entries = tuple((Position(1, e), b"%d" % e) for e in (0, 3, 5))
    view = CompactedView(Position(1, 9), 42, entries)
    assert view.after(None, 10) == list(entries)
    assert view.after(Position(1, 3), 10) == [entries[2]]
    assert view.after(Position(0, 99), 2) == list(entries[:2])
    assert view.after(Position(1, 5), 10) == []


def test_compacted_entries_carry_their_topic_position() -> None:
    assert decode_compacted(encode_compacted(Position(5, 6), b"entry")) == (Position(5, 6), b"entry")
    with pytest.raises(ValueError, match="no position header"):
        decode_compacted(b"short")


def test_a_failed_compacted_ledger_write_lets_the_next_compaction_run() -> None:
    core = sl.StorageLifecycle("t")
    core.step(sl.Load((), 0, sl.CompactionCursor(0)))
    (read,) = core.step(sl.CompactRequested(Position(1, 2)))
    assert isinstance(read, sl.ReadForCompaction) and read.previous is None and read.after is None
    (write,) = core.step(sl.CompactionRead((sl.KeyedEntry(Position(1, 0), "a", b"1"),)))
    assert isinstance(write, sl.WriteCompactedLedger)
    with pytest.raises(sl.LifecycleError, match="while a compact is running"):
        core.step(sl.CompactRequested(Position(1, 2)))
    assert core.step(sl.CompactedLedgerWriteFailed("bookies down")) == []
    assert core.compaction == sl.CompactionCursor(0)  # nothing swapped
    assert isinstance(core.step(sl.CompactRequested(Position(1, 2)))[0], sl.ReadForCompaction)
