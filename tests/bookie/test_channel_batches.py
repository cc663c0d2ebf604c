"""The pipelined channel carries batches of requests; the one-request-per-message rpc still works."""

from __future__ import annotations

import queue
from pathlib import Path

import grpc
from hypothesis import given
from hypothesis import strategies as st

from impl.bookie import bookie_pb2 as pb
from impl.bookie import bookie_pb2_grpc as pb_grpc
from impl.bookie import wire
from impl.bookie.channel import BookieChannel
from impl.bookie.entry_format import encode_entry
from impl.bookie.protocol import (
    AddRequest,
    AddResponse,
    ErrorCode,
    ReadLacRequest,
    ReadLacResponse,
    ReadRequest,
    ReadResponse,
    WriteLacRequest,
    WriteLacResponse,
)
from impl.bookie.replies import StreamReply
from impl.bookie.server import Bookie, BookieServer, StreamReplies

KEY = b"k" * 20


def body(eid: int) -> bytes:
    return encode_entry(1, eid, eid - 1, eid + 1, b"x" * 300)


def test_many_requests_in_flight_in_batches_and_the_unbatched_rpc(tmp_path: Path):
    server = BookieServer(Bookie(tmp_path, checkpoint_interval=3600))
    server.start()
    try:
        channel = BookieChannel(f"127.0.0.1:{server.port}")
        futures = [channel.submit(AddRequest(1, eid, KEY, body(eid))) for eid in range(2000)]
        assert [f.result(30) for f in futures] == [AddResponse(1, eid, ErrorCode.EOK) for eid in range(2000)]
        reads = [channel.submit(ReadRequest(1, eid)) for eid in range(0, 2000, 7)]
        assert all(f.result(30).body == body(eid) for f, eid in zip(reads, range(0, 2000, 7), strict=True))
        channel.close()

        with grpc.insecure_channel(f"127.0.0.1:{server.port}") as raw:
            stub = pb_grpc.BookieStub(raw)
            requests = [wire.request_to_pb(7, ReadRequest(1, 5)), pb.StreamReq(tag=8)]  # the second is empty
            answers = {msg.tag: wire.response_from_pb(msg) for msg in stub.Channel(iter(requests), timeout=10)}
        assert answers[7] == ReadResponse(1, 5, ErrorCode.EOK, body(5))
        assert answers[8] is ErrorCode.EBADREQ
    finally:
        server.stop()


ids = st.integers(-(2**63), 2**63 - 1)
requests = st.one_of(
    st.builds(AddRequest, ids, ids, st.binary(max_size=40), st.binary(max_size=3000), st.booleans()),
    st.builds(ReadRequest, ids, ids, st.booleans(), st.none() | st.binary(max_size=40)),
    st.builds(ReadLacRequest, ids),
    st.builds(WriteLacRequest, ids, st.binary(max_size=40), ids),
)


@given(st.lists(st.tuples(st.integers(0, 2**64 - 1), requests), max_size=8))
def test_request_frames_parse_as_the_batch_protobuf_would_build(tagged):
    """The hand-framed batch (tag and op written around a once-serialized op) is the same message."""
    encoded: dict[int, bytes] = {}
    framed = b"".join(wire.request_frame(tag, request, encoded) for tag, request in tagged)
    expected = pb.StreamReqBatch(requests=[wire.request_to_pb(tag, request) for tag, request in tagged])
    assert pb.StreamReqBatch.FromString(framed) == expected
    # The copies of a request for other bookies take its serialized op from `encoded`.
    assert len(encoded) == len({id(request) for _, request in tagged})
    for _, request in tagged:
        copy = pb.StreamReqBatch.FromString(wire.request_frame(5, request, encoded))
        assert list(copy.requests) == [wire.request_to_pb(5, request)]


codes = st.sampled_from(list(ErrorCode))
responses = st.one_of(
    st.builds(AddResponse, ids, ids, codes),
    st.builds(ReadResponse, ids, ids, codes, st.binary(max_size=3000)),
    st.builds(ReadLacResponse, ids, codes, ids),
    st.builds(WriteLacResponse, ids, codes),
    codes,
)


