"""Properties of the pure metadata transitions (docs/protocol-rules.md's preconditions)."""

from __future__ import annotations

import dataclasses
import functools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from impl.metadata import transitions as t
from impl.metadata.ledger import Fragment, LedgerMetadata, LedgerState
from tests.ledger_metadata.strategies import BOOKIES, bookie_ids, ledger_metadata

entry_ids = st.integers(-1, 2**40)
lengths = st.integers(0, 2**40)


@st.composite
def any_transition(draw: st.DrawFn) -> t.Transition:
    kind = draw(st.sampled_from(["ensemble", "start", "writer", "recovery"]))
    if kind == "ensemble":
        first, failed, replacement = draw(st.integers(0, 2**21)), draw(bookie_ids), draw(bookie_ids)
        return lambda m: t.ensemble_change(m, first, failed, replacement)
    if kind == "start":
        return t.start_recovery
    last, length = draw(entry_ids), draw(lengths)
    if kind == "writer":
        return lambda m: t.writer_close(m, last, length)
    return lambda m: t.recovery_close(m, last, length)


def apply(metadata: LedgerMetadata, transition: t.Transition) -> LedgerMetadata:
    """The metadata after the transition (unchanged if it raised or wrote nothing)."""
    try:
        result = transition(metadata)
    except t.TransitionError:
        return metadata
    return result.metadata


@given(ledger_metadata(state=LedgerState.CLOSED), any_transition())
def test_no_transition_leaves_closed(metadata: LedgerMetadata, transition: t.Transition) -> None:
    try:
        result = transition(metadata)
    except t.TransitionError:
        return
    assert not isinstance(result, t.Write), "nothing is ever written over a CLOSED ledger"
    assert result.metadata == metadata


@given(ledger_metadata(), st.lists(any_transition(), max_size=8))
def test_state_only_moves_forward(metadata: LedgerMetadata, steps: list[t.Transition]) -> None:
    order = {LedgerState.OPEN: 0, LedgerState.IN_RECOVERY: 1, LedgerState.CLOSED: 2}
    for step in steps:
        after = apply(metadata, step)
        assert order[after.state] >= order[metadata.state]
        if metadata.state is LedgerState.CLOSED:
            assert after == metadata
        metadata = after


@given(ledger_metadata(state=LedgerState.CLOSED), entry_ids, lengths)
def test_writer_close_never_changes_a_closed_ledgers_end(closed: LedgerMetadata, last: int, length: int) -> None:
    if (last, length) == (closed.last_entry_id, closed.length):
        result = t.writer_close(closed, last, length)
        assert isinstance(result, t.NoWrite) and result.metadata == closed
    else:
        with pytest.raises(t.MetadataVersionConflict) as info:
            t.writer_close(closed, last, length)
        assert info.value.code == "MetadataVersionException"


@given(ledger_metadata(state=LedgerState.CLOSED), entry_ids, lengths)
def test_recovery_close_adopts_a_closed_ledger(closed: LedgerMetadata, last: int, length: int) -> None:
    result = t.recovery_close(closed, last, length)
    assert isinstance(result, t.Adopt) and result.metadata == closed


@given(ledger_metadata(), entry_ids, lengths)
def test_closes(metadata: LedgerMetadata, last: int, length: int) -> None:
    if metadata.state is not LedgerState.CLOSED:
        written = t.writer_close(metadata, last, length)
        assert isinstance(written, t.Write)
        assert (written.metadata.state, written.metadata.last_entry_id, written.metadata.length) == (
            LedgerState.CLOSED,
            last,
            length,
        )
        assert written.metadata.fragments == metadata.fragments
    if metadata.state is LedgerState.IN_RECOVERY:
        recovered = t.recovery_close(metadata, last, length)
        assert isinstance(recovered, t.Write) and recovered.metadata.last_entry_id == last
    if metadata.state is LedgerState.OPEN:
        with pytest.raises(t.NotInRecovery):
            t.recovery_close(metadata, last, length)


@given(ledger_metadata())
def test_start_recovery(metadata: LedgerMetadata) -> None:
    result = t.start_recovery(metadata)
    if metadata.state is LedgerState.OPEN:
        assert isinstance(result, t.Write)
        assert result.metadata == dataclasses.replace(metadata, state=LedgerState.IN_RECOVERY)
    else:
        assert isinstance(result, t.NoWrite) and result.metadata == metadata


