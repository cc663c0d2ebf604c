"""Where a bookie's replies go: the replies of one stream, delivered several at once.

`Bookie._send` groups the replies whose delivery is a `StreamReply` by their stream, so that the replies
ready together leave together: in one gRPC stream message, one framed frame (impl/bookie/listener.py), or
one hand-over to an in-process client's channel (impl/bookie/client/local_channel.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from impl.bookie.protocol import Response

# Of read replies per stream message or frame (gRPC caps a message, and framed.MAX_FRAME a frame, at 16 MiB).
MAX_REPLY_BATCH_BYTES = 4 * 1024 * 1024


class ReplyStream(Protocol):
    """Where the replies of one stream go, several at once: a framed connection (impl/bookie/listener.py), a
    gRPC stream's `StreamReplies`, or an in-process client's channel (impl/bookie/client/local_channel.py)."""

    def deliver_many(self, replies: Sequence[tuple[int, Response]]) -> None: ...


class StreamReply:
    """The Deliver of one request of a stream: `Bookie._send` groups these by stream."""

    __slots__ = ("stream", "tag")

    def __init__(self, stream: ReplyStream, tag: int) -> None:
        self.stream = stream
        self.tag = tag

    def __call__(self, response: Response) -> None:
        self.stream.deliver_many([(self.tag, response)])
