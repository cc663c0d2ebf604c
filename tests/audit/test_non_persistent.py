"""Non-persistent topics in the workload and the audit (docs/history.md, Non-persistent topics): a real mixed run
on a standalone under a fault is valid and its loss is counted, not flagged; the same history with two
deliveries of one consumer session swapped is a non-persistent-reorder; hand-written histories pin what is
flagged and what is excused; the Spark job agrees with the reference on all of them (one Spark job for all)."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from impl.cluster.deployment import Cluster
from spark.generate import write_jsonl
from spark.history import HistoryError, NemesisEvent, read_history
from spark.reference import check
from spark.report import Report
from tests.workload.test_history import run_workload

NP = "non-persistent://public/default/n0"
P = "persistent://public/default/p0"


class History:
    """Hand-written events, index and time in order; each operation an invoke and its completion."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def add(self, **event: Any) -> int:
        self.events.append({"index": len(self.events), "time": 1000 * (len(self.events) + 1), **event})
        return len(self.events) - 1

    def op(self, process: Any, f: str, topic: str, done: dict[str, Any] | None = None, **fields: Any) -> int:
        self.add(process=process, type="invoke", f=f, topic=topic, **fields)
        return self.add(process=process, type="ok", f=f, topic=topic, **fields, **(done or {}))

    def append(self, process: int, value: str, topic: str = NP, entry: int = 0) -> int:
        return self.op(process, "append", topic, value=value, done={"position": [0, entry, 0]})

    def receive(self, process: int, consumer: str, value: str, topic: str = NP) -> int:
        delivery = {"value": value, "position": [0, 0, 0], "redelivery_count": 0}
        return self.op(process, "receive", topic, subscription="s", consumer=consumer, done=delivery)

    def write(self, path: Path) -> str:
        write_jsonl(self.events, str(path))
        return str(path)


def reference(path: str) -> Report:
    nemesis: list[NemesisEvent] = []
    return check(read_history(path, nemesis=nemesis), nemesis)


def mixed_history() -> tuple[History, dict[str, tuple[int, ...]]]:
    """One persistent and one non-persistent topic, each with an acknowledged append nobody ever gets, a reorder, a
    duplicate on a live connection, a duplicate excused by a fault, and the expected witnesses."""
    h = History()
    for i, v in enumerate(("1-1", "1-2", "1-3", "1-4")):
        h.append(1, v, entry=i)
    h.append(1, "1-5", P, entry=0)  # acknowledged, then missing from the final read: lost-write
    h.op(3, "read", P, **{"from": None, "final": True}, done={"value": []})
    h.op(2, "subscribe", NP, subscription="s", consumer="c", subscription_type="Shared")
    first = h.receive(2, "c", "1-2")
    reordered = h.receive(2, "c", "1-1")  # 1-1 was appended before 1-2 by the same process
    again = h.receive(2, "c", "1-2")  # no fault since 1-2's append: a duplicate on a live connection
    h.append(4, "4-1")
    h.add(process="nemesis", type="info", f="kill-standalone", value="standalone-1")
    h.receive(2, "c", "4-1")
    h.receive(2, "c", "4-1")  # the fault came after 4-1's append was invoked: the producer may have resent it
    # 1-3 and 1-4 acknowledged, never delivered: loss, counted
    return h, {"non-persistent-reorder": (first, reordered), "non-persistent-duplicate": (first, again)}


def test_non_persistent_loss_is_counted_and_order_and_duplicates_flagged(tmp_path: Path) -> None:
    h, witnesses = mixed_history()
    report = reference(h.write(tmp_path / "h.jsonl"))
    # loss stays an anomaly on the persistent topic of the same run (the empty final read is stale, too)
    assert {c.anomaly for c in report.cases if c.topic == P} == {"lost-write", "stale-read"}, report.to_json()
    found = {c.anomaly: c for c in report.cases if c.topic != P}
    assert set(found) == {"non-persistent-reorder", "non-persistent-duplicate"}, report.to_json()
    for name, ops in witnesses.items():
        assert found[name].ops == ops and found[name].topic == NP
    assert len([c for c in report.cases if c.anomaly == "non-persistent-duplicate"]) == 1  # 4-1's is excused
    [figures] = report.non_persistent
    assert (figures.acknowledged, figures.delivered, figures.lost) == (5, 3, 2)
    assert (figures.deliveries, figures.duplicates) == (5, 2)
    assert report.to_json()["non_persistent_lost"] == 2


