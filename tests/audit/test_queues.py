"""The anomalies of subscriptions on small hand-written histories: what each definition flags and what excuses
it (docs/history.md, Consumers), decided alike by the reference checker and the Spark job, and the validator's
errors for broken consumer events."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spark.generate import write_jsonl
from spark.history import HistoryError, NemesisEvent, read_history
from spark.reference import check
from spark.report import Report

T = "persistent://public/default/t0"


class History:
    """Events with index and time assigned in order; each operation is an invoke and its completion."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def add(self, **event: Any) -> int:
        self.events.append({"index": len(self.events), "time": 1000 * (len(self.events) + 1), **event})
        return len(self.events) - 1

    def op(self, process: Any, f: str, outcome: str = "ok", done: dict[str, Any] | None = None, **fields: Any) -> int:
        self.add(process=process, type="invoke", f=f, topic=T, **fields)
        return self.add(process=process, type=outcome, f=f, topic=T, **fields, **(done or {}))

    def append(self, process: int, value: str, entry: int, key: str = "k") -> int:
        return self.op(process, "append", value=value, key=key, done={"position": [1, entry, 0]})

    def subscribe(self, process: int, consumer: str, kind: str = "Key_Shared", sub: str = "s") -> None:
        self.op(process, "subscribe", subscription=sub, consumer=consumer, subscription_type=kind)

    def receive(
        self, process: int, consumer: str, value: str, entry: int, key: str = "k", sub: str = "s", rc: int = 0
    ) -> int:
        delivery = {"value": value, "position": [1, entry, 0], "redelivery_count": rc, "key": key}
        return self.op(process, "receive", subscription=sub, consumer=consumer, done=delivery)

    def ack(self, process: int, consumer: str, value: str, entry: int, sub: str = "s") -> int:
        return self.op(
            process, "ack", subscription=sub, consumer=consumer, value=value, position=[1, entry, 0], cumulative=False
        )

    def report(self, tmp_path: Path) -> Report:
        path = tmp_path / "h.jsonl"
        write_jsonl(self.events, str(path))
        nemesis: list[NemesisEvent] = []
        return check(read_history(str(path), nemesis=nemesis), nemesis)


def two_consumers_one_key(between: str | None = None) -> tuple[History, int, int]:
    """Consumer a gets k's first message, then consumer b gets k's second; `between` inserts what may excuse it."""
    h = History()
    h.append(0, "v1", 0)
    h.append(0, "v2", 1)
    h.subscribe(1, "a")
    h.subscribe(2, "b")
    d1 = h.receive(1, "a", "v1", 0)
    if between == "ack":
        h.ack(1, "a", "v1", 0)
    elif between == "close":
        h.op(1, "close", subscription="s", consumer="a")
    elif between == "fault":
        h.add(process="nemesis", type="info", f="kill-broker", value="broker-1")
    elif between == "redelivered":
        h.receive(2, "b", "v1", 0, rc=1)
    d2 = h.receive(2 if between != "redelivered" else 3, "b" if between != "redelivered" else "c", "v2", 1)
    return h, d1, d2


def test_a_key_moving_to_another_consumer_while_held_is_key_order(tmp_path: Path) -> None:
    h, d1, d2 = two_consumers_one_key()
    report = h.report(tmp_path)
    assert [(c.anomaly, c.ops) for c in report.cases] == [("key-order", (d1, d2))]
    assert "still held 'v1' unacknowledged" in report.cases[0].explanation


@pytest.mark.parametrize("between", ["ack", "close", "fault", "redelivered"])
def test_what_lets_a_key_move(between: str, tmp_path: Path) -> None:
    h, _, _ = two_consumers_one_key(between)
    report = h.report(tmp_path)
    assert report.valid, report.to_json()


def test_a_key_delivered_out_of_order_and_a_session_out_of_order(tmp_path: Path) -> None:
    h = History()
    h.append(0, "v1", 0)
    h.append(0, "v2", 1)
    h.subscribe(1, "a")
    first = h.receive(1, "a", "v2", 1)
    second = h.receive(1, "a", "v1", 0)
    h.subscribe(2, "x", kind="Failover", sub="f")
    third = h.receive(2, "x", "v2", 1, sub="f")
    fourth = h.receive(2, "x", "v1", 0, sub="f")
    h.receive(2, "x", "v1", 0, sub="f", rc=1)  # a redelivery: aside
    report = h.report(tmp_path)
    assert sorted((c.anomaly, c.ops) for c in report.cases) == [
        ("key-order", (first, second)),
        ("subscription-reorder", (third, fourth)),
    ]


def test_lost_and_unexpected_deliveries(tmp_path: Path) -> None:
    h = History()
    acked = h.append(0, "v1", 0)
    h.op(0, "append", "fail", value="v2", key="k")
    failed = len(h.events) - 1
    h.subscribe(1, "a", kind="Shared")
    phantom = h.receive(1, "a", "nobody", 5)
    shown = h.receive(1, "a", "v2", 1)
    drained = h.op(1, "drain", subscription="s")
    report = h.report(tmp_path)
    assert sorted((c.anomaly, c.ops) for c in report.cases) == [
        ("lost-message", (acked, drained)),
        ("unexpected-delivery", (failed, shown)),
        ("unexpected-delivery", (phantom,)),
    ]


