"""The Spark job agrees with the reference checker on the corpus; the CLI runs end to end on Spark."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pulsar_ref.commands.audit import main
from spark.audit import audit, load
from spark.generate import write_jsonl
from spark.history import NemesisEvent, read_history
from spark.reference import check
from spark.report import SubscriptionFigures
from tests.audit.corpus import fixed_corpus

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("exact", [False, True], ids=["screened", "exact"])
def test_spark_agrees_with_reference_on_the_corpus(spark: Any, tmp_path: Path, exact: bool) -> None:
    """Both paths: the screen then the exact job on flagged topics, and the exact job on every topic."""
    corpus = fixed_corpus(4)  # 4 shapes x (valid + an injection of each anomaly), one Spark job
    paths = []
    for k, (_, events, _) in enumerate(corpus):
        path = tmp_path / f"h{k}.jsonl"
        write_jsonl(events, str(path))
        paths.append(str(path))
    results = audit(paths, exact=exact)
    assert [r.path for r in results] == paths
    for (anomaly, _, touched), history, result in zip(corpus, paths, results, strict=True):
        nemesis: list[NemesisEvent] = []
        ref = check(read_history(history, nemesis=nemesis), nemesis)
        assert {c.key for c in result.report.cases} == {c.key for c in ref.cases}, history
        assert_same_figures(result.report.subscriptions, ref.subscriptions)
        assert result.report.ops == ref.ops
        assert result.report.valid == (anomaly is None)
        if anomaly is not None:
            assert any(c.anomaly == anomaly and set(touched) <= set(c.ops) for c in result.report.cases)
        assert {t: (s.ops, s.appends_ok, s.reads) for t, s in result.report.topics.items()} == {
            t: (s.ops, s.appends_ok, s.reads) for t, s in ref.topics.items()
        }


def assert_same_figures(spark: list[SubscriptionFigures], reference: list[SubscriptionFigures]) -> None:
    """Counts exactly; the lag quantiles to a rounding error (both interpolate between closest ranks)."""
    assert [f.key for f in spark] == [f.key for f in reference]
    for a, b in zip(spark, reference, strict=True):
        assert {**vars(a), "lag_p50_ms": 0, "lag_p99_ms": 0} == {**vars(b), "lag_p50_ms": 0, "lag_p99_ms": 0}
        assert a.lag_p50_ms == pytest.approx(b.lag_p50_ms) and a.lag_p99_ms == pytest.approx(b.lag_p99_ms)


def test_cli_on_spark(spark: Any, tmp_path: Path) -> None:
    corpus = fixed_corpus(1)
    anomaly, events, touched = next(c for c in corpus if c[0] == "stale-read")
    bad, good = tmp_path / "bad.jsonl", tmp_path / "good.jsonl"
    write_jsonl(events, str(bad))
    write_jsonl(corpus[0][1], str(good))
    out, html = tmp_path / "r.json", tmp_path / "r.html"
    # Both histories in one Spark job; several histories get one report each (r.bad.json, r.good.json).
    assert main([str(bad), str(good), "--json", str(out), "--html", str(html)], prog="pulsar-ref audit") == 1
    doc = json.loads((tmp_path / "r.bad.json").read_text())
    assert "stale-read" in doc["anomaly_types"]
    assert any(set(touched) <= set(c["ops"]) for c in doc["anomalies"]["stale-read"])
    assert json.loads((tmp_path / "r.good.json").read_text())["valid"] is True
    assert "<svg" in (tmp_path / "r.bad.html").read_text()


def test_two_level_scans_agree_with_reference_across_buckets(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One-topic histories cut into many tiny buckets: every lead and running maximum crosses bucket boundaries.

    With 2 entries per position bucket and 8 events per index bucket, the successor of a position and the
    maximum seen before an invoke mostly come from other buckets (other tasks), so a wrong combination of the
    bucket boundaries shows up as a missed or spurious case compared with the reference checker.
    """
    import random

    from spark import audit as audit_module
    from spark import screen as screen_module
    from spark.generate import generate, inject
    from spark.report import ONE_CLUSTER_ANOMALIES, QUEUE_ANOMALIES

    logs = [a for a in ONE_CLUSTER_ANOMALIES if a not in QUEUE_ANOMALIES]  # the scans cut into buckets are the logs'
    monkeypatch.setattr(audit_module, "POS_BUCKET", 2)
    monkeypatch.setattr(audit_module, "INDEX_BUCKET", 8)
    monkeypatch.setattr(screen_module, "POS_BUCKET_BITS", 1)
    monkeypatch.setattr(screen_module, "INDEX_BUCKET_BITS", 3)
    histories: list[tuple[str | None, list[dict[str, Any]], list[int]]] = []
    for seed in range(2):
        events = generate(seed=seed, ops=600, processes=50, topics=1, rollover=0.02, limit_ratio=0.7)
        histories.append((None, events, []))
        for name in logs:
            injected = inject(events, name, random.Random(seed))
            if injected is not None:
                histories.append((name, *injected))
    paths = []
    for k, (_, events, _) in enumerate(histories):
        path = tmp_path / f"h{k}.jsonl"
        write_jsonl(events, str(path))
        paths.append(str(path))
    screened = screen_module.screen(load(spark, paths))
    assert screened is not None
    results = audit(paths)
    assert {a for a, _, _ in histories if a} == set(logs)
    for h, ((anomaly, _, touched), history, result) in enumerate(zip(histories, paths, results, strict=True)):
        # The screen flags a topic exactly when it holds an anomaly (its flags follow the definitions).
        assert {t for k, t in screened.suspects if k == h} == {c.topic for c in result.report.cases}, anomaly
        ref = check(read_history(history))
        assert {c.key for c in result.report.cases} == {c.key for c in ref.cases}, (anomaly, history)
        assert result.report.valid == (anomaly is None)
        if anomaly is not None:
            assert any(c.anomaly == anomaly and set(touched) <= set(c.ops) for c in result.report.cases)


