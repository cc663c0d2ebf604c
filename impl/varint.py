"""Protobuf's base-128 varint, written by hand where a hot path frames protobuf bytes itself: the bookie's
gRPC stream (impl/bookie/wire.py) and the broker's MESSAGE frames (impl/protocol/frames.py). One home, so
both stay the bytes protobuf writes (tests/test_varint.py checks it against protobuf)."""

from __future__ import annotations

_ONE_BYTE = [bytes((n,)) for n in range(0x80)]  # looked up, not built: a frame takes several varints
_UINT64 = 0xFFFFFFFFFFFFFFFF


def varint(n: int) -> bytes:
    """The varint of an int (u)int32/64 field; a negative value (an int64's -1) as its 64-bit two's
    complement, ten bytes, as protobuf writes it."""
    if n < 0x80:
        if n >= 0:
            return _ONE_BYTE[n]
        n &= _UINT64
    elif n < 0x4000:  # two bytes: the length of any 1 KiB entry's frame, ids and tags up to 16383
        return bytes(((n & 0x7F) | 0x80, n >> 7))
    elif n < 0x200000:  # three bytes: ids and a stream's tags up to ~2 million
        return bytes(((n & 0x7F) | 0x80, ((n >> 7) & 0x7F) | 0x80, n >> 14))
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)
