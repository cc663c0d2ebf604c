"""Read-range core (fallback, verification) and bookie placement (writable, rack-aware)."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from impl.bookie.client.errors import BadEntryError, NoSuchEntryError, PlacementError
from impl.bookie.client.placement import UNPUBLISHED_FRAME_SIZE, BookieInfo, choose_ensemble, choose_replacement
from impl.bookie.client.reader import LedgerEntry, ReadCompleted, ReadFailed, ReadOp
from impl.bookie.client.writer import Add, BookieAnswered, Close, LedgerWriter, Send, Start
from impl.bookie.protocol import ErrorCode, ReadRequest, ReadResponse
from impl.metadata.ledger import DigestType, Fragment, LedgerMetadata

from .simulation import SimCluster

LEDGER = 11
BOOKIES = ["b0:1", "b1:1", "b2:1"]


@pytest.mark.parametrize("digest", list(DigestType))
def test_read_range_falls_back_past_a_silent_and_a_corrupting_bookie(digest: DigestType) -> None:
    meta = LedgerMetadata(3, 2, 2, (Fragment(0, tuple(BOOKIES)),), digest_type=digest, password=b"pw")
    cluster = SimCluster(LEDGER, BOOKIES, meta)
    writer = LedgerWriter(LEDGER, meta)
    for i in range(4):
        cluster.perform(writer, writer.step(Add(b"payload-%d" % i)))
    cluster.run()
    if digest is not DigestType.DUMMY:  # corrupt b1's copy of entry 1 (first in its write set (1, 2))
        stored = cluster.bookies["b1:1"].storage
        stored[LEDGER, 1] = stored[LEDGER, 1][:-1] + bytes([stored[LEDGER, 1][-1] ^ 1])
    op = ReadOp(LEDGER, meta, 0, 3)
    outputs = op.step(Start())
    assert [s.bookie for s in outputs if isinstance(s, Send)] == ["b0:1", "b1:1", "b2:1", "b0:1"]
    result = None
    pending = [o for o in outputs if isinstance(o, Send)]
    while pending:
        send = pending.pop(0)
        response = None if send.bookie == "b0:1" else cluster.network.answer(send.bookie, send.request)
        for out in op.step(BookieAnswered(send.bookie, send.request, response)):
            if isinstance(out, Send):
                pending.append(out)
            else:
                result = out
    assert isinstance(result, ReadCompleted)
    assert result.entries == tuple(LedgerEntry(LEDGER, i, b"payload-%d" % i) for i in range(4))


def test_read_of_a_missing_entry_names_it() -> None:
    meta = LedgerMetadata(2, 2, 2, (Fragment(0, ("a", "b")),))
    op = ReadOp(LEDGER, meta, 5, 5)
    (ask,) = op.step(Start())
    assert isinstance(ask, Send) and isinstance(ask.request, ReadRequest)
    assert ask.bookie == "b"  # write set of entry 5 with E=2: (1, 0)
    (again,) = op.step(BookieAnswered(ask.bookie, ask.request, ReadResponse(LEDGER, 5, ErrorCode.ENOENTRY)))
    assert isinstance(again, Send) and again.bookie == "a"
    assert op.step(BookieAnswered("b", ask.request, ReadResponse(LEDGER, 5, ErrorCode.EOK))) == []  # late, ignored
    (failed,) = op.step(BookieAnswered("a", ask.request, ReadResponse(LEDGER, 5, ErrorCode.ENOLEDGER)))
    assert isinstance(failed, ReadFailed) and isinstance(failed.error, NoSuchEntryError)
    assert "entry 5" in str(failed.error)


def test_read_of_a_wrong_entry_id_is_a_bad_entry() -> None:
    meta = LedgerMetadata(1, 1, 1, (Fragment(0, ("a",)),))
    writer = LedgerWriter(LEDGER, meta)
    (send,) = writer.step(Add(b"x"))
    assert isinstance(send, Send) and hasattr(send.request, "body")
    op = ReadOp(LEDGER, meta, 1, 1)
    (ask,) = op.step(Start())
    assert isinstance(ask, Send)
    (failed,) = op.step(
        BookieAnswered("a", ask.request, ReadResponse(LEDGER, 1, ErrorCode.EOK, send.request.body))
    )  # entry 0
    assert isinstance(failed, ReadFailed) and isinstance(failed.error, BadEntryError)


@pytest.mark.parametrize("event", [Add(b"x"), Close(), "start"])
def test_an_event_of_another_type_is_refused_by_the_reader(event: object) -> None:
    op = ReadOp(LEDGER, LedgerMetadata(1, 1, 1, (Fragment(0, ("a",)),)), 0, 0)
    with pytest.raises(TypeError, match="not a read event"):
        op.step(event)  # type: ignore[arg-type]
    assert not op.finished and [s.bookie for s in op.step(Start()) if isinstance(s, Send)] == ["a"]


def test_bad_read_range_is_refused() -> None:
    with pytest.raises(ValueError, match="first <= last"):
        ReadOp(LEDGER, LedgerMetadata(1, 1, 1, (Fragment(0, ("a",)),)), 3, 2)


# ---- placement --------------------------------------------------------------------------------------


def test_placement_avoids_read_only_bookies_and_follows_the_preference() -> None:
    bookies = [BookieInfo("a"), BookieInfo("b", read_only=True), BookieInfo("c"), BookieInfo("d")]
    placement = choose_ensemble(bookies, 3, 2, preference=["d", "b", "c", "a"])
    assert placement.ensemble == ("d", "c", "a") and not placement.rack_aware
    with pytest.raises(PlacementError, match="need 4 writable bookies, have 3"):
        choose_ensemble(bookies, 4, 2, preference=[])


def write_sets_of(ensemble: tuple[str, ...], qw: int) -> list[list[str]]:
    e = len(ensemble)
    return [[ensemble[(k + i) % e] for i in range(qw)] for k in range(e)]


racked = st.lists(st.tuples(st.integers(0, 4), st.booleans()), min_size=1, max_size=12)


@given(racked, st.integers(1, 5), st.integers(1, 5), st.randoms(use_true_random=False))
def test_rack_aware_placement_spreads_every_write_set(
    spec: list[tuple[int, bool]], e: int, qw: int, rnd: random.Random
) -> None:
    qw = min(qw, e)
    bookies = [BookieInfo(f"bk{i}", rack=f"rack{r}", read_only=ro) for i, (r, ro) in enumerate(spec)]
    preference = [b.bookie_id for b in bookies]
    rnd.shuffle(preference)
    writable = [b for b in bookies if not b.read_only]
    if len(writable) < e:
        with pytest.raises(PlacementError):
            choose_ensemble(bookies, e, qw, preference)
        return
    placement = choose_ensemble(bookies, e, qw, preference)
    assert len(set(placement.ensemble)) == e
    assert {b.bookie_id for b in writable} >= set(placement.ensemble)
    assert placement == choose_ensemble(bookies, e, qw, preference)  # deterministic given the preference
    rack = {b.bookie_id: b.rack for b in bookies}
    spread = all(len({rack[b] for b in ws}) == qw for ws in write_sets_of(placement.ensemble, qw))
    assert spread is placement.rack_aware
    if not placement.rack_aware:  # then no writable ensemble of E could have been spread (brute force)
        for combo in itertools.permutations(writable, e):
            ids = tuple(b.bookie_id for b in combo)
            assert not all(len({rack[b] for b in ws}) == qw for ws in write_sets_of(ids, qw))


def test_replacement_keeps_write_sets_rack_distinct() -> None:
    bookies = [BookieInfo(b, rack=r) for b, r in [("a", "r1"), ("b", "r2"), ("c", "r3"), ("x", "r1"), ("y", "r3")]]
    # replacing c (rack r3) in (a, b, c) with Qw=3: x shares r1 with a, y is r3 like the failed one
    assert choose_replacement(bookies, ("a", "b", "c"), "c", 3, preference=["x", "y"]) == "y"
    with pytest.raises(ValueError, match="not in the ensemble"):
        choose_replacement(bookies, ("a", "b", "c"), "z", 3, preference=[])
    with pytest.raises(PlacementError):
        choose_replacement(bookies[:3], ("a", "b", "c"), "c", 3, preference=[])


def test_placement_skips_bookies_whose_frame_is_below_the_largest_entry() -> None:
    """Issue 43: a bookie that would refuse the client's largest entry is left out of new ensembles and
    replacements; one that publishes no limit is taken to have the bookies' default."""
    largest = UNPUBLISHED_FRAME_SIZE
    small = BookieInfo("small", netty_max_frame_size_bytes=largest - 1)
    bookies = [small, BookieInfo("old"), BookieInfo("big", netty_max_frame_size_bytes=largest)]
    placement = choose_ensemble(bookies, 2, 2, preference=["small", "old", "big"], largest_entry=largest)
    assert placement.ensemble == ("old", "big") and placement.too_small == (small,)
    assert choose_ensemble(bookies, 3, 3, preference=[]).ensemble == ("small", "old", "big")  # no limit given
    with pytest.raises(PlacementError) as refused:
        choose_ensemble(bookies, 3, 3, preference=[], largest_entry=largest)
    assert str(refused.value).startswith("Not enough non-faulty bookies available: need 3 writable bookies, have 2")
    assert f"small ({largest - 1} bytes)" in str(refused.value) and "--netty-max-frame-size-bytes" in str(refused.value)
    assert choose_replacement(bookies, ("old", "x"), "x", 2, ["small", "big"], largest_entry=largest) == "big"
    with pytest.raises(PlacementError, match="frame limit below the largest entry"):
        choose_replacement(bookies, ("old", "big"), "big", 2, ["small"], largest_entry=largest)
