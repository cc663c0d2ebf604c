"""Conversion between impl.bookie.protocol dataclasses and the bookie.proto messages."""

from __future__ import annotations

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


def response_from_pb(msg: pb.StreamResp) -> Response | ErrorCode:
    which = msg.WhichOneof("op")
    if which == "add":
        return AddResponse(msg.add.ledger_id, msg.add.entry_id, ErrorCode(msg.add.code))
    if which == "read":
        return ReadResponse(msg.read.ledger_id, msg.read.entry_id, ErrorCode(msg.read.code), msg.read.body)
    if which == "read_lac":
        return ReadLacResponse(msg.read_lac.ledger_id, ErrorCode(msg.read_lac.code), msg.read_lac.lac)
    if which == "write_lac":
        return WriteLacResponse(msg.write_lac.ledger_id, ErrorCode(msg.write_lac.code))
    return ErrorCode(msg.code)