def test_figures_count_redeliveries_duplicates_and_deliveries_after_a_confirmed_ack(tmp_path: Path) -> None:
    h = History()
    h.append(0, "v1", 0)
    h.subscribe(1, "a", kind="Shared")
    h.receive(1, "a", "v1", 0)
    h.ack(1, "a", "v1", 0)
    h.add(process="nemesis", type="info", f="kill-broker", value="broker-1")
    h.receive(1, "a", "v1", 0, rc=0)  # again, after its ack was confirmed and a fault
    (after, before) = h.report(tmp_path).subscriptions  # by fault kind: "kill-broker" < "none"
    assert (before.fault, before.deliveries, before.first, before.duplicates, before.after_ack) == ("none", 1, 1, 0, 0)
    assert (after.fault, after.deliveries, after.first, after.duplicates, after.after_ack) == (
        "kill-broker",
        1,
        0,
        1,
        1,
    )
    assert before.lag_p50_ms is not None and after.lag_p50_ms is None


@pytest.mark.spark
def test_spark_agrees_on_the_hand_written_histories(spark: Any, tmp_path: Path) -> None:
    from spark.audit import audit

    histories = [two_consumers_one_key(b)[0] for b in (None, "ack", "close", "fault", "redelivered")] + [drained_run()]
    paths, references = [], []
    for k, h in enumerate(histories):
        (tmp_path / str(k)).mkdir()
        references.append(h.report(tmp_path / str(k)))
        paths.append(str(tmp_path / str(k) / "h.jsonl"))
    for result, reference in zip(audit(paths), references, strict=True):
        assert {c.key for c in result.report.cases} == {c.key for c in reference.cases}
        assert [f.key for f in result.report.subscriptions] == [f.key for f in reference.subscriptions]


@pytest.mark.parametrize(
    ("event", "reason"),
    [
        ({"f": "receive", "consumer": "a"}, "needs its subscription"),
        ({"f": "receive", "subscription": "s"}, "needs its consumer"),
        ({"f": "subscribe", "subscription": "s", "consumer": "a", "subscription_type": "Random"}, "subscription_type"),
        ({"f": "ack", "subscription": "s", "consumer": "a", "value": "v"}, "names the delivery"),
        (
            {"f": "ack", "subscription": "s", "consumer": "a", "value": "v", "position": [1, 0, 0], "partition": "x"},
            "is not a partition of",
        ),
        ({"f": "dequeue", "subscription": "s", "consumer": "a"}, "f must be one of"),
    ],
)
def test_broken_consumer_invokes_are_refused_with_their_line(
    event: dict[str, Any], reason: str, tmp_path: Path
) -> None:
    path = tmp_path / "h.jsonl"
    write_jsonl([{"index": 0, "time": 1, "process": 1, "type": "invoke", "topic": T, **event}], str(path))
    with pytest.raises(HistoryError) as e:
        read_history(str(path))
    assert e.value.line == 1 and reason in e.value.reason


def test_a_receive_must_carry_its_delivery_and_only_acks_may_end_info_and_go_on(tmp_path: Path) -> None:
    h = History()
    h.subscribe(1, "a")
    h.op(1, "ack", "info", subscription="s", consumer="a", value="v", position=[1, 0, 0], cumulative=False)
    h.op(1, "receive", "ok", subscription="s", consumer="a")  # no delivery
    path = tmp_path / "h.jsonl"
    write_jsonl(h.events, str(path))
    with pytest.raises(HistoryError) as e:
        read_history(str(path))
    assert e.value.line == len(h.events) and "carries the delivered value" in e.value.reason
    h = History()
    h.op(1, "receive", "info", subscription="s", consumer="a")
    h.op(1, "receive", "fail", subscription="s", consumer="a")
    write_jsonl(h.events, str(path))
    with pytest.raises(HistoryError, match="after an info completion"):
        read_history(str(path))


def drained_run() -> History:
    """Subscription s has a consumer during the run, subscription idle none; a fault, then the final drain
    (consumers named drain-<process>, docs/history.md) delivers what is left to both."""
    h = History()
    h.append(0, "v1", 0)
    h.append(0, "v2", 1)
    h.subscribe(1, "a", kind="Shared")
    h.receive(1, "a", "v1", 0)
    h.ack(1, "a", "v1", 0)
    h.add(process="nemesis", type="info", f="expire-session", value="broker-1")
    for process, sub, left in ((5, "s", [("v2", 1)]), (6, "idle", [("v1", 0), ("v2", 1)])):
        h.subscribe(process, f"drain-{process}", kind="Shared", sub=sub)
        for value, entry in left:
            h.receive(process, f"drain-{process}", value, entry, sub=sub)
            h.ack(process, f"drain-{process}", value, entry, sub=sub)
        h.op(process, "drain", subscription=sub)
    return h


def test_the_drain_is_its_own_phase_never_the_last_fault(tmp_path: Path) -> None:
    from spark.history import read_history
    from spark.html import render

    h = drained_run()
    report = h.report(tmp_path)
    rows = {(f.subscription, f.fault): (f.deliveries, f.first) for f in report.subscriptions}
    assert rows == {("s", "none"): (1, 1), ("s", "drain"): (1, 1), ("idle", "drain"): (2, 2)}
    assert report.waited_for_drain == 2  # idle's two messages: s had a consumer, its one drained message did not wait
    assert report.to_json()["waited_for_drain"] == 2
    page = render(str(tmp_path / "h.jsonl"), report, read_history(str(tmp_path / "h.jsonl")))
    assert 'class="phase phase-drain"' in page and "drain (after healing)" in page
    assert "<p id='waited-for-drain'>2 messages waited for the drain" in page
