"""Conversion between impl.bookie.protocol dataclasses and the bookie.proto messages.

Clients send requests as serialized `StreamReqBatch` elements (`request_frame`), not as message
objects: the writer sends each add to Qw bookies, and the frames of those copies differ only in
their tag, so the request body is serialized once and only a few bytes are written per copy.
Building a `StreamReq` per copy (and copying it again into the batch) cost ~15 us per add against
~6 us this way (bench/history/client.md). Bookies answer likewise with `StreamRespBatch` elements
(`response_frame`): add and read replies, one per entry, are written here without two message
objects each and a batch object to copy them into."""

from __future__ import annotations

import queue
from collections import deque
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import grpc
import grpc.aio

from impl.bookie import bookie_pb2 as pb
from impl.bookie.protocol import (
    AddRequest,
    AddResponse,
    ErrorCode,
    ReadLacRequest,
    ReadLacResponse,
    ReadRequest,
    ReadResponse,
    Request,
    Response,
    WriteLacRequest,
    WriteLacResponse,
)
from impl.varint import varint


def request_from_pb(msg: pb.StreamReq) -> Request | None:
    """The request in a stream message, or None when it carries none (EBADREQ)."""
    which = msg.WhichOneof("op")
    if which == "add":
        return add_from_pb(msg.add)
    if which == "read":
        return read_from_pb(msg.read)
    if which == "read_lac":
        return ReadLacRequest(msg.read_lac.ledger_id)
    if which == "write_lac":
        return WriteLacRequest(msg.write_lac.ledger_id, msg.write_lac.master_key, msg.write_lac.lac)
    return None


def add_from_pb(m: pb.AddReq) -> AddRequest:
    return AddRequest(m.ledger_id, m.entry_id, m.master_key, m.body, m.recovery)


def read_from_pb(m: pb.ReadReq) -> ReadRequest:
    return ReadRequest(m.ledger_id, m.entry_id, m.fence, m.master_key if m.has_master_key else None)


def request_to_pb(tag: int, request: Request) -> pb.StreamReq:
    if isinstance(request, AddRequest):
        return pb.StreamReq(tag=tag, add=add_to_pb(request))
    if isinstance(request, ReadRequest):
        return pb.StreamReq(tag=tag, read=read_to_pb(request))
    if isinstance(request, ReadLacRequest):
        return pb.StreamReq(tag=tag, read_lac=pb.ReadLacReq(ledger_id=request.ledger_id))
    return pb.StreamReq(
        tag=tag,
        write_lac=pb.WriteLacReq(ledger_id=request.ledger_id, master_key=request.master_key, lac=request.lac),
    )


BATCHES_METHOD = "/pulsar_ref.bookie.Bookie/Batches"
# The largest stream message either side accepts. Batches are cut at about 4 MiB, but a batch may
# pass that by one entry, so both ends must take more than gRPC's default of 4 MiB (a read of large
# entries, e.g. 128 KiB Pulsar batches, failed with RESOURCE_EXHAUSTED on the client).
MAX_STREAM_MESSAGE = 16 * 1024 * 1024
CHANNEL_OPTIONS = [
    ("grpc.max_send_message_length", MAX_STREAM_MESSAGE),
    ("grpc.max_receive_message_length", MAX_STREAM_MESSAGE),
]
# The largest entry a bookie can be set to take (its nettyMaxFrameSizeBytes): a stream message holds
# frames up to about 4 MiB plus one more (impl/bookie/channel.py MAX_BATCH_BYTES, replies.py
# MAX_REPLY_BATCH_BYTES), and must stay within MAX_STREAM_MESSAGE. Bigger messages are chunked.
MAX_FRAME_SIZE_LIMIT = MAX_STREAM_MESSAGE - 4 * 1024 * 1024 - 64 * 1024
# Protobuf wire keys (field number << 3 | wire type): StreamReqBatch.requests (1, length-delimited)
# and StreamReq.tag (1, varint).
_REQUESTS_KEY, _TAG_KEY = b"\x0a", b"\x08"


