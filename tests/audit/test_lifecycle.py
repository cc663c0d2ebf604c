"""`workload --lifecycle` on a real standalone under broker and bookie kills (issue 45 item 5): the run's namespace
offloads closed ledgers while the nemesis acts (the admin API lists them `offloaded`, their bookie copies deleted
at once), the final reads read the acknowledged values back from them, and the Spark audit and the reference find
the history valid, compacted reads included (each topic compacted on demand while the nemesis acts and the
producers send, then read with read_compacted, one of these reads with a horizon and followed by more appends; and
compacted at the end, with tombstones before the horizon and appends after it, a tombstone among them, then read
again). The same history with the final reads stripped of what the offloaded ledgers hold (as if a read skipped
them) is flagged by both: every acknowledged value there is a lost-write; a compacted read stripped of an
acknowledged key's value is compacted-missing; one showing a key again that a tombstone deleted is
compacted-stale."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from impl.broker.web.admin_client import AdminClient
from impl.cluster.deployment import Cluster
from impl.workload import lifecycle
from spark.audit import audit
from spark.history import NemesisEvent, read_history
from spark.reference import check

REPO = Path(__file__).resolve().parents[2]
# Small ledgers, so that a 200-op run closes several per topic; no deletion lag, so the offloaded copies are the
# only ones left to read.
STANDALONE = ("--max-entries-per-ledger", "10", "--offload-deletion-lag-ms", "0")


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def write(path: Path, events: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(e, separators=(",", ":")) + "\n" for e in events))
    return path


@pytest.fixture(scope="module")
def lifecycle_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str, dict[str, list[int]]]]:
    """The history, the run's stdout, and each topic's offloaded ledgers as the admin API lists them after it."""
    root = tmp_path_factory.mktemp("lifecycle")
    cluster = Cluster.plan_standalone(root / "standalone", die_with_parent=True, options=STANDALONE)
    try:
        cluster.up(timeout_s=90)
        history = root / "h.jsonl"
        result = subprocess.run(
            [
                sys.executable, "-m", "pulsar_ref.cli", "workload", "--lifecycle", "--cluster-dir",
                str(cluster.directory), "--topics", "2", "--partitions", "2", "--processes", "3", "--ops", "200",
                "--rate", "40", "--seed", "1", "--nemesis", "kill-broker,kill-bookie", "--nemesis-order", "cycle",
                "--nemesis-interval", "1.5", "--out", str(history),
            ],
            capture_output=True, text=True, timeout=200, cwd=REPO,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-3000:]
        assert cluster.admin_url is not None
        admin = AdminClient(cluster.admin_url, timeout_s=10.0)
        topics = sorted({e["topic"] for e in lines(history) if e.get("final")})
        listed = {}
        for topic in topics:
            stats = admin.call("GET", "/admin/v2/" + topic.replace("://", "/", 1) + "/internalStats")
            listed[topic] = lifecycle.offloaded_ledgers(stats)
        yield history, result.stdout, listed
    finally:
        cluster.down()


def skipping_offloaded(events: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], set[str]]:
    """The history with every final read stripped of the entries in the ledgers its invoke names `offloaded`
    (offloaded before it started: it read them from the offloaded copies), and the values stripped."""
    finals = {e["index"] for e in events if e.get("final") and e["type"] == "invoke"}
    stripped: set[str] = set()
    corrupted = [dict(e) for e in events]
    pending: dict[int, set[int]] = {}  # process -> the offloaded ledgers its open final read named
    for e in corrupted:
        if e["index"] in finals:
            pending[e["process"]] = set(e.get("offloaded", []))
        elif e.get("final") and e["type"] in ("ok", "fail", "info"):
            offloaded = pending.pop(e["process"])
            if e["type"] == "ok":
                stripped |= {value for (position, value) in e["value"] if position[0] in offloaded}
                e["value"] = [entry for entry in e["value"] if entry[0][0] not in offloaded]
    return corrupted, stripped


def last_compacted(events: list[dict[str, Any]]) -> set[int]:
    """The indices of the `ok` read-compacted events made after the final reads (the faults healed)."""
    last_final = max(e["index"] for e in events if e.get("final"))
    return {e["index"] for e in events if e["f"] == "read-compacted" and e["type"] == "ok" and e["index"] > last_final}


def showing_deleted(events: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """The history with the first final `ok` read-compacted that has a key deleted at or before its horizon (its
    last acknowledged value there a tombstone) showing that key's value before the tombstone again, and that value."""
    acks = sorted((e for e in events if e["f"] == "append" and e["type"] == "ok"), key=lambda e: e["position"])
    corrupted, last = [dict(e) for e in events], last_compacted(events)
    for e in corrupted:
        if e["index"] not in last:
            continue
        behind = [a for a in acks if a["topic"] == e["topic"] and a["position"][:2] <= e["horizon"]]
        for key, last in {a["key"]: a for a in behind}.items():
            earlier = [a for a in behind if a["key"] == key and not a.get("tombstone")]
            if last.get("tombstone") and earlier:
                e["value"] = sorted([*e["value"], [earlier[-1]["position"], earlier[-1]["value"]]])
                return corrupted, earlier[-1]["value"]
    raise AssertionError("no compacted read has a key deleted at or before its horizon")


