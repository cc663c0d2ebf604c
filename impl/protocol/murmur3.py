"""Murmur3 32-bit (seed 0), as Pulsar hashes sticky keys (Key_Shared) and partition keys.

Pulsar's `Murmur3_32Hash.makeHash` is the standard x86 32-bit MurmurHash3 with seed 0 over the
key's bytes, with the sign bit cleared (a Java int made non-negative). Written from the
algorithm's public description; pure Python, as keys are short.
"""

from __future__ import annotations

_C1 = 0xCC9E2D51
_C2 = 0x1B873593
_MASK = 0xFFFFFFFF


def _rotl(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _MASK


def _mix_k(k: int) -> int:
    return (_rotl((k * _C1) & _MASK, 15) * _C2) & _MASK


def murmur3_32(data: bytes, seed: int = 0) -> int:
    """The unsigned 32-bit MurmurHash3 (x86) of `data`."""
    h = seed & _MASK
    whole = len(data) - len(data) % 4
    for i in range(0, whole, 4):
        h ^= _mix_k(int.from_bytes(data[i : i + 4], "little"))
        h = (_rotl(h, 13) * 5 + 0xE6546B64) & _MASK
    tail = data[whole:]
    if tail:
        h ^= _mix_k(int.from_bytes(tail, "little"))
    h ^= len(data)
    h ^= h >> 16
    h = (h * 0x85EBCA6B) & _MASK
    h ^= h >> 13
    h = (h * 0xC2B2AE35) & _MASK
    h ^= h >> 16
    return h


def pulsar_hash(data: bytes) -> int:
    """Pulsar's Murmur3_32Hash.makeHash: non-negative (the top bit cleared)."""
    return murmur3_32(data) & 0x7FFFFFFF
