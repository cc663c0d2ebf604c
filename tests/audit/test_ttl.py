"""Message TTL in the audit of subscriptions (docs/history.md, Message TTL), on small hand-written histories: a
drained subscription's undelivered acknowledged append is counted as expired when the drain's TTL may have passed
since the append's invoke, flagged `expired-early` when it cannot have, and `lost-message` when the drain records
no TTL; the reference and the Spark job agree, and a broken `message_ttl` is refused with its line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spark.generate import write_jsonl
from spark.history import HistoryError, NemesisEvent, read_history
from spark.reference import check
from spark.report import Report

T = "persistent://public/lifecycle-x/t0"
S = 1_000_000_000  # ns


class History:
    """Events at the times given (nanoseconds), indices in order."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def add(self, at: float, **event: Any) -> int:
        self.events.append({"index": len(self.events), "time": int(at * S), **event})
        return len(self.events) - 1

    def op(
        self, process: int, f: str, at: float, done_at: float, done: dict[str, Any] | None = None, **fields: Any
    ) -> int:
        self.add(at, process=process, type="invoke", f=f, topic=T, **fields)
        return self.add(done_at, process=process, type="ok", f=f, topic=T, **fields, **(done or {}))

    def append(self, value: str, entry: int, at: float) -> int:
        return self.op(0, "append", at, at + 0.1, value=value, done={"position": [1, entry, 0]})

    def receive(self, value: str, entry: int, at: float, sub: str = "s") -> None:
        self.op(1, "subscribe", at, at, subscription=sub, consumer="c", subscription_type="Shared")
        delivery = {"value": value, "position": [1, entry, 0], "redelivery_count": 0}
        self.op(1, "receive", at, at, subscription=sub, consumer="c", done=delivery)
        self.op(1, "close", at, at, subscription=sub, consumer="c")

    def drain(self, at: float, ttl: int | None, sub: str = "s", process: int = 2) -> int:
        fields = {} if ttl is None else {"message_ttl": ttl}
        return self.op(process, "drain", at, at, subscription=sub, **fields)

    def path(self, tmp_path: Path) -> Path:
        path = tmp_path / "h.jsonl"
        write_jsonl(self.events, str(path))
        return path

    def report(self, tmp_path: Path) -> Report:
        nemesis: list[NemesisEvent] = []
        return check(read_history(str(self.path(tmp_path)), nemesis=nemesis), nemesis)


def undelivered(ttl: int | None, drained_at: float = 10.0) -> History:
    """v1 appended at 1 s, v2 at 9 s, v3 at 2 s; only v3 delivered; the subscription drained at `drained_at`."""
    h = History()
    h.append("v1", 0, 1.0)
    h.append("v3", 1, 2.0)
    h.append("v2", 2, 9.0)
    h.receive("v3", 1, 9.5)
    h.drain(drained_at, ttl)
    return h


def test_an_undelivered_message_older_than_the_ttl_is_counted_a_younger_one_expired_early(tmp_path: Path) -> None:
    report = undelivered(ttl=5).report(tmp_path)
    [case] = report.cases
    assert case.anomaly == "expired-early"
    v2_invoke = 4  # v1's invoke and ok, v3's, then v2's invoke
    assert case.ops == (v2_invoke, v2_invoke + 1, len(undelivered(5).events) - 1)
    assert "'v2'" in case.explanation and "message TTL of 5 s" in case.explanation
    assert [(f.subscription, f.message_ttl, f.expired) for f in report.expired] == [("s", 5, 1)]  # v1
    doc = report.to_json()
    assert doc["expired_by_ttl"] == 1 and doc["anomaly_types"] == ["expired-early"]


def test_without_a_ttl_both_are_lost_and_nothing_is_counted(tmp_path: Path) -> None:
    report = undelivered(ttl=None).report(tmp_path)
    lost = sorted(c.explanation.split("'")[1] for c in report.cases if c.anomaly == "lost-message")
    assert lost == ["v1", "v2"] and len(report.cases) == 2
    assert report.expired == [] and "expired" not in report.to_json()
    assert undelivered(ttl=0).report(tmp_path).to_json() == report.to_json()  # 0: no TTL


def test_the_ttl_passing_exactly_at_the_drain_may_have_expired_it(tmp_path: Path) -> None:
    report = undelivered(ttl=5, drained_at=14.0).report(tmp_path)  # v2 invoked at 9 s: 9 + 5 = 14
    assert report.valid, report.to_json()
    assert report.expired_by_ttl == 2
    early = undelivered(ttl=5, drained_at=13.999).report(tmp_path)
    assert [c.anomaly for c in early.cases] == ["expired-early"]


def test_the_earliest_ok_drain_decides_and_a_subscription_delivering_everything_counts_none(tmp_path: Path) -> None:
    h = undelivered(ttl=5)
    h.receive("v1", 0, 11.0, sub="t")
    h.receive("v2", 2, 11.0, sub="t")
    h.receive("v3", 1, 11.0, sub="t")
    h.drain(12.0, 5, sub="t", process=3)
    h.drain(30.0, 5, process=4)  # a later drain of s changes nothing: v2 was gone at 10 s already
    report = h.report(tmp_path)
    assert [c.anomaly for c in report.cases] == ["expired-early"]
    assert [(f.subscription, f.expired) for f in report.expired] == [("s", 1), ("t", 0)]


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        ({"f": "drain", "subscription": "s", "message_ttl": -1}, "message_ttl"),
        ({"f": "drain", "subscription": "s", "message_ttl": "5"}, "message_ttl"),
        ({"f": "receive", "subscription": "s", "consumer": "c", "message_ttl": 5}, "message_ttl"),
    ],
)
def test_a_broken_message_ttl_is_refused_with_its_line(event: dict[str, Any], reason: str, tmp_path: Path) -> None:
    h = History()
    h.append("v1", 0, 1.0)
    h.add(2.0, process=1, type="invoke", topic=T, **event)
    with pytest.raises(HistoryError) as e:
        read_history(str(h.path(tmp_path)))
    assert e.value.line == 3 and reason in str(e.value)


@pytest.mark.spark
def test_spark_agrees_on_the_ttl_histories(spark: Any, tmp_path: Path) -> None:
    from spark.audit import audit

    histories = [undelivered(5), undelivered(None), undelivered(5, 14.0), undelivered(5, 13.999)]
    paths, references = [], []
    for k, h in enumerate(histories):
        (tmp_path / str(k)).mkdir()
        references.append(h.report(tmp_path / str(k)))
        paths.append(str(tmp_path / str(k) / "h.jsonl"))
    for result, reference in zip(audit(paths), references, strict=True):
        got = sorted((c.key, c.explanation) for c in result.report.cases if c.anomaly == "expired-early")
        assert got == sorted((c.key, c.explanation) for c in reference.cases if c.anomaly == "expired-early")
        assert {c.key for c in result.report.cases} == {c.key for c in reference.cases}
        assert result.report.expired == reference.expired
        assert result.report.to_json()["anomaly_types"] == reference.to_json()["anomaly_types"]