def dropping_compacted(events: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], str]:
    """The history with the first final `ok` read-compacted stripped of its first acknowledged value, and that
    value."""
    acked = {e["value"] for e in events if e["f"] == "append" and e["type"] == "ok"}
    corrupted, dropped, last = [dict(e) for e in events], "", last_compacted(events)
    for e in corrupted:
        if e["index"] in last and not dropped:
            dropped = next(value for _, value in e["value"] if value in acked)
            e["value"] = [entry for entry in e["value"] if entry[1] != dropped]
    return corrupted, dropped


@pytest.mark.processes
def test_offloaded_ledgers_are_read_back_under_faults_and_a_skipped_one_is_lost(
    lifecycle_run: tuple[Path, str, dict[str, list[int]]], tmp_path: Path
) -> None:
    history, stdout, listed = lifecycle_run
    events = lines(history)
    injected = {e["f"] for e in events if e["process"] == "nemesis" and e["f"] != "heal" and "error" not in e}
    assert injected == {"kill-broker", "kill-bookie"}, injected
    assert sum(map(len, listed.values())) >= 1, listed  # the admin API lists offloaded ledgers
    assert "ledgers offloaded: " in stdout and "ledgers offloaded: 0 " not in stdout, stdout
    finals = [e for e in events if e.get("final") and e["type"] == "invoke"]
    assert finals and all(e["lifecycle"] == lifecycle.policies() for e in finals)
    assert all(e["topic"].startswith("persistent://public/lifecycle-") for e in finals)

    # per topic, while the nemesis acted and the producers sent, a compaction on demand, its end recorded on the
    # compacted read tried after it (`ok` or `fail`)
    heal = min(e["index"] for e in events if e.get("final"))
    raced = [e for e in events if e["f"] == "read-compacted" and e["type"] == "invoke" and e["index"] < heal]
    assert sorted(e["topic"] for e in raced) == sorted(e["topic"] for e in finals), raced
    assert all(e["compaction"] in ("SUCCESS", "ERROR", "timed out") for e in raced), raced
    assert f"compactions on demand under faults: {sum(e['compaction'] == 'SUCCESS' for e in raced)} of" in stdout
    # one begun while a fault was in effect: after a fault injected, before the next heal
    nemesis_events = [e for e in events if e["process"] == "nemesis"]
    in_effect = [max((n["index"], n) for n in nemesis_events if n["index"] < e["index"])[1] for e in raced]
    assert any(n["f"] != "heal" and "error" not in n for n in in_effect), (raced, nemesis_events)
    # one after a compaction that succeeded, `ok` with a horizon, the producers still appending after it
    ends = [next(c for c in events if c["process"] == e["process"] and c["index"] > e["index"]) for e in raced]
    last_append = max(e["index"] for e in events if e["f"] == "append" and e["type"] == "invoke" and e["index"] < heal)
    horizons = [
        c
        for e, c in zip(raced, ends, strict=True)
        if e["compaction"] == "SUCCESS" and c["type"] == "ok" and c["horizon"]
    ]
    assert any(c["index"] < last_append for c in horizons), (raced, ends, last_append)
    compacted = [e for e in events if e["index"] in last_compacted(events)]
    assert sorted(e["topic"] for e in compacted) == sorted(e["topic"] for e in finals)
    assert all(e["horizon"] is not None and e["value"] for e in compacted), compacted
    # compacted keys, then the appends made after the compaction on demand
    assert all(any(p[:2] <= e["horizon"] for p, _ in e["value"]) for e in compacted), compacted
    assert all(any(p[:2] > e["horizon"] for p, _ in e["value"]) for e in compacted), compacted
    appends = [e for e in events if e["f"] == "append" and e["type"] == "invoke"]
    assert all(e.get("key") for e in appends)
    tombstones = {e["value"] for e in appends if e.get("tombstone")}
    final_values = {v for e in events if e.get("final") and e["type"] == "ok" for _, v in e["value"]}
    assert tombstones and tombstones & final_values, tombstones  # sent, and read back by the name they carry
    # a tombstone after the horizon is delivered, by name, as Pulsar's compacted reader does
    tail = {v for e in compacted for p, v in e["value"] if p[:2] > e["horizon"]}
    assert tombstones & tail, tail

    nemesis: list[NemesisEvent] = []
    good = check(read_history(str(history), nemesis=nemesis), nemesis)
    assert good.valid, good.to_json()

    corrupted, read_back = skipping_offloaded(events)
    acked = {e["value"] for e in events if e["f"] == "append" and e["type"] == "ok"}
    lost = read_back & acked  # what the final reads returned from offloaded copies (an info append's aside)
    assert lost, read_back
    bad = write(tmp_path / "skipped.jsonl", corrupted)
    nemesis = []
    report = check(read_history(str(bad), nemesis=nemesis), nemesis)
    found = {c.explanation.split("'")[1] for c in report.cases if c.anomaly == "lost-write"}
    assert found == lost, report.to_json()

    stripped, dropped = dropping_compacted(events)
    nemesis = []
    report = check(read_history(str(write(tmp_path / "stripped.jsonl", stripped)), nemesis=nemesis), nemesis)
    [case] = report.cases
    assert case.anomaly == "compacted-missing" and f"{dropped!r} at" in case.explanation, case

    revived, value = showing_deleted(events)
    nemesis = []
    report = check(read_history(str(write(tmp_path / "revived.jsonl", revived)), nemesis=nemesis), nemesis)
    [case] = report.cases
    assert case.anomaly == "compacted-stale" and f"{value!r} (at" in case.explanation, case


@pytest.mark.processes
@pytest.mark.spark
def test_spark_agrees_with_the_reference_on_the_lifecycle_run(
    spark: Any, lifecycle_run: tuple[Path, str, dict[str, list[int]]], tmp_path: Path
) -> None:
    history = lifecycle_run[0]
    # Both corruptions in one history: its lost-writes and its compacted-missing; a deleted key shown in another.
    bad = write(tmp_path / "skipped.jsonl", dropping_compacted(skipping_offloaded(lines(history))[0])[0])
    revived = write(tmp_path / "revived.jsonl", showing_deleted(lines(history))[0])
    paths = (history, bad, revived)
    for path, audited in zip(paths, audit([str(p) for p in paths]), strict=True):
        nemesis: list[NemesisEvent] = []
        reference = check(read_history(str(path), nemesis=nemesis), nemesis)
        assert audited.report.valid == reference.valid == (path == history)
        assert audited.report.ops == reference.ops
        assert sorted((c.key, c.explanation) for c in audited.report.cases) == sorted(
            (c.key, c.explanation) for c in reference.cases
        )
