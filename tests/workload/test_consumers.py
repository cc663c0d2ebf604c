"""The workload's consumers on a real standalone, through both clients, with faults: every subscription type
consumes, acknowledges, negatively acknowledges, closes and resubscribes, every subscription drains, and the
plain-Python reference checker finds the history valid (the audit's definitions, docs/history.md)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from impl.cluster.deployment import Cluster
from spark.history import NemesisEvent, read_history
from spark.reference import check
from tests.workload.test_history import run_workload, standalone  # noqa: F401 (a fixture)

TYPES = {"Exclusive", "Failover", "Shared", "Key_Shared"}


def audited(history: Path) -> tuple[list[dict], object]:
    nemesis: list[NemesisEvent] = []
    ops = read_history(str(history), nemesis=nemesis)
    report = check(ops, nemesis)
    return [json.loads(line) for line in history.read_text().splitlines()], report


def assert_consumed_and_drained(evs: list[dict]) -> None:
    done = [e for e in evs if e["process"] != "nemesis" and e["type"] != "invoke"]
    kinds = Counter((e["f"], e["type"]) for e in done)
    for f in ("subscribe", "receive", "close", "drain", "nack"):
        assert kinds[(f, "ok")] > 0, (f, kinds)
    assert kinds[("ack", "ok")] + kinds[("ack", "info")] > 0, kinds
    subscribed = {e["subscription_type"] for e in evs if e["f"] == "subscribe" and e["type"] == "invoke"}
    assert subscribed == TYPES
    assert any(e.get("cumulative") for e in evs if e["f"] == "ack" and e["type"] == "invoke")
    assert any("partition" in e for e in done if e["f"] == "receive" and e["type"] == "ok")
    assert any("key" in e for e in done if e["f"] == "receive" and e["type"] == "ok")
    # Checked here independently of the checker: each drained subscription delivered every acknowledged append
    # of its topic.
    drained = {(e["topic"], e["subscription"]) for e in done if e["f"] == "drain" and e["type"] == "ok"}
    subs = {(e["topic"], e["subscription"]) for e in evs if e["f"] == "subscribe"}
    assert drained == subs
    delivered: dict[tuple[str, str], set[str]] = {}
    for e in done:
        if e["f"] == "receive" and e["type"] == "ok":
            delivered.setdefault((e["topic"], e["subscription"]), set()).add(e["value"])
    for e in done:
        if e["f"] == "append" and e["type"] == "ok":
            topic = e["topic"].split("-partition-")[0]
            for sub in (s for s in drained if s[0] == topic):
                assert e["value"] in delivered[sub], (e["value"], sub)


@pytest.mark.processes
def test_consumers_of_every_type_under_faults_with_the_project_client(standalone: Cluster, tmp_path: Path) -> None:  # noqa: F811
    history = tmp_path / "h.jsonl"
    result = run_workload(
        "--cluster-dir", str(standalone.directory), "--topics", "1", "--partitions", "2", "--processes", "3",
        "--ops", "400", "--rate", "30", "--consumers", "10", "--seed", "3",
        "--nemesis", "pause-standalone,kill-standalone", "--nemesis-order", "cycle", "--nemesis-max", "2",
        "--nemesis-interval", "4", "--out", str(history),
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "8 of 8 subscriptions drained" in result.stdout
    evs, report = audited(history)
    injected = {e["f"] for e in evs if e["process"] == "nemesis" and e["f"] != "heal" and "error" not in e}
    assert injected == {"pause-standalone", "kill-standalone"}
    assert_consumed_and_drained(evs)
    assert report.valid, report.to_json()  # type: ignore[attr-defined]
    figures = report.subscriptions  # type: ignore[attr-defined]
    assert {f.type for f in figures} == TYPES and {f.fault for f in figures} >= {"none", "pause-standalone"}
    assert sum(f.redeliveries for f in figures) > 0  # nacks and resubscriptions redeliver


@pytest.mark.processes
def test_consumers_with_the_official_client_under_a_broker_kill(standalone: Cluster, tmp_path: Path) -> None:  # noqa: F811
    history = tmp_path / "h.jsonl"
    result = run_workload(
        "--client", "official", "--cluster-dir", str(standalone.directory), "--topics", "1", "--partitions", "2",
        "--processes", "3", "--ops", "300", "--rate", "30", "--consumers", "10", "--seed", "4",
        "--nemesis", "kill-broker", "--nemesis-max", "1", "--nemesis-interval", "3", "--out", str(history),
        timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    evs, report = audited(history)
    assert any(e["process"] == "nemesis" and e["f"] == "kill-broker" and "error" not in e for e in evs)
    assert_consumed_and_drained(evs)
    # the official client has no ack receipts: its acks are sent, unconfirmed
    assert {e["type"] for e in evs if e["f"] == "ack" and e["type"] != "invoke"} <= {"info", "fail"}
    assert report.valid, report.to_json()  # type: ignore[attr-defined]


def test_consumers_need_an_admin_api_to_drain(tmp_path: Path) -> None:
    result = run_workload(
        "--service", "pulsar://127.0.0.1:1", "--partitions", "0", "--consumers", "2", "--out", str(tmp_path / "h")
    )
    assert result.returncode == 2 and "--consumers 0" in result.stderr