def test_running_maxima_carry_across_buckets(spark: Any) -> None:
    """spark/scan.py on a few rows, two indices per bucket: most maxima come from earlier buckets (a dropped carry
    gives nulls or lower values), and none leaks from one topic into another."""
    from pyspark.sql import functions as F

    from spark.scan import running_maxima

    acks = {"t": [5, None, None, 7, None, 2, None, None, 1, None], "u": [None, 3, None, None]}
    rows = [(0, t, i, i // 2, a, None if a is None else 10 * a) for t, rs in acks.items() for i, a in enumerate(rs)]
    df = spark.createDataFrame(
        rows, "history int, topic string, index long, index_bucket long, ack long, read_reach long"
    )
    queries = running_maxima(df, ["history", "topic"], keep=F.col("ack").isNull())
    got = {(r["topic"], r["index"]): (r["highest_ack"], r["highest_reach"]) for r in queries.collect()}
    expected = {("t", 1): 5, ("t", 2): 5, ("t", 4): 7, ("t", 6): 7, ("t", 7): 7, ("t", 9): 7, ("u", 2): 3, ("u", 3): 3}
    assert got == {**{k: (a, 10 * a) for k, a in expected.items()}, ("u", 0): (None, None)}
    assert set(queries.columns) == {*df.columns, "highest_ack", "highest_reach"}


def test_malformed_history_exits_2_on_the_spark_path(spark: Any, tmp_path: Path, capsys: Any) -> None:
    """Without --reference the format is checked while Spark audits: a bad line still means exit 2, no verdict."""
    events = fixed_corpus(1)[0][1]
    path = tmp_path / "h.jsonl"
    write_jsonl(events, str(path))
    lines = path.read_text().splitlines()
    lines[7] = lines[7].replace('"index":7,', '"index":70,')
    path.write_text("\n".join(lines) + "\n")
    assert main([str(path)], prog="pulsar-ref audit") == 2
    captured = capsys.readouterr()
    assert "h.jsonl:8: index is 70" in captured.err and "VALID" not in captured.out
    assert main([str(path.with_name("missing.jsonl"))], prog="pulsar-ref audit") == 2
    assert "no such file" in capsys.readouterr().err
    # The session is still usable after the cancelled job.
    good = tmp_path / "g.jsonl"
    write_jsonl(events, str(good))
    assert main([str(good)], prog="pulsar-ref audit") == 0


def test_positions_too_wide_to_pack_are_audited_exactly(spark: Any, tmp_path: Path) -> None:
    """Ledger ids near 2**62 leave no bits for entry and batch: no screen, the exact job decides everything."""
    from spark import screen as screen_module

    corpus = fixed_corpus(1)
    paths = []
    for k, (_, events, _) in enumerate(corpus[:3]):
        wide = [_shift_ledgers(e, 2**62) for e in events]
        path = tmp_path / f"w{k}.jsonl"
        write_jsonl(wide, str(path))
        paths.append(str(path))
    assert screen_module.screen(load(spark, paths)) is None
    for (anomaly, _, _), history, result in zip(corpus[:3], paths, audit(paths), strict=True):
        ref = check(read_history(history))
        assert {c.key for c in result.report.cases} == {c.key for c in ref.cases}
        assert result.report.valid == (anomaly is None)


def _shift_ledgers(event: dict[str, Any], by: int) -> dict[str, Any]:
    """The event with `by` added to the ledger id of every position it carries (order is kept)."""
    out = dict(event)
    for key in ("position", "from"):
        if out.get(key) is not None:
            out[key] = [out[key][0] + by, *out[key][1:]]
    if out["f"] == "read" and out["type"] == "ok":
        out["value"] = [[[p[0] + by, *p[1:]], v] for p, v in out["value"]]
    return out


def test_a_read_entry_beyond_the_packed_widths_flags_its_topic(spark: Any, tmp_path: Path) -> None:
    """Packing widths come from acks and `from` only: a read entry wider than them must not be packed silently."""
    from spark import screen as screen_module

    events = [dict(e) for e in fixed_corpus(1)[0][1]]
    k = next(i for i, e in enumerate(events) if e["f"] == "read" and e["type"] == "ok" and e["value"])
    (pos, val), *rest = events[k]["value"]
    events[k]["value"] = [[[pos[0] + 2**40, *pos[1:]], val], *rest]
    path = tmp_path / "h.jsonl"
    write_jsonl(events, str(path))
    screened = screen_module.screen(load(spark, [str(path)]))
    assert screened is not None and set(screened.suspects) == {(0, events[k]["topic"])}
    (result,) = audit([str(path)])
    ref = check(read_history(str(path)))
    assert not ref.valid and {c.key for c in result.report.cases} == {c.key for c in ref.cases}
