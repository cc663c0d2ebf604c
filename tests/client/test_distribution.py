"""The distribution schedule and the quorum rules: table tests, hypothesis properties, crosshair contracts."""

from __future__ import annotations

import itertools
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from impl.bookie.client import distribution
from impl.bookie.client.distribution import (
    Answer,
    ack_quorum_reached,
    all_write_sets,
    entry_absent,
    entry_present,
    lac_coverage_reached,
    write_set,
)
from impl.bookie.protocol import ErrorCode

REPO = Path(__file__).resolve().parents[2]


def coverage_by_enumeration(answers: dict[int, Answer], e: int, qw: int, qa: int) -> bool:
    """Independent formulation: the old writer could still complete an add iff some write set
    contains Qa bookies that are all unknown (never fenced by a known answer)."""
    members_of = [sorted({(k + i) % e for i in range(qw)}) for k in range(e)]
    for members in members_of:
        for subset in itertools.combinations(members, qa):
            if all(answers[i] in (Answer.ERROR, Answer.NONE) for i in subset):
                return False
    return True


@pytest.mark.parametrize(("e", "qw", "qa"), [(3, 3, 2), (2, 2, 2)])
def test_read_lac_coverage_table(e: int, qw: int, qa: int) -> None:
    combos = list(itertools.product(list(Answer), repeat=e))
    assert len(combos) == 5**e
    done_count = 0
    for combo in combos:
        answers = dict(enumerate(combo))
        expected = coverage_by_enumeration(answers, e, qw, qa)
        assert lac_coverage_reached(answers, e, qw, qa) is expected, combo
        done_count += expected
    # Closed forms for these two configurations, as a third opinion on the table:
    # E3/Qw3/Qa2: done iff at least 2 bookies answered; E2/Qw2/Qa2: iff at least 1 did.
    need = {(3, 3, 2): 2, (2, 2, 2): 1}[(e, qw, qa)]
    for combo in combos:
        known = sum(a in (Answer.OK, Answer.NO_ENTRY, Answer.NO_LEDGER) for a in combo)
        assert lac_coverage_reached(dict(enumerate(combo)), e, qw, qa) is (known >= need), combo
    assert 0 < done_count < len(combos)


@pytest.mark.parametrize(
    ("combo", "done"),
    [
        ((Answer.OK, Answer.NONE, Answer.NONE), False),
        ((Answer.OK, Answer.NO_LEDGER, Answer.NONE), True),
        ((Answer.NO_ENTRY, Answer.ERROR, Answer.NO_LEDGER), True),
        ((Answer.ERROR, Answer.ERROR, Answer.OK), False),
    ],
)
def test_read_lac_coverage_rows_e3(combo: tuple[Answer, ...], done: bool) -> None:
    assert lac_coverage_reached(dict(enumerate(combo)), 3, 3, 2) is done


def test_missing_answers_count_as_unknown() -> None:
    assert not lac_coverage_reached({}, 3, 3, 2)
    assert lac_coverage_reached({0: Answer.OK, 2: Answer.NO_ENTRY}, 3, 3, 2)


def test_answer_classification() -> None:
    assert Answer.from_code(ErrorCode.EOK) is Answer.OK
    assert Answer.from_code(ErrorCode.ENOENTRY) is Answer.NO_ENTRY
    assert Answer.from_code(ErrorCode.ENOLEDGER) is Answer.NO_LEDGER
    for code in (ErrorCode.EIO, ErrorCode.EFENCED, ErrorCode.EUA, ErrorCode.EREADONLY):
        assert Answer.from_code(code) is Answer.ERROR


def test_bad_quorums_are_refused() -> None:
    with pytest.raises(ValueError, match="Qa <= Qw <= E"):
        lac_coverage_reached({}, 2, 3, 2)


quorums = st.integers(1, 7).flatmap(
    lambda e: st.integers(1, e).flatmap(lambda qw: st.tuples(st.just(e), st.just(qw), st.integers(1, qw)))
)
answer_maps = st.dictionaries(st.integers(0, 6), st.sampled_from(list(Answer)), max_size=7)


