"""The bookie's framed protocol: BookKeeper's framing over plain TCP, carrying the gRPC stream's messages.

BookKeeper's bookies speak their protocol on one port, each message a 4-byte big-endian length and then
the message. pulsar-ref's framed connections do the same with the messages of the gRPC `Batches` stream
(impl/bookie/bookie.proto): a client writes serialized `StreamReqBatch`es, the bookie answers with
`StreamRespBatch`es, their elements matched by tag. Each message costs a length prefix and a system
call, where a gRPC stream message in Python costs a few thread hand-overs in each process.

The bookie serves both on its one port (impl/bookie/listener.py): a framed client writes `PREFACE` first;
anything else (a gRPC client's HTTP/2 preface begins "PRI ") is relayed to the bookie's gRPC server.
A frame longer than `MAX_FRAME` ends the connection, as BookKeeper's frame decoder does, and so does
a frame that does not parse.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator, Sequence

from impl.bookie.wire import MAX_STREAM_MESSAGE

PREFACE = b"PRB1"  # "pulsar-ref bookie, framed, version 1"; HTTP/2's preface starts with b"PRI "
HEADER = struct.Struct(">I")
MAX_FRAME = MAX_STREAM_MESSAGE  # the most one frame may hold: what a gRPC stream message may


class FrameTooLong(ValueError):
    """A frame's length prefix is over MAX_FRAME: the peer does not speak this protocol or is broken."""


def frame(parts: Sequence[bytes]) -> bytes:
    """One frame of the serialized elements `parts` (a batch is its elements joined)."""
    body = b"".join(parts)
    return HEADER.pack(len(body)) + body


def frames(parts: Iterable[bytes], max_bytes: int, max_parts: int | None = None) -> Iterator[bytes]:
    """`parts` in order as frames of at most `max_bytes` (and `max_parts` elements) each; a part larger
    than `max_bytes` makes a frame of its own."""
    batch: list[bytes] = []
    size = 0
    for part in parts:
        if batch and (size + len(part) > max_bytes or len(batch) == max_parts):
            yield frame(batch)
            batch, size = [], 0
        batch.append(part)
        size += len(part)
    if batch:
        yield frame(batch)


class FrameReader:
    """Cuts a byte stream into frames: `feed(data)` yields each frame's body as it completes."""

    def __init__(self, max_frame: int = MAX_FRAME) -> None:
        self.max_frame = max_frame
        self._buffer = bytearray()

    def feed(self, data: bytes) -> Iterator[bytes]:
        buffer = self._buffer
        buffer += data
        start = 0
        while len(buffer) - start >= 4:
            (length,) = HEADER.unpack_from(buffer, start)
            if length > self.max_frame:
                raise FrameTooLong(f"a frame of {length} bytes is over the limit of {self.max_frame}")
            end = start + 4 + length
            if end > len(buffer):
                break
            yield bytes(buffer[start + 4 : end])
            start = end
        if start:
            del buffer[:start]
