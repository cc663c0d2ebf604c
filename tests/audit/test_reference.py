"""The reference checker on generated histories: valid ones are valid, each injected defect is reported."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from spark.generate import inject, write_jsonl
from spark.history import NemesisEvent, read_history
from spark.reference import check
from spark.report import ONE_CLUSTER_ANOMALIES
from tests.audit.corpus import Shape, shapes

SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def _audit(events: list[dict], tmp_path: Path) -> object:
    path = tmp_path / "h.jsonl"
    write_jsonl(events, str(path))
    nemesis: list[NemesisEvent] = []
    return check(read_history(str(path), nemesis=nemesis), nemesis)


@SETTINGS
@given(shape=shapes)
def test_generated_histories_are_valid(shape: Shape, tmp_path: Path) -> None:
    report = _audit(shape.events(), tmp_path)
    assert report.valid, report.to_json()  # type: ignore[attr-defined]


@pytest.mark.parametrize("anomaly", ONE_CLUSTER_ANOMALIES)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(shape=shapes, seed=st.integers(0, 1000))
def test_injected_anomaly_is_reported_with_its_events(anomaly: str, shape: Shape, seed: int, tmp_path: Path) -> None:
    injected = inject(shape.events(), anomaly, random.Random(seed))
    assume(injected is not None)
    assert injected is not None
    events, touched = injected
    report = _audit(events, tmp_path)
    witnesses = [c for c in report.cases if c.anomaly == anomaly]  # type: ignore[attr-defined]
    assert witnesses, f"{anomaly} not reported: {report.to_json()}"  # type: ignore[attr-defined]
    assert any(set(touched) <= set(c.ops) for c in witnesses), (touched, witnesses)
    assert report.to_json()["valid"] is False  # type: ignore[attr-defined]


def test_minimal_witness_of_a_lost_write(tmp_path: Path) -> None:
    t = "persistent://public/default/t0"
    events = [
        {"index": 0, "time": 1200, "process": 3, "type": "invoke", "f": "append", "topic": t, "value": "3-17"},
        {
            "index": 1,
            "time": 5400,
            "process": 3,
            "type": "ok",
            "f": "append",
            "topic": t,
            "value": "3-17",
            "position": [12, 4, 0],
        },
        {
            "index": 2,
            "time": 80_000_000_000,
            "process": 9,
            "type": "invoke",
            "f": "read",
            "topic": t,
            "from": None,
            "final": True,
        },
        {
            "index": 3,
            "time": 80_000_001_000,
            "process": 9,
            "type": "ok",
            "f": "read",
            "topic": t,
            "from": None,
            "final": True,
            "value": [],
        },
    ]
    report = _audit(events, tmp_path)
    doc = report.to_json()  # type: ignore[attr-defined]
    assert doc["anomaly_types"] == ["lost-write", "stale-read"]
    lost = doc["anomalies"]["lost-write"]
    assert [w["ops"] for w in lost] == [[1, 3]]
    assert "3-17" in lost[0]["explanation"] and "[12,4,0]" in lost[0]["explanation"]


def test_info_append_may_appear_once_but_not_twice(tmp_path: Path) -> None:
    t = "persistent://public/default/t0"
    events = [
        {"index": 0, "time": 1, "process": 1, "type": "invoke", "f": "append", "topic": t, "value": "a"},
        {"index": 1, "time": 2, "process": 1, "type": "info", "f": "append", "topic": t, "value": "a"},
        {"index": 2, "time": 3, "process": 2, "type": "invoke", "f": "read", "topic": t, "from": None},
        {
            "index": 3,
            "time": 4,
            "process": 2,
            "type": "ok",
            "f": "read",
            "topic": t,
            "from": None,
            "value": [[[1, 0, 0], "a"]],
        },
    ]
    assert _audit(events, tmp_path).valid  # type: ignore[attr-defined]
    events[3]["value"] = [[[1, 0, 0], "a"], [[1, 1, 0], "a"]]
    report = _audit(events, tmp_path)
    assert "duplicate-value" in report.to_json()["anomaly_types"]  # type: ignore[attr-defined]