def test_a_read_of_a_non_persistent_topic_is_refused_with_its_line(tmp_path: Path) -> None:
    h = History()
    h.append(1, "1-1")
    h.op(2, "read", NP, **{"from": None})
    with pytest.raises(HistoryError) as e:
        read_history(h.write(tmp_path / "h.jsonl"))
    assert e.value.line == 3 and "keeps nothing to read back" in e.value.reason


def test_the_workload_refuses_an_unknown_domain_and_non_persistent_geo(tmp_path: Path) -> None:
    result = run_workload("--service", "pulsar://127.0.0.1:1", "--domain", "volatile", "--out", str(tmp_path / "h"))
    assert result.returncode == 2 and "invalid choice: 'volatile'" in result.stderr
    result = run_workload(
        "--instance-dir", str(tmp_path), "--domain", "mixed", "--consumers", "0", "--out", str(tmp_path / "h")
    )
    assert result.returncode == 2 and "non-persistent topics are not replicated" in result.stderr
    assert not (tmp_path / "h").exists()


# --- a real run ----------------------------------------------------------------------------------------------


def swap_two_deliveries(evs: list[dict[str, Any]]) -> tuple[str, int, int]:
    """Swap the values of two consecutive deliveries of one producer's values to one consumer session of a
    non-persistent log; returns (log, first index, second index)."""
    producer = {e["value"]: e["process"] for e in evs if e["f"] == "append" and e["type"] == "ok"}
    last: dict[tuple[Any, ...], dict[str, Any]] = {}
    for e in evs:
        if e["f"] == "receive" and e["type"] == "ok" and e["topic"].startswith("non-persistent://"):
            log = e.get("partition", e["topic"])
            key = (e["subscription"], e["consumer"], log, producer.get(e["value"]))
            if key in last and key[3] is not None:
                a = last[key]
                a["value"], e["value"] = e["value"], a["value"]
                return log, a["index"], e["index"]
            last[key] = e
    raise AssertionError("no consumer session got two values of one producer")


def drop_from_final_read(evs: list[dict[str, Any]]) -> tuple[str, str]:
    """Cut the head of a persistent topic's final read up to its first acknowledged value (nothing before it, so no
    gap); returns (topic, that value)."""
    acked = {e["value"] for e in evs if e["f"] == "append" and e["type"] == "ok"}
    for e in evs:
        if e["f"] == "read" and e["type"] == "ok" and e.get("final") and e["value"]:
            values = [v for _, v in e["value"]]
            first = next((i for i, v in enumerate(values) if v in acked), None)
            if first is not None:
                e["value"] = e["value"][first + 1 :]
                return e["topic"], values[first]
    raise AssertionError("no final read shows an acknowledged value")


