"""The sequence ids de-duplication keeps per producer (impl/broker/sequence_ids.py)."""

from __future__ import annotations

import struct

from impl.broker.sequence_ids import MAX_SPARSE, SequenceIds, message_ids, record
from impl.protocol import pulsar_api_pb2 as api
from impl.protocol.entry_codec import SingleMessage, build, build_messages, metadata_for


def test_interleaved_batches_are_not_taken_for_each_other() -> None:
    ids = SequenceIds()
    ids.add([0, 2, 3, 4, 6, 7, 8, 9])  # one key's KeyBased batch
    assert ids.highest == 9 and ids.low == 0
    assert not ids.covers([1, 5])  # the other key's: under the highest, never pushed
    ids.add([1, 5])
    assert ids.covers(range(10)) and ids.low == 9


def test_contiguous_ranges_move_the_low_mark_and_fill_gaps() -> None:
    ids = SequenceIds(low=4)
    ids.add_range(8, 9)  # a gap 5..7 below
    assert ids.low == 4 and ids.covers([8, 9]) and not ids.covers([6])
    ids.add_range(5, 7)
    assert ids.low == 9 and ids.highest == 9
    ids.add_range(3, 12)  # overlapping what is there
    assert ids.low == 12 and ids.covers(range(0, 13)) and not ids.covers([13])


def test_a_copy_is_independent() -> None:
    ids = SequenceIds()
    ids.add([0, 2])
    copy = ids.copy()
    ids.add([1])
    assert ids.covers([1]) and not copy.covers([1])


def test_gaps_never_filled_are_given_up_past_the_bound() -> None:
    ids = SequenceIds()
    for i in range(0, 2 * (MAX_SPARSE + 1), 2):  # every other id: each leaves a gap
        ids.add_range(i + 1, i + 1)
    assert ids.low >= MAX_SPARSE // 2  # the lower half taken as published: Pulsar's rule for them
    assert ids.covers([2]) and ids.highest == 2 * MAX_SPARSE + 1


def test_a_span_too_wide_to_list_is_taken_whole() -> None:
    ids = SequenceIds()
    ids.add_range(10, 10 + 10 * MAX_SPARSE)
    assert ids.low == 10 + 10 * MAX_SPARSE


def keybased_batch(ids: list[int]) -> bytes:
    """A batch as the official client sends KeyBased ones: the batch says first..first + count - 1,
    each message's SingleMessageMetadata its own id."""
    payload = b""
    for i in ids:
        single = api.SingleMessageMetadata(payload_size=1, sequence_id=i).SerializeToString()
        payload += struct.pack(">I", len(single)) + single + b"x"
    messages = [SingleMessage(b"x") for _ in ids]
    return build(metadata_for("p", ids[0], 0, messages, batch=True), payload)


def test_message_ids_reads_a_batchs_own_ids() -> None:
    batch = build_messages("p", 0, 0, [SingleMessage(b"a"), SingleMessage(b"b"), SingleMessage(b"c")])
    assert message_ids(0, 2, 3, batch) == range(0, 3)  # contiguous: recorded as a range
    assert message_ids(1, 2, 2, keybased_batch([1, 5])) == [1, 5]  # not the 1..2 the batch claims
    assert message_ids(7, 7, 1, b"not even read") == range(7, 8)  # one message: its own id
    assert message_ids(0, 9, 3, b"not an entry") == range(0, 10)  # unreadable: Pulsar's span


def test_a_message_sent_on_its_own_counts_the_ids_below_it() -> None:
    """Pulsar's rule for unbatched sends: ids a producer skipped are duplicates from then on, so no gap
    is kept open for them (a producer that skips ids costs nothing)."""
    ids = SequenceIds()
    record(ids, range(0, 3), batched=False)
    record(ids, range(7, 8), batched=False)  # 3..6 skipped
    assert ids.low == 7 and ids.covers([5])
    record(ids, [9, 11], batched=True)  # a KeyBased batch's ids: 8 and 10 stay open
    assert not ids.covers([8]) and not ids.covers([10]) and ids.covers([9, 11])
