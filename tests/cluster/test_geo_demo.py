"""`pulsar-ref demo --geo` end to end: an instance of two clusters (real processes, real ZooKeeper), the workload
on both while the nemesis kills and pauses whole remote sides and replicating brokers, the final reads in both
clusters, and the Spark audit with the replication checks: valid, and the instance stopped afterwards."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.cluster.conftest import processes_under, pulsar_ref

pytestmark = [pytest.mark.processes, pytest.mark.zookeeper, pytest.mark.spark]


def test_demo_geo_runs_two_clusters_with_faults_and_audits_valid(tmp_path: Path) -> None:
    demo = pulsar_ref(
        *("demo", "--geo", "--seconds", "12", "--rate", "25", "--nemesis-interval", "2", "--seed", "5"),
        *("--dir", str(tmp_path)),
        timeout=600,
    )
    assert demo.returncode == 0, demo.stdout + demo.stderr[-3000:]
    assert "verdict: VALID" in demo.stdout
    (run,) = tmp_path.glob("run-*")
    events = [json.loads(line) for line in (run / "history.jsonl").read_text().splitlines()]
    clusters = {e.get("cluster") for e in events if e["process"] != "nemesis"}
    assert clusters == {"cluster-1", "cluster-2"}
    faults = {e["f"] for e in events if e["process"] == "nemesis" and e["f"] != "heal" and "error" not in e}
    assert {"kill-brokers", "kill-broker"} <= faults
    finals = [e for e in events if e.get("final") and e["type"] == "ok"]
    assert {e["cluster"] for e in finals} == {"cluster-1", "cluster-2"}
    report = json.loads((run / "audit.json").read_text())
    assert report["valid"] and report["topics"] == 2 * 5  # 3 topics and 2 partitions, in each cluster
    assert processes_under(run) == []  # the instance was stopped