@pytest.fixture(scope="module")
def real_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict[tuple[str, str], int], str]]:
    """A mixed run (persistent t0; non-persistent t1 and a 2-partition topic) under kill-standalone, and the
    broker's drop count of every non-persistent subscription read before the standalone stops."""
    from impl.broker.web.admin_client import AdminClient, topic_path

    tmp = tmp_path_factory.mktemp("np-run")
    cluster = Cluster.plan_standalone(tmp / "standalone", die_with_parent=True)
    try:
        cluster.up(timeout_s=90)
        history = tmp / "h.jsonl"
        result = run_workload(
            "--cluster-dir", str(cluster.directory), "--domain", "mixed", "--topics", "2", "--partitions", "2",
            "--processes", "3", "--ops", "160", "--rate", "40", "--consumers", "12", "--seed", "7",
            "--nemesis", "kill-standalone", "--nemesis-max", "1", "--nemesis-interval", "2", "--out", str(history),
            timeout=120,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr
        admin = AdminClient(str(cluster.admin_url), timeout_s=10.0)
        logs = {
            e["topic"]
            for e in (json.loads(line) for line in history.read_text().splitlines())
            if e["f"] == "append" and e["topic"].startswith("non-persistent://")
        }
        drops: dict[tuple[str, str], int] = defaultdict(int)  # (topic, subscription), summed over partitions
        for log in logs:
            stats = admin.call("GET", topic_path(log) + "/stats")
            for name, sub in stats["subscriptions"].items():
                drops[(log.split("-partition-")[0], name)] += int(sub["msgDropCount"])
        yield history, dict(drops), result.stdout
    finally:
        cluster.down()


@pytest.mark.processes
@pytest.mark.spark
def test_a_real_mixed_run_is_valid_counts_its_loss_and_a_swap_is_flagged(
    real_run: tuple[Path, dict[tuple[str, str], int], str], spark: Any, tmp_path: Path
) -> None:
    from spark.audit import audit

    history, drops, stdout = real_run
    evs = [json.loads(line) for line in history.read_text().splitlines()]
    assert any(e["process"] == "nemesis" and e["f"] == "kill-standalone" and "error" not in e for e in evs)
    np_events = [e for e in evs if e.get("topic", "").startswith("non-persistent://")]
    assert {e["f"] for e in np_events} >= {"append", "subscribe", "receive"} and "read" not in {
        e["f"] for e in np_events
    }
    assert "non-persistent subscriptions consumed live" in stdout

    # The run corrupted twice: two deliveries of one session swapped, and an acknowledged value of the persistent
    # topic cut from its final read. Spark and the reference find exactly those two.
    corrupted = [dict(e) for e in evs]
    log, i, j = swap_two_deliveries(corrupted)
    persistent_topic, cut = drop_from_final_read(corrupted)
    write_jsonl(corrupted, str(tmp_path / "corrupted.jsonl"))
    [swapped] = [a.report for a in audit([str(tmp_path / "corrupted.jsonl")])]
    ref = reference(str(tmp_path / "corrupted.jsonl"))
    assert {c.key for c in swapped.cases} == {c.key for c in ref.cases}
    assert swapped.non_persistent == ref.non_persistent and swapped.ops == ref.ops
    assert {t: vars(s) for t, s in swapped.topics.items()} == {t: vars(s) for t, s in ref.topics.items()}
    assert sorted(c.anomaly for c in swapped.cases) == ["lost-write", "non-persistent-reorder"], swapped.to_json()
    assert ("non-persistent-reorder", log, (i, j)) in {c.key for c in swapped.cases}
    [lost] = [c for c in swapped.cases if c.anomaly == "lost-write"]
    assert lost.topic == persistent_topic and repr(cut) in lost.explanation

    run = reference(str(history))
    assert run.valid, run.to_json()
    assert run.non_persistent == swapped.non_persistent  # neither corruption changes a count
    # The loss figures, recomputed here from the history alone.
    acked: dict[str, set[str]] = defaultdict(set)
    got: dict[tuple[str, str], set[str]] = defaultdict(set)
    for e in np_events:
        if e["f"] == "append" and e["type"] == "ok":
            acked[e["topic"].split("-partition-")[0]].add(e["value"])
        if e["f"] == "receive" and e["type"] == "ok":
            got[(e["topic"], e["subscription"])].add(e["value"])
    assert run.non_persistent and {f.type for f in run.non_persistent} == {
        "Exclusive",
        "Failover",
        "Shared",
        "Key_Shared",
    }
    for f in run.non_persistent:
        assert f.lost == len(acked[f.topic] - got[(f.topic, f.subscription)]), f
    assert run.to_json()["non_persistent_lost"] == sum(f.lost for f in run.non_persistent) > 0
    # What the broker counts as dropped since it last loaded the topic was acknowledged and never delivered, or
    # never acknowledged at all.
    unconfirmed: dict[str, int] = defaultdict(int)
    for e in np_events:
        if e["f"] == "append" and e["type"] in ("fail", "info"):
            unconfirmed[e["topic"].split("-partition-")[0]] += 1
    for f in run.non_persistent:
        assert drops[(f.topic, f.subscription)] <= f.lost + unconfirmed[f.topic], (f, drops)


@pytest.mark.deep
@pytest.mark.spark
def test_spark_agrees_on_the_hand_written_mixed_history(spark: Any, tmp_path: Path) -> None:
    from spark.audit import audit

    h, _ = mixed_history()
    path = h.write(tmp_path / "h.jsonl")
    [result] = [a.report for a in audit([path])]
    ref = reference(path)
    assert {c.key for c in result.cases} == {c.key for c in ref.cases} and len(ref.cases) == 4
    assert result.non_persistent == ref.non_persistent and result.ops == ref.ops