@given(ledger_metadata(), st.integers(0, 2**21), bookie_ids, bookie_ids)
def test_ensemble_change(metadata: LedgerMetadata, first: int, failed: str, replacement: str) -> None:
    last = metadata.fragments[-1]
    try:
        result = t.ensemble_change(metadata, first, failed, replacement)
    except t.LedgerClosed:
        assert metadata.state is LedgerState.CLOSED
        return
    except t.LedgerFenced:
        assert metadata.state is LedgerState.IN_RECOVERY
        return
    except t.EnsembleChanged:
        assert metadata.state is LedgerState.OPEN and failed not in last.ensemble
        return
    except t.InvalidTransition:
        assert replacement in last.ensemble or first < last.first_entry_id
        return
    assert metadata.state is LedgerState.OPEN and failed in last.ensemble
    assert isinstance(result, t.Write)
    new = result.metadata  # its constructor re-checked validity: E bookies, no repeats, strictly increasing
    starts = [f.first_entry_id for f in new.fragments]
    assert starts == sorted(set(starts)) and starts[0] == 0
    assert new.fragments[-1] == Fragment(first, tuple(replacement if b == failed else b for b in last.ensemble))
    expected_len = len(metadata.fragments) + (0 if first == last.first_entry_id else 1)
    assert len(new.fragments) == expected_len
    # entries before the change still map to their old bookies
    for entry in {0, first - 1, last.first_entry_id} - {-1}:
        if entry < first:
            assert new.ensemble_for(entry) == metadata.ensemble_for(entry)


def test_ensemble_change_at_the_same_entry_replaces_the_fragment() -> None:
    m = t.create(3, 2, 2, ("a", "b", "c"))
    once = t.ensemble_change(m, 5, "b", "d").metadata
    twice = t.ensemble_change(once, 5, "c", "e").metadata
    assert twice.fragments == (Fragment(0, ("a", "b", "c")), Fragment(5, ("a", "d", "e")))
    again_at_zero = t.ensemble_change(m, 0, "a", "z").metadata
    assert again_at_zero.fragments == (Fragment(0, ("z", "b", "c")),)


def change_at(m: LedgerMetadata, first: int, failed: str, replacement: str) -> t.TransitionResult:
    return t.ensemble_change(m, first, failed, replacement)


@given(st.lists(st.tuples(st.integers(0, 50), st.sampled_from(BOOKIES[:6]), st.sampled_from(BOOKIES)), max_size=12))
def test_ensemble_change_sequences_keep_fragments_valid(changes: list[tuple[int, str, str]]) -> None:
    metadata = t.create(4, 3, 2, tuple(BOOKIES[:4]))
    lac = -1
    for advance, failed, replacement in changes:
        lac += advance  # the writer's LAC only grows; changes start at LAC+1
        metadata = apply(metadata, functools.partial(change_at, first=lac + 1, failed=failed, replacement=replacement))
        starts = [f.first_entry_id for f in metadata.fragments]
        assert starts[0] == 0 and all(a < b for a, b in zip(starts, starts[1:], strict=False))
        assert all(len(set(f.ensemble)) == 4 for f in metadata.fragments)


def test_create_and_bad_arguments() -> None:
    m = t.create(3, 2, 2, ("a", "b", "c"), password=b"pw", ctime=5, custom_metadata={"k": b"v"})
    assert m.state is LedgerState.OPEN and m.last_entry_id == -1 and m.fragments == (Fragment(0, ("a", "b", "c")),)
    with pytest.raises(t.InvalidTransition, match="Qa <= Qw <= E"):
        t.create(2, 3, 1, ("a", "b"))
    with pytest.raises(t.InvalidTransition, match="repeats a bookie"):
        t.create(2, 2, 1, ("a", "a"))
    with pytest.raises(t.InvalidTransition):
        t.writer_close(m, -2, 0)
    fenced = t.start_recovery(m).metadata
    with pytest.raises(t.LedgerFenced) as info:
        t.ensemble_change(fenced, 0, "a", "d")
    assert info.value.code == "LedgerFencedException" and "IN_RECOVERY" in str(info.value)
    bad_fragments = (Fragment(0, ("a", "b", "c")), Fragment(0, ("a", "b", "d")))
    with pytest.raises(t.InvalidTransition, match="strictly increasing"):
        t.recovery_close(fenced, 3, 30, bad_fragments)
    changed = (Fragment(0, ("a", "b", "c")), Fragment(2, ("a", "b", "d")))
    closed = t.recovery_close(fenced, 3, 30, changed).metadata
    assert closed.fragments == changed and closed.state is LedgerState.CLOSED
