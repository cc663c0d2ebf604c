"""`workload --lifecycle --consumers` on a real standalone under bookie kills (issue 45 item 5): the run's namespace
has a message TTL of a few seconds, the subscriptions without a consumer during the run have their messages expired
by the broker's ticker, and the audit counts them (`expired`) instead of calling them lost: the reference (and the
Spark job) find the history valid. The same history where one subscription never delivered a message appended less
than the TTL before its drain is flagged `expired-early` by both."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from impl.cluster.deployment import Cluster
from impl.workload import lifecycle
from spark.history import NemesisEvent, read_history
from spark.reference import check
from spark.report import Report

REPO = Path(__file__).resolve().parents[2]
NS_PER_S = 1_000_000_000


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def write(path: Path, events: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(e, separators=(",", ":")) + "\n" for e in events))
    return path


def reference(path: Path) -> Report:
    nemesis: list[NemesisEvent] = []
    return check(read_history(str(path), nemesis=nemesis), nemesis)


@pytest.fixture(scope="module")
def ttl_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """The history and the run's stdout: 2 consumer processes (the Exclusive subscriptions), so the other
    subscriptions have no consumer until the drain; a run longer than the TTL plus the broker's 10 s ticker."""
    root = tmp_path_factory.mktemp("lifecycle-ttl")
    cluster = Cluster.plan_standalone(root / "standalone", die_with_parent=True)
    try:
        cluster.up(timeout_s=90)
        history = root / "h.jsonl"
        result = subprocess.run(
            [
                sys.executable, "-m", "pulsar_ref.cli", "workload", "--lifecycle", "--cluster-dir",
                str(cluster.directory), "--topics", "1", "--partitions", "2", "--processes", "2", "--consumers", "2",
                "--ops", "300", "--rate", "20", "--seed", "1", "--nemesis", "kill-bookie", "--nemesis-interval", "3",
                "--out", str(history),
            ],
            capture_output=True, text=True, timeout=300, cwd=REPO,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-3000:]
        yield history, result.stdout
    finally:
        cluster.down()


def vanishing_early(events: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str, str]:
    """The history where a subscription never delivered a value it did deliver, appended less than the TTL before
    the subscription's earliest ok drain: each of its ok receives of the value made a `fail` (nothing came).
    Returns the copy, the subscription and the value."""
    invoked: dict[Any, int] = {}  # process -> time of its open invoke
    appended: dict[str, int] = {}  # value of an ok append -> its invoke time
    drained: dict[tuple[str, str], int] = {}  # subscription -> its earliest ok drain's time
    ttl: dict[tuple[str, str], int] = {}
    for e in events:
        if e["type"] == "invoke":
            invoked[e["process"]] = e["time"]
            if e["f"] == "drain":
                ttl[(e["topic"], e["subscription"])] = e.get("message_ttl", 0)
        elif e["f"] == "append" and e["type"] == "ok":
            appended[e["value"]] = invoked[e["process"]]
        elif e["f"] == "drain" and e["type"] == "ok":
            drained.setdefault((e["topic"], e["subscription"]), e["time"])
    candidates = sorted(
        (appended[e["value"]], (e["topic"], e["subscription"]), e["value"])
        for e in events
        if e["f"] == "receive" and e["type"] == "ok" and e["value"] in appended
        if (e["topic"], e["subscription"]) in drained
        if appended[e["value"]] + ttl[(e["topic"], e["subscription"])] * NS_PER_S
        > drained[(e["topic"], e["subscription"])]
    )
    assert candidates, "no delivery of a value appended less than the TTL before its subscription's drain"
    _, sub, value = candidates[-1]
    corrupted = []
    for e in events:
        if e["f"] == "receive" and e["type"] == "ok" and (e["topic"], e["subscription"]) == sub and e["value"] == value:
            kept = {
                k: v for k, v in e.items() if k not in ("value", "position", "redelivery_count", "key", "partition")
            }
            e = {**kept, "type": "fail", "error": "timeout"}
        corrupted.append(e)
    return corrupted, sub[1], value


@pytest.mark.processes
def test_messages_expire_by_ttl_under_faults_and_one_missing_too_soon_is_expired_early(
    ttl_run: tuple[Path, str], tmp_path: Path
) -> None:
    history, stdout = ttl_run
    events = lines(history)
    injected = {e["f"] for e in events if e["process"] == "nemesis" and e["f"] != "heal" and "error" not in e}
    assert injected == {"kill-bookie"}, injected
    drains = [e for e in events if e["f"] == "drain" and e["type"] == "invoke"]
    assert drains and all(e["message_ttl"] == lifecycle.MESSAGE_TTL_S for e in drains)
    finals = [e for e in events if e.get("final") and e["type"] == "invoke"]
    assert finals and all(e["lifecycle"]["messageTTL"] == lifecycle.MESSAGE_TTL_S for e in finals)

    good = reference(history)
    assert good.valid, good.to_json()
    assert good.expired_by_ttl > 0, (good.to_json()["expired"], stdout)
    assert {f.message_ttl for f in good.expired} == {lifecycle.MESSAGE_TTL_S}
    assert len(good.expired) == 8  # every drained subscription: 4 types on 2 topics

    corrupted, sub, value = vanishing_early(events)
    bad = reference(write(tmp_path / "early.jsonl", corrupted))
    assert [(c.anomaly, c.explanation.split("'")[1]) for c in bad.cases] == [("expired-early", value)], bad.to_json()
    assert f"subscription {sub!r}" in bad.cases[0].explanation


@pytest.mark.deep  # ~2 min; Spark's TTL judgment is checked against the reference in tests/audit/test_ttl.py
@pytest.mark.processes
@pytest.mark.spark
def test_spark_agrees_with_the_reference_on_the_ttl_run(spark: Any, ttl_run: tuple[Path, str], tmp_path: Path) -> None:
    from spark.audit import audit

    history = ttl_run[0]
    bad = write(tmp_path / "early.jsonl", vanishing_early(lines(history))[0])
    for path, audited in zip((history, bad), audit([str(history), str(bad)]), strict=True):
        expected = reference(path)
        assert audited.report.valid == expected.valid == (path == history)
        assert sorted((c.key, c.explanation) for c in audited.report.cases) == sorted(
            (c.key, c.explanation) for c in expected.cases
        )
        assert audited.report.expired == expected.expired
