"""Batch-index bitsets as Pulsar's protocol carries them (`ack_set`): java.util.BitSet's words,
signed 64-bit, bit i of the batch in word i // 64 at position i % 64 (pure)."""

from __future__ import annotations


def to_words(indexes: list[int] | tuple[int, ...]) -> list[int]:
    """The words with exactly these bits set."""
    words = [0] * (max(indexes) // 64 + 1)
    for i in indexes:
        words[i // 64] |= 1 << (i % 64)
    return [w - (1 << 64) if w >= 1 << 63 else w for w in words]


def from_words(words: tuple[int, ...] | list[int]) -> set[int]:
    """The bits set in the words."""
    return {w * 64 + b for w, word in enumerate(words) for b in range(64) if (word >> b) & 1}