# The op fields by hand: StreamReq.add (2) and .read (3), as StreamResp's, are length-delimited; in the
# four messages, ledger_id (1) and entry_id (2) are varints; in AddResp and ReadResp, code (3) is a varint
# and ReadResp.body (4) length-delimited, as AddReq.body (4). The other keys are written where used.
_ADD_KEY, _READ_KEY = b"\x12", b"\x1a"
_LEDGER_KEY, _ENTRY_KEY, _CODE_KEY, _BODY_KEY = b"\x08", b"\x10", b"\x18", b"\x22"


def _ids(ledger_id: int, entry_id: int) -> bytes:
    """The ledger_id (1) and entry_id (2) fields that AddReq, ReadReq, AddResp and ReadResp all begin with."""
    return _LEDGER_KEY + varint(ledger_id) + _ENTRY_KEY + varint(entry_id)


def request_frame(tag: int, request: Request, encoded: dict[int, bytes] | None = None) -> bytes:
    """`request` with `tag` as one serialized element of a StreamReqBatch: a batch is the frames joined.

    `encoded` (keyed by id(), so the caller keeps the requests alive while it lives) carries the
    serialized op of each request already framed, for the copies of one add sent to other bookies."""
    op = encoded.get(id(request)) if encoded is not None else None
    if op is None:
        op = _request_op(request)
        if encoded is not None:
            encoded[id(request)] = op
    tag_bytes = varint(tag)
    return b"".join((_REQUESTS_KEY, varint(1 + len(tag_bytes) + len(op)), _TAG_KEY, tag_bytes, op))  # one copy


def _request_op(request: Request) -> bytes:
    """The op field of a StreamReq (key, length, message): adds and reads, one per entry, written here
    (fields at their default left out, as proto3 does); the rest through protobuf, where a StreamReq
    with tag 0 (left out) serializes to just its op field."""
    kind = type(request)
    if kind is AddRequest:
        assert isinstance(request, AddRequest)
        fields = [_ids(request.ledger_id, request.entry_id)]
        if request.master_key:
            fields += (b"\x1a", varint(len(request.master_key)), request.master_key)  # AddReq.master_key (3)
        if request.body:
            fields += (_BODY_KEY, varint(len(request.body)), request.body)  # AddReq.body (4)
        if request.recovery:
            fields.append(b"\x28\x01")  # AddReq.recovery (5)
        message = b"".join(fields)
        return _ADD_KEY + varint(len(message)) + message
    if kind is ReadRequest:
        assert isinstance(request, ReadRequest)
        message = _ids(request.ledger_id, request.entry_id)
        if request.fence:
            message += b"\x18\x01"  # ReadReq.fence (3)
        if request.master_key:
            message += b"\x22" + varint(len(request.master_key)) + request.master_key  # ReadReq.master_key (4)
        if request.master_key is not None:
            message += b"\x28\x01"  # ReadReq.has_master_key (5)
        return _READ_KEY + varint(len(message)) + message
    return request_to_pb(0, request).SerializeToString()


def response_frame(tag: int, response: Response | ErrorCode) -> bytes:
    """The reply to request `tag` as one serialized element of a StreamRespBatch: a batch is the frames
    joined. Add and read replies are encoded here (a zero code is left out, as proto3 does); the rest,
    and a bare error code (a request the bookie could not parse), through protobuf."""
    kind = type(response)
    if kind is AddResponse or kind is ReadResponse:
        assert isinstance(response, AddResponse | ReadResponse)
        code = response.code.value
        fields = _ids(response.ledger_id, response.entry_id)
        if code:
            fields += _CODE_KEY + varint(code)
        body = response.body if isinstance(response, ReadResponse) else b""
        if body:
            body_length = varint(len(body))
            op_length = len(fields) + 1 + len(body_length) + len(body)
            head = _TAG_KEY + varint(tag) + _READ_KEY + varint(op_length)
            return b"".join((_REQUESTS_KEY, varint(len(head) + op_length), head, fields, _BODY_KEY, body_length, body))
        message = _TAG_KEY + varint(tag) + (_ADD_KEY if kind is AddResponse else _READ_KEY) + varint(len(fields))
        message += fields
    elif isinstance(response, ErrorCode):
        message = pb.StreamResp(tag=tag, code=response.value).SerializeToString()
    else:
        message = response_to_pb(tag, response).SerializeToString()
    return _REQUESTS_KEY + varint(len(message)) + message