@given(quorums, st.integers(0, 10_000))
def test_write_set_shape(q: tuple[int, int, int], entry_id: int) -> None:
    e, qw, _ = q
    ws = write_set(entry_id, e, qw)
    assert len(ws) == qw == len(set(ws))
    assert all(0 <= i < e for i in ws)
    assert ws[0] == entry_id % e  # striping by absolute entry id
    assert ws == write_set(entry_id + e, e, qw)


@given(quorums)
def test_every_bookie_is_in_exactly_qw_write_sets(q: tuple[int, int, int]) -> None:
    e, qw, _ = q
    sets = all_write_sets(e, qw)
    assert len(sets) == e
    for bookie in range(e):
        assert sum(bookie in s for s in sets) == qw


@given(quorums, answer_maps, answer_maps)
def test_coverage_is_monotone_in_answers(
    q: tuple[int, int, int], first: dict[int, Answer], later: dict[int, Answer]
) -> None:
    e, qw, qa = q
    first = {i: a for i, a in first.items() if i < e}
    more = dict(first)
    for i, a in later.items():
        if i < e and a.is_known:
            more[i] = a  # turning an unknown into an answer never undoes coverage
    if lac_coverage_reached(first, e, qw, qa):
        assert lac_coverage_reached(more, e, qw, qa)
    assert lac_coverage_reached(first, e, qw, qa) is coverage_by_enumeration(
        {i: first.get(i, Answer.NONE) for i in range(e)}, e, qw, qa
    )


@given(quorums, answer_maps, st.integers(0, 1000))
def test_absent_entry_cannot_have_been_acknowledged(
    q: tuple[int, int, int], answers: dict[int, Answer], entry_id: int
) -> None:
    e, qw, qa = q
    answers = {i: a for i, a in answers.items() if i < e}
    ws = write_set(entry_id, e, qw)
    oks = [i for i in ws if answers.get(i) is Answer.OK]
    if entry_absent(answers, entry_id, e, qw, qa):
        # the write set's non-negative bookies are fewer than Qa: no add could have reached Qa
        assert len([i for i in ws if not answers.get(i, Answer.NONE).is_negative]) < qa
        assert not ack_quorum_reached(oks, entry_id, e, qw, qa)
    assert entry_present(answers, entry_id, e, qw) is bool(oks)


@given(quorums, st.sets(st.integers(0, 6)), st.integers(0, 1000))
def test_ack_quorum_counts_only_the_write_set(q: tuple[int, int, int], acked: set[int], entry_id: int) -> None:
    e, qw, qa = q
    inside = set(write_set(entry_id, e, qw)) & acked
    assert ack_quorum_reached(acked, entry_id, e, qw, qa) is (len(inside) >= qa)


@pytest.mark.skipif(shutil.which("crosshair", path=str(Path(sys.executable).parent)) is None, reason="crosshair")
def test_crosshair_contracts_of_the_distribution_schedule() -> None:
    # The contracts live in distribution.py's docstrings (PEP 316). crosshair explores them
    # symbolically up to the per-condition timeout; it cannot prove them for all sizes (it
    # bounds its search), which is why the preconditions cap E at 6 and the hypothesis
    # properties above cover the same rules by sampling. One second per condition keeps CI
    # short; the deep test below runs longer and also shows a broken rule is caught.
    crosshair = Path(sys.executable).parent / "crosshair"
    result = subprocess.run(
        [str(crosshair), "check", "--per_condition_timeout=1", distribution.__file__],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.deep
def test_crosshair_finds_a_broken_coverage_rule(tmp_path: Path) -> None:
    # Shows the contracts can fail: off-by-one in the coverage rule must be caught.
    source = Path(distribution.__file__).read_text()
    broken = source.replace("if unknown >= ack_quorum:", "if unknown > ack_quorum:")
    assert broken != source
    (tmp_path / "broken_distribution.py").write_text(broken)
    crosshair = Path(sys.executable).parent / "crosshair"
    result = subprocess.run(
        [str(crosshair), "check", "--per_condition_timeout=4", "broken_distribution.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1 and "lac_coverage_reached" in result.stdout, result.stdout + result.stderr
