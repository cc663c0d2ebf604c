"""Hypothesis strategies for valid ledger metadata."""

from __future__ import annotations

from hypothesis import strategies as st

from impl.metadata.ledger import DigestType, Fragment, LedgerMetadata, LedgerState

BOOKIES = [f"127.0.0.1:{3181 + i}" for i in range(12)]
bookie_ids = st.sampled_from(BOOKIES)


@st.composite
def ledger_metadata(draw: st.DrawFn, state: LedgerState | None = None) -> LedgerMetadata:
    e = draw(st.integers(1, 5))
    qw = draw(st.integers(1, e))
    qa = draw(st.integers(1, qw))
    starts = sorted(draw(st.sets(st.integers(1, 10**6), max_size=4)))
    fragments = tuple(Fragment(first, tuple(draw(st.permutations(BOOKIES))[:e])) for first in [0, *starts])
    chosen_state = state if state is not None else draw(st.sampled_from(LedgerState))
    return LedgerMetadata(
        ensemble_size=e,
        write_quorum=qw,
        ack_quorum=qa,
        fragments=fragments,
        state=chosen_state,
        last_entry_id=draw(st.integers(-1, 2**62)),
        length=draw(st.integers(0, 2**62)),
        digest_type=draw(st.sampled_from(DigestType)),
        password=draw(st.binary(max_size=32)),
        ctime=draw(st.integers(0, 2**62)),
        custom_metadata=draw(st.dictionaries(st.text(max_size=8), st.binary(max_size=16), max_size=4)),
    )