T = TypeVar("T")


def batches_from(
    source: queue.SimpleQueue[list[T] | None], max_items: int, max_bytes: int, size: Callable[[T], int]
) -> Iterator[list[T]]:
    """The items of the lists put on `source`, in order, in batches for stream messages, until a None:
    a batch waits only for its first item, then takes whatever else is queued, up to `max_items` and
    about `max_bytes` (by `size`); a longer list is split."""
    waiting: deque[T] = deque()
    ending = False
    while waiting or not ending:
        if not waiting:
            first = source.get()
            if first is None:
                return
            waiting.extend(first)
            continue
        batch: list[T] = []
        total = 0
        while len(batch) < max_items and total < max_bytes:
            if not waiting:
                if ending:
                    break
                try:
                    more = source.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    ending = True
                    break
                waiting.extend(more)
                continue
            item = waiting.popleft()
            batch.append(item)
            total += size(item)
        yield batch


def batches_stream(channel: grpc.Channel | grpc.aio.Channel) -> Any:
    """The `Batches` stream method of `channel`, sending pre-serialized StreamReqBatch bytes."""
    return channel.stream_stream(
        BATCHES_METHOD, request_serializer=None, response_deserializer=pb.StreamRespBatch.FromString
    )


def add_to_pb(r: AddRequest) -> pb.AddReq:
    return pb.AddReq(
        ledger_id=r.ledger_id, entry_id=r.entry_id, master_key=r.master_key, body=r.body, recovery=r.recovery
    )


def read_to_pb(r: ReadRequest) -> pb.ReadReq:
    return pb.ReadReq(
        ledger_id=r.ledger_id,
        entry_id=r.entry_id,
        fence=r.fence,
        master_key=r.master_key or b"",
        has_master_key=r.master_key is not None,
    )


def response_to_pb(tag: int, response: Response) -> pb.StreamResp:
    if isinstance(response, AddResponse):
        return pb.StreamResp(tag=tag, add=add_resp_to_pb(response))
    if isinstance(response, ReadResponse):
        return pb.StreamResp(tag=tag, read=read_resp_to_pb(response))
    if isinstance(response, ReadLacResponse):
        return pb.StreamResp(tag=tag, read_lac=read_lac_resp_to_pb(response))
    return pb.StreamResp(tag=tag, write_lac=write_lac_resp_to_pb(response))


def add_resp_to_pb(r: AddResponse) -> pb.AddResp:
    return pb.AddResp(ledger_id=r.ledger_id, entry_id=r.entry_id, code=r.code.value)


def read_resp_to_pb(r: ReadResponse) -> pb.ReadResp:
    return pb.ReadResp(ledger_id=r.ledger_id, entry_id=r.entry_id, code=r.code.value, body=r.body)


def read_lac_resp_to_pb(r: ReadLacResponse) -> pb.ReadLacResp:
    return pb.ReadLacResp(ledger_id=r.ledger_id, code=r.code.value, lac=r.lac)


def write_lac_resp_to_pb(r: WriteLacResponse) -> pb.WriteLacResp:
    return pb.WriteLacResp(ledger_id=r.ledger_id, code=r.code.value)


_CODES = {code.value: code for code in ErrorCode}  # a dict lookup: ErrorCode(n) costs ~0.35 us per reply


def _code(value: int) -> ErrorCode:
    code = _CODES.get(value)
    return code if code is not None else ErrorCode(value)  # an unknown code raises ValueError, as before


def response_from_pb(msg: pb.StreamResp) -> Response | ErrorCode:
    which = msg.WhichOneof("op")
    if which == "add":
        add = msg.add
        return AddResponse(add.ledger_id, add.entry_id, _code(add.code))
    if which == "read":
        read = msg.read
        return ReadResponse(read.ledger_id, read.entry_id, _code(read.code), read.body)
    if which == "read_lac":
        return ReadLacResponse(msg.read_lac.ledger_id, _code(msg.read_lac.code), msg.read_lac.lac)
    if which == "write_lac":
        return WriteLacResponse(msg.write_lac.ledger_id, _code(msg.write_lac.code))
    return _code(msg.code)
