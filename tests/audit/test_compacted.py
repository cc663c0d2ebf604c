"""Compacted reads in the audit (docs/history.md, Compacted reads), on small hand-written histories: a
`read-compacted` shows per key its last value at or before the horizon (a tombstone deletes the key), then every
message after it, tombstones included, in the topic's order; one showing a replaced value, or a key twice, is
`compacted-stale`, one leaving out a key's acknowledged last value or an acknowledged message after the horizon (a
tombstone too) is `compacted-missing`, one showing the messages after the horizon out of order is
`compacted-reorder`; a write of unknown outcome may count either way; the reference and the Spark job agree, and a
broken horizon is refused. The same on generated histories (spark/generate.py `compacted`, tombstones included):
valid, and each of the three anomalies injected reported alone by both checkers."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from spark.generate import generate, inject, write_jsonl
from spark.generate import main as generate_main
from spark.history import HistoryError, NemesisEvent, read_history
from spark.reference import check
from spark.report import COMPACTED_ANOMALIES, Report

T = "persistent://public/lifecycle-x/t0"
HORIZON = [1, 4]
# value -> (key, entry): acknowledged in this order by process 0; d1's key is deleted by the tombstone t3, k2 by
# the tombstone t6 after the horizon
ACKED = {
    "v1": ("k1", 0), "v2": ("k2", 1), "d1": ("k3", 2), "v3": ("k1", 3), "t3": ("k3", 4), "v5": ("k1", 5),
    "t6": ("k2", 6),
}  # fmt: skip
TAIL = [("v5", [1, 5, 0]), ("t6", [1, 6, 0])]  # after the horizon: everything, the tombstone too
VALID = [("v2", [1, 1, 0]), ("v3", [1, 3, 0]), *TAIL]


class History:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def add(self, **event: Any) -> int:
        self.events.append({"index": len(self.events), "time": len(self.events) * 1000, "topic": T, **event})
        return len(self.events) - 1

    def path(self, tmp_path: Path) -> Path:
        path = tmp_path / "h.jsonl"
        write_jsonl(self.events, str(path))
        return path

    def report(self, tmp_path: Path) -> Report:
        nemesis: list[NemesisEvent] = []
        return check(read_history(str(self.path(tmp_path)), nemesis=nemesis), nemesis)


def history(shown: list[tuple[str, list[int]]], unknown: dict[str, tuple[str, bool]] | None = None) -> History:
    """ACKED appended, then the appends of unknown outcome (value -> key, tombstone; never completed, each its own
    process), then one compacted read showing `shown` with the horizon HORIZON."""
    h = History()
    for value, (key, entry) in ACKED.items():
        fields = {"value": value, "key": key} | ({"tombstone": True} if value.startswith("t") else {})
        h.add(process=0, type="invoke", f="append", **fields)
        h.add(process=0, type="ok", f="append", position=[1, entry, 0], **fields)
    for n, (value, (key, tombstone)) in enumerate((unknown or {}).items()):
        h.add(process=10 + n, type="invoke", f="append", value=value, key=key, tombstone=tombstone)
    h.add(process=1, type="invoke", f="read-compacted")
    h.add(process=1, type="ok", f="read-compacted", horizon=HORIZON, value=[[p, v] for v, p in shown])
    return h


# Acknowledged while the compacted read reads, after the horizon: value -> (key, entry).
RACING = {"r7": ("k2", 7), "r8": ("k1", 8)}


def raced(shown: list[tuple[str, list[int]]]) -> History:
    """ACKED, then one compacted read showing `shown` with the horizon HORIZON that appends race, as under the
    workload's faults: `late` of k2, written at [1,4,1] (at or before the horizon, so it replaced v2) but
    acknowledged only after the read; RACING invoked and acknowledged while it reads; `u9`, a tombstone of k3,
    invoked while it reads and never completed."""
    h = History()
    for value, (key, entry) in ACKED.items():
        if value == "v5":  # before anything is acknowledged past late's position
            h.add(process=2, type="invoke", f="append", value="late", key="k2")
        fields = {"value": value, "key": key} | ({"tombstone": True} if value.startswith("t") else {})
        h.add(process=0, type="invoke", f="append", **fields)
        h.add(process=0, type="ok", f="append", position=[1, entry, 0], **fields)
    h.add(process=1, type="invoke", f="read-compacted")
    for n, (value, (key, entry)) in enumerate(RACING.items()):
        h.add(process=3 + n, type="invoke", f="append", value=value, key=key)
        h.add(process=3 + n, type="ok", f="append", value=value, key=key, position=[1, entry, 0])
    h.add(process=9, type="invoke", f="append", value="u9", key="k3", tombstone=True)
    h.add(process=1, type="ok", f="read-compacted", horizon=HORIZON, value=[[p, v] for v, p in shown])
    h.add(process=2, type="ok", f="append", value="late", key="k2", position=[1, 4, 1])
    return h


RACED = [("v3", [1, 3, 0]), ("late", [1, 4, 1]), *TAIL, ("r7", [1, 7, 0])]


def ack(value: str) -> int:
    """The index of the `ok` of one of ACKED."""
    return 2 * list(ACKED).index(value) + 1


def cases(report: Report) -> list[tuple[str, tuple[int, ...]]]:
    return sorted((c.anomaly, c.ops) for c in report.cases)


def test_the_last_value_per_key_then_everything_after_the_horizon_is_valid(tmp_path: Path) -> None:
    report = history(VALID).report(tmp_path)
    assert report.valid, report.to_json()


def test_a_replaced_value_a_key_twice_and_a_deleted_key_are_stale(tmp_path: Path) -> None:
    h = history([("v1", [1, 0, 0]), ("v2", [1, 1, 0]), *TAIL])
    read_ok = len(h.events) - 1
    report = h.report(tmp_path)
    assert cases(report) == [("compacted-stale", (ack("v3"), read_ok))], report.to_json()
    assert "'v1'" in report.cases[0].explanation and "'v3'" in report.cases[0].explanation

    h = history([("v1", [1, 0, 0]), *VALID])
    assert cases(h.report(tmp_path)) == [("compacted-stale", (read_ok - 1, read_ok))]  # k1 twice: the read alone

    h = history([("d1", [1, 2, 0]), *VALID])  # k3's tombstone t3 at [1,4] deleted it
    assert cases(h.report(tmp_path)) == [("compacted-stale", (ack("t3"), read_ok))]


def test_an_acknowledged_last_value_or_one_after_the_horizon_left_out_is_missing(tmp_path: Path) -> None:
    h = history(VALID[1:])  # k2's v2
    read_ok = len(h.events) - 1
    report = h.report(tmp_path)
    assert cases(report) == [("compacted-missing", (ack("v2"), read_ok))], report.to_json()
    assert "key 'k2'" in report.cases[0].explanation
    report = history([*VALID[:2], TAIL[1]]).report(tmp_path)  # v5, after the horizon
    assert cases(report) == [("compacted-missing", (ack("v5"), read_ok))], report.to_json()
    assert "after the horizon [1,4]" in report.cases[0].explanation
    report = history(VALID[:3]).report(tmp_path)  # the tombstone t6, after the horizon
    assert cases(report) == [("compacted-missing", (ack("t6"), read_ok))], report.to_json()
    # shown only at or before the horizon is not shown after it
    report = history([*VALID[:2], ("v5", [1, 4, 1]), TAIL[1]]).report(tmp_path)
    assert ("compacted-missing", (ack("v5"), read_ok)) in cases(report), report.to_json()


def test_the_messages_after_the_horizon_out_of_order_are_reordered(tmp_path: Path) -> None:
    h = history([*VALID[:2], TAIL[1], TAIL[0]])
    read_ok = len(h.events) - 1
    report = h.report(tmp_path)
    assert cases(report) == [("compacted-reorder", (read_ok - 1, read_ok))], report.to_json()
    assert "'v5' at [1,5,0] next after 't6' at [1,6,0]" in report.cases[0].explanation
    # the compacted keys are in position order too, but only the tail is judged here
    assert history([VALID[1], VALID[0], *TAIL]).report(tmp_path).valid


def test_a_write_of_unknown_outcome_counts_either_way(tmp_path: Path) -> None:
    # v4 of k2, never acknowledged: shown at [1,4,1] it replaced v2; not shown, v2 stays
    assert history(VALID, {"v4": ("k2", False)}).report(tmp_path).valid
    shown = [("v4", [1, 4, 1]), ("v3", [1, 3, 0]), *TAIL]
    assert history(shown, {"v4": ("k2", False)}).report(tmp_path).valid
    # a tombstone of k2 of unknown outcome, never seen, may have deleted it: k2 absent or not
    assert history(VALID[1:], {"t4": ("k2", True)}).report(tmp_path).valid
    assert history(VALID, {"t4": ("k2", True)}).report(tmp_path).valid


def test_appends_racing_the_read_are_judged_by_where_they_are(tmp_path: Path) -> None:
    # what it reads of the appends racing it is up to the read: r8 and u9 may be shown or not
    assert raced(RACED).report(tmp_path).valid
    assert raced([*RACED, ("r8", [1, 8, 0]), ("u9", [1, 9, 0])]).report(tmp_path).valid
    h = raced(RACED)
    read_ok, late_ok = len(h.events) - 2, len(h.events) - 1
    r7_ok = next(e["index"] for e in h.events if e["type"] == "ok" and e.get("value") == "r7")
    # late, acknowledged after the read but at or before the horizon, was compacted: k2 left out is missing
    report = raced([RACED[0], *RACED[2:]]).report(tmp_path)
    assert cases(report) == [("compacted-missing", (read_ok, late_ok))], report.to_json()
    assert "key 'k2'" in report.cases[0].explanation
    # ... and v2 shown instead of it is stale
    report = raced([("v2", [1, 1, 0]), RACED[0], *RACED[2:]]).report(tmp_path)
    assert cases(report) == [("compacted-stale", (read_ok, late_ok))], report.to_json()
    # r7, acknowledged after the read began, skipped by a read that shows r8 after it
    report = raced([*RACED[:-1], ("r8", [1, 8, 0])]).report(tmp_path)
    assert cases(report) == [("compacted-missing", (r7_ok, read_ok))], report.to_json()
    assert "'r7', acknowledged at [1,7,0]" in report.cases[0].explanation


@pytest.mark.parametrize("horizon", [[1], [1, -4], "1:4", [1, 4, 0]])
def test_a_broken_horizon_is_refused_with_its_line(horizon: Any, tmp_path: Path) -> None:
    h = history(VALID)
    h.events[-1]["horizon"] = horizon
    with pytest.raises(HistoryError) as e:
        read_history(str(h.path(tmp_path)))
    assert e.value.line == len(h.events) and "horizon" in str(e.value)


def corpus() -> list[History]:
    return [
        history(VALID),
        history([("v1", [1, 0, 0]), ("v2", [1, 1, 0]), *TAIL]),
        history([("v1", [1, 0, 0]), *VALID]),
        history([("d1", [1, 2, 0]), *VALID]),
        history(VALID[1:]),
        history([*VALID[:2], TAIL[1]]),
        history([("v4", [1, 4, 1]), ("v3", [1, 3, 0]), *TAIL], {"v4": ("k2", False)}),
        history(VALID[1:], {"t4": ("k2", True)}),
        history(VALID[:3]),
        history([*VALID[:2], ("v5", [1, 4, 1]), TAIL[1]]),
        history([*VALID[:2], TAIL[1], TAIL[0]]),
        raced([*RACED, ("r8", [1, 8, 0]), ("u9", [1, 9, 0])]),
        raced([RACED[0], *RACED[2:]]),
        raced([("v2", [1, 1, 0]), RACED[0], *RACED[2:]]),
        raced([*RACED[:-1], ("r8", [1, 8, 0])]),
    ]


def generated(seed: int) -> list[dict[str, Any]]:
    """A generated history with tombstones and a compacted read per topic (spark/generate.py, `compacted`)."""
    return generate(seed=seed, ops=120, processes=4, compacted=True, consumers=seed % 2)


def injected(seed: int, anomaly: str) -> tuple[list[dict[str, Any]], list[int]]:
    found = inject(generated(seed), anomaly, random.Random(seed))
    assert found is not None, f"seed {seed} offers no place for {anomaly}"
    return found


def reference(events: list[dict[str, Any]], path: Path) -> Report:
    write_jsonl(events, str(path))
    nemesis: list[NemesisEvent] = []
    return check(read_history(str(path), nemesis=nemesis), nemesis)


@pytest.mark.parametrize("seed", range(3))
def test_generated_compacted_histories_are_valid_and_each_injection_is_reported(seed: int, tmp_path: Path) -> None:
    events = generated(seed)
    assert any(e["f"] == "read-compacted" and e["type"] == "ok" for e in events)
    assert any(e.get("tombstone") for e in events)
    report = reference(events, tmp_path / "valid.jsonl")
    assert report.valid, report.to_json()
    for anomaly in COMPACTED_ANOMALIES:
        events, touched = injected(seed, anomaly)
        report = reference(events, tmp_path / f"{anomaly}.jsonl")
        [case] = report.cases
        assert case.anomaly == anomaly and set(touched) <= set(case.ops), (touched, report.to_json())


def test_the_generator_cli_injects_a_compacted_anomaly(tmp_path: Path) -> None:
    path = tmp_path / "h.jsonl"
    assert generate_main([str(path), "--ops", "100", "--seed", "1", "--inject", "compacted-stale"]) == 0
    nemesis: list[NemesisEvent] = []
    report = check(read_history(str(path), nemesis=nemesis), nemesis)
    assert [c.anomaly for c in report.cases] == ["compacted-stale"], report.to_json()


@pytest.mark.spark
def test_spark_agrees_on_the_compacted_histories(spark: Any, tmp_path: Path) -> None:
    """The written histories, then generated ones (valid, and each anomaly injected), in one Spark job."""
    from spark.audit import audit

    paths, references = [], []
    for k, h in enumerate(corpus()):
        (tmp_path / str(k)).mkdir()
        references.append(h.report(tmp_path / str(k)))
        paths.append(str(tmp_path / str(k) / "h.jsonl"))
    expected = [True, False, False, False, False, False, True, True, False, False, False, True, False, False, False]
    assert [r.valid for r in references] == expected
    for events in [generated(0)] + [injected(seed, a)[0] for seed in (0, 1) for a in COMPACTED_ANOMALIES]:
        paths.append(str(tmp_path / f"g{len(paths)}.jsonl"))
        references.append(reference(events, Path(paths[-1])))
    found = [sorted({c.anomaly for c in r.cases}) for r in references[-7:]]
    assert found == [[], *([[a] for a in COMPACTED_ANOMALIES] * 2)], found
    for result, expected in zip(audit(paths), references, strict=True):
        assert result.report.ops == expected.ops
        got = sorted((c.key, c.explanation) for c in result.report.cases)
        assert got == sorted((c.key, c.explanation) for c in expected.cases), result.path
