from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from impl.bookie import bookie_pb2 as pb
from impl.varint import varint

EDGES = [127, 128, 16383, 16384, 2**21 - 1, 2**21]  # where the one-, two- and three-byte fast paths end


@given(st.one_of(st.integers(0, 2**16), st.sampled_from(EDGES), st.integers(0, 2**64 - 1)))
def test_varint_is_protobufs_uint64_encoding(n):
    """`varint` (one-, two- and three-byte fast paths, then the loop) writes what protobuf writes for a uint64."""
    expected = pb.StreamReq(tag=n).SerializeToString()[1:] if n else b"\x00"  # proto3 leaves a 0 field out
    assert varint(n) == expected


@given(st.one_of(st.integers(-(2**63), -1), st.sampled_from([-1, -128, -(2**63)])))
def test_a_negative_int64_is_its_twos_complement(n):
    """An int64's negative value (an entry id of -1) takes ten bytes, as protobuf writes it."""
    assert varint(n) == pb.AddReq(entry_id=n).SerializeToString()[1:]  # after the key of entry_id (2)
