"""Histories of several clusters (docs/history.md, Clusters): each cluster's log checked on its own, and the
replication anomalies, by the reference checker and by the Spark job, which must agree."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from spark import generate_geo
from spark.generate import write_jsonl
from spark.history import HistoryError, read_history
from spark.reference import check
from spark.report import REPLICATION_ANOMALIES

SEEDS = range(3)


def corpus(seeds: range = SEEDS) -> list[tuple[str | None, list[dict[str, Any]], list[int]]]:
    """Each seed's history, valid, and with each replication anomaly injected."""
    out: list[tuple[str | None, list[dict[str, Any]], list[int]]] = []
    for seed in seeds:
        events = generate_geo.generate(seed)
        out.append((None, events, []))
        for anomaly in REPLICATION_ANOMALIES:
            injected = generate_geo.inject(events, anomaly, random.Random(seed))
            assert injected is not None, f"seed {seed} offers no place for {anomaly}"
            out.append((anomaly, *injected))
    return out


def test_the_reference_finds_exactly_the_injected_anomaly(tmp_path: Path) -> None:
    for k, (anomaly, events, touched) in enumerate(corpus()):
        path = tmp_path / f"h{k}.jsonl"
        write_jsonl(events, str(path))
        report = check(read_history(str(path)))
        assert {c.anomaly for c in report.cases} == ({anomaly} if anomaly else set()), report.to_json()
        assert all(set(touched) <= set(c.ops) for c in report.cases)
        if anomaly:  # reported on the remote's log of the topic
            assert all(c.topic.endswith((" @east", " @west")) for c in report.cases)
        else:  # every cluster's log is a topic of its own
            assert {t.rsplit(" @", 1)[1] for t in report.topics} == {"east", "west"}


def test_duplicates_are_no_anomaly_when_the_namespace_does_not_deduplicate(tmp_path: Path) -> None:
    events = generate_geo.generate(0)
    injected = generate_geo.inject(events, "replication-duplicate", random.Random(0))
    assert injected is not None
    path = tmp_path / "h.jsonl"
    write_jsonl(injected[0], str(path))
    assert not check(read_history(str(path)), replication_dedup=True).valid
    assert check(read_history(str(path)), replication_dedup=False).valid


def test_replicated_values_are_not_phantoms_nor_gaps_of_the_remote(tmp_path: Path) -> None:
    """A read in west shows a value appended in east between two of west's own, and a read cut by its limit
    shows only replicated values: neither is an anomaly of west's log."""
    t = "persistent://public/geo/t"

    def event(i: int, process: int, kind: str, f: str, cluster: str, **fields: Any) -> dict[str, Any]:
        return {
            "index": i,
            "time": 1000 * (i + 1),
            "process": process,
            "type": kind,
            "f": f,
            "topic": t,
            "cluster": cluster,
            **fields,
        }

    events = [
        event(0, 1, "invoke", "append", "west", value="w1"),
        event(1, 1, "ok", "append", "west", value="w1", position=[5, 0, 0]),
        event(2, 2, "invoke", "append", "east", value="e1"),
        event(3, 2, "ok", "append", "east", value="e1", position=[1, 0, 0]),
        event(4, 1, "invoke", "append", "west", value="w2"),
        event(5, 1, "ok", "append", "west", value="w2", position=[5, 2, 0]),
        event(6, 3, "invoke", "read", "west", **{"from": [5, 1, 0], "limit": 1}),
        event(7, 3, "ok", "read", "west", **{"from": [5, 1, 0], "limit": 1, "value": [[[5, 1, 0], "e1"]]}),
        event(8, 3, "invoke", "read", "west", **{"from": None, "final": True}),
        event(
            9,
            3,
            "ok",
            "read",
            "west",
            **{"from": None, "final": True, "value": [[[5, 0, 0], "w1"], [[5, 1, 0], "e1"], [[5, 2, 0], "w2"]]},
        ),
        event(10, 3, "invoke", "read", "east", **{"from": None, "final": True}),
        event(
            11,
            3,
            "ok",
            "read",
            "east",
            **{"from": None, "final": True, "value": [[[1, 0, 0], "e1"], [[1, 1, 0], "w1"], [[1, 2, 0], "w2"]]},
        ),
    ]
    path = tmp_path / "h.jsonl"
    write_jsonl(events, str(path))
    report = check(read_history(str(path)))
    assert report.valid, report.to_json()
    events[11]["value"] = [[[1, 0, 0], "e1"], [[1, 1, 0], "w2"], [[1, 2, 0], "w1"]]  # w1, w2 swapped in east
    write_jsonl(events, str(path))
    assert [c.anomaly for c in check(read_history(str(path))).cases] == ["replication-reorder"]


def test_a_completion_in_another_cluster_than_its_invoke_is_refused(tmp_path: Path) -> None:
    events = generate_geo.generate(1)
    completion = next(e for e in events if e["type"] == "ok" and e["f"] == "append")
    completion["cluster"] = "elsewhere"
    path = tmp_path / "h.jsonl"
    write_jsonl(events, str(path))
    with pytest.raises(HistoryError, match="does not match its invoke"):
        read_history(str(path))
    completion["cluster"] = ""
    write_jsonl(events, str(path))
    with pytest.raises(HistoryError):
        read_history(str(path))


@pytest.mark.spark
def test_spark_agrees_with_the_reference(spark: Any, tmp_path: Path) -> None:
    from spark.audit import audit

    histories = corpus(range(1))  # 4 histories (valid, and each anomaly injected) in one Spark job
    paths = []
    for k, (_, events, _) in enumerate(histories):
        path = tmp_path / f"h{k}.jsonl"
        write_jsonl(events, str(path))
        paths.append(str(path))
    results = audit(paths)
    for (anomaly, _, _), path, result in zip(histories, paths, results, strict=True):
        reference = check(read_history(path))
        assert {c.key for c in result.report.cases} == {c.key for c in reference.cases}, path
        assert result.report.valid == (anomaly is None)
        assert {t: (s.ops, s.appends_ok, s.reads) for t, s in result.report.topics.items()} == {
            t: (s.ops, s.appends_ok, s.reads) for t, s in reference.topics.items()
        }