@given(st.lists(st.tuples(st.integers(0, 2**64 - 1), responses), max_size=8))
def test_reply_frames_parse_as_the_batch_protobuf_would_build(tagged):
    """The bookie's hand-encoded reply frames (`wire.response_frame`) are the batch protobuf builds, and
    the client reads back the replies that were framed."""
    framed = b"".join(wire.response_frame(tag, response) for tag, response in tagged)
    expected = pb.StreamRespBatch(
        responses=[
            pb.StreamResp(tag=tag, code=r.value) if isinstance(r, ErrorCode) else wire.response_to_pb(tag, r)
            for tag, r in tagged
        ]
    )
    parsed = pb.StreamRespBatch.FromString(framed)
    assert parsed == expected
    assert [wire.response_from_pb(msg) for msg in parsed.responses] == [r for _, r in tagged]


def replies(frames: list[bytes] | None) -> list[pb.StreamResp]:
    """The reply messages of one list a stream's sender took (frames; None: the stream's end)."""
    assert frames is not None
    return list(pb.StreamRespBatch.FromString(b"".join(frames)).responses)


def test_replies_ready_together_leave_together(tmp_path: Path):
    """The replies a bookie has ready at once for one stream reach its sending thread as one list, so
    they leave in one stream message (up to the batch limit), however the threads interleave."""
    bookie = Bookie(tmp_path, checkpoint_interval=3600)
    try:
        stream = StreamReplies()
        adds = [(AddRequest(1, eid, KEY, body(eid)), StreamReply(stream, eid + 1)) for eid in range(40)]
        stream.expect(len(adds))
        bookie.submit_many(adds)  # one journal append: one durability callback for all 40
        acked = replies(stream.out.get(timeout=10))
        assert [r.tag for r in acked] == list(range(1, 41))
        assert all(r.add.code == ErrorCode.EOK.value for r in acked)
        reads = [(ReadRequest(1, eid), StreamReply(stream, 100 + eid)) for eid in range(30)]
        stream.expect(len(reads))
        bookie.submit_many(reads)  # answered from ledger storage at once, together
        read = replies(stream.out.get_nowait())
        assert [r.tag for r in read] == list(range(100, 130))
        assert [r.read.body for r in read] == [body(eid) for eid in range(30)]
    finally:
        bookie.close()

    limited = StreamReplies()
    limited.expect(5)
    limited.deliver_many([(tag, ReadResponse(1, tag, ErrorCode.ENOENTRY)) for tag in range(5)])
    limited.requests_ended()
    assert [len(batch) for batch in limited.batches(max_batch=2)] == [2, 2, 1]


def test_requests_beyond_max_inflight_are_refused_with_too_many_requests(tmp_path: Path):
    bookie = Bookie(tmp_path, max_inflight=5, checkpoint_interval=3600)
    try:
        stream = StreamReplies()
        adds = [(AddRequest(1, eid, KEY, body(eid)), StreamReply(stream, eid + 1)) for eid in range(8)]
        stream.expect(len(adds))
        bookie.submit_many(adds)
        stream.requests_ended()
        codes = {reply.tag: reply.add.code for batch in stream.batches(max_batch=512) for reply in replies(batch)}
    finally:
        bookie.close()
    assert codes == {tag: ErrorCode.EOK.value if tag <= 5 else ErrorCode.ETOOMANYREQUESTS.value for tag in range(1, 9)}


@given(st.lists(st.lists(st.binary(max_size=30), max_size=12), max_size=10), st.integers(1, 7), st.integers(1, 80))
def test_batches_from_keeps_order_and_limits(lists, max_items, max_bytes):
    """What the stream senders send (`wire.batches_from`): every item once, in order, in non-empty batches of
    at most max_items, each stopping once it reached max_bytes."""
    source: queue.SimpleQueue[list[bytes] | None] = queue.SimpleQueue()
    for items in lists:
        source.put(items)
    source.put(None)
    batches = list(wire.batches_from(source, max_items, max_bytes, len))
    assert [item for batch in batches for item in batch] == [item for items in lists for item in items]
    assert all(0 < len(batch) <= max_items for batch in batches)
    assert all(sum(map(len, batch[:-1])) < max_bytes for batch in batches)
