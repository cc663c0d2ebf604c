"""The Spark job agrees with the reference checker on the corpus; the CLI runs end to end on Spark."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pulsar_ref.commands.audit import main
from spark.audit import audit
from spark.generate import write_jsonl
from spark.history import read_history
from spark.reference import check
from tests.audit.corpus import fixed_corpus

pytestmark = pytest.mark.spark


def test_spark_agrees_with_reference_on_the_corpus(spark: Any, tmp_path: Path) -> None:
    corpus = fixed_corpus(8)  # 8 shapes x (valid + 11 injections), one Spark job
    paths = []
    for k, (_, events, _) in enumerate(corpus):
        path = tmp_path / f"h{k}.jsonl"
        write_jsonl(events, str(path))
        paths.append(str(path))
    results = audit(paths)
    assert [r.path for r in results] == paths
    for (anomaly, _, touched), path, result in zip(corpus, paths, results, strict=True):
        ref = check(read_history(path))
        assert {c.key for c in result.report.cases} == {c.key for c in ref.cases}, path
        assert result.report.valid == (anomaly is None)
        if anomaly is not None:
            assert any(c.anomaly == anomaly and set(touched) <= set(c.ops) for c in result.report.cases)
        assert {t: (s.ops, s.appends_ok, s.reads) for t, s in result.report.topics.items()} == {
            t: (s.ops, s.appends_ok, s.reads) for t, s in ref.topics.items()
        }


def test_cli_on_spark(spark: Any, tmp_path: Path) -> None:
    corpus = fixed_corpus(1)
    anomaly, events, touched = next(c for c in corpus if c[0] == "stale-read")
    path = tmp_path / "h.jsonl"
    write_jsonl(events, str(path))
    out = tmp_path / "r.json"
    html = tmp_path / "r.html"
    assert main([str(path), "--json", str(out), "--html", str(html)], prog="pulsar-ref audit") == 1
    doc = json.loads(out.read_text())
    assert "stale-read" in doc["anomaly_types"]
    assert any(set(touched) <= set(c["ops"]) for c in doc["anomalies"]["stale-read"])
    assert "<svg" in html.read_text()
    write_jsonl(corpus[0][1], str(path))
    assert main([str(path)], prog="pulsar-ref audit") == 0
