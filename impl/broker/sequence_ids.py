"""The sequence ids a producer has published to a topic, as de-duplication needs them.

Pulsar's rule keeps one number per producer, the highest sequence id pushed, and takes any message at
or below it for a duplicate. A KeyBased batch breaks that: it holds the ids of one key (0, 2, 3, ...
9 beside 1, 5 for another key), so the second batch lies below the first's highest though none of
its messages was ever stored, and Pulsar confirms and drops it. Here a producer's ids are kept as a
set: every id at or below `low`, and the ids above it whose gap below is not filled yet. A message is
a duplicate only when every one of its ids is in the set. Gaps normally fill within a flush; ids a
producer skips for good are given up once MAX_SPARSE are waiting (then the set is Pulsar's number).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from impl.protocol import entry_codec

MAX_SPARSE = 65_536  # ids above `low` kept one by one; more, and the lower half is taken as published


class SequenceIds:
    __slots__ = ("_above", "highest", "low")

    def __init__(self, low: int = -1) -> None:
        self.low = low  # every id at or below is published
        self._above: set[int] = set()  # the published ids above low + 1 (each id in it is > low + 1)
        self.highest = low

    def copy(self) -> SequenceIds:
        other = SequenceIds(self.low)
        other._above, other.highest = set(self._above), self.highest
        return other

    def add_range(self, first: int, last: int) -> None:
        """Ids first..last, all published (a contiguous batch, or one message when first == last)."""
        if first <= self.low + 1 or last - first >= MAX_SPARSE:  # a span too wide to list: taken whole
            if last > self.low:
                self.low = last
                if self._above:
                    self._above = {i for i in self._above if i > last}
        else:
            self._above.update(range(first, last + 1))
            self._bound()
        self._fill()
        self.highest = max(self.highest, last)

    def add(self, ids: Iterable[int]) -> None:
        """Ids that need not be contiguous (a KeyBased batch's)."""
        for i in ids:
            if i > self.low:
                self._above.add(i)
                self.highest = max(self.highest, i)
        self._bound()
        self._fill()

    def covers(self, ids: Iterable[int]) -> bool:
        return all(i <= self.low or i in self._above for i in ids)

    def _fill(self) -> None:
        while self.low + 1 in self._above:
            self.low += 1
            self._above.discard(self.low)

    def _bound(self) -> None:
        if len(self._above) > MAX_SPARSE:
            self.low = sorted(self._above)[len(self._above) // 2]
            self._above = {i for i in self._above if i > self.low}

    def __repr__(self) -> str:
        return f"SequenceIds(low={self.low}, above={sorted(self._above)[:8]}, highest={self.highest})"


def message_ids(first: int, highest: int, count: int, data: bytes) -> Sequence[int]:
    """The sequence ids of an entry's `count` messages. One message: its own. A batch: each message's
    own, from its SingleMessageMetadata, for the batch's metadata cannot be trusted with them: the
    official (C++) client gives a KeyBased batch of ids 1 and 5 the span 1..2 (first + count - 1). A
    client that leaves them out gets the span, Pulsar's rule."""
    span = range(first, max(first, highest) + 1)
    if count <= 1:
        return span
    try:
        ids = entry_codec.batch_sequence_ids(entry_codec.parse(data, verify_checksum=False))
    except entry_codec.CorruptEntry:  # unreadable, or compressed with a codec this process lacks
        return span
    if any(i is None for i in ids):
        return span
    known = [i for i in ids if i is not None]
    if known == list(range(known[0], known[0] + len(known))):
        return range(known[0], known[0] + len(known))  # contiguous: recorded as a range
    return known


def record(ids: SequenceIds, published: Sequence[int], batched: bool) -> None:
    """Add an entry's ids. A message sent on its own (not in a batch) counts every id below it too:
    under Pulsar's rule those are duplicates now, so gaps a producer skips leave nothing to keep."""
    if not batched and len(published):
        ids.add_range(min(published[0], ids.low + 1), published[-1])
    elif isinstance(published, range):
        ids.add_range(published.start, published.stop - 1)
    else:
        ids.add(published)
