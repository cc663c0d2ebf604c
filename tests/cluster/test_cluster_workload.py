"""The main job, short: a real cluster (ZooKeeper, 3 bookies, 2 brokers), the workload with every kind of kill and
consumers on every subscription type, and the Spark audit of its history: valid, no acknowledged write lost, no
message lost to a drained subscription. Its topics live their storage's life too (`--lifecycle`, as `demo --cluster`
runs it): small ledgers offloaded to the brokers' shared directory, compactions on demand under the faults, and the
final reads through the offloaded ledgers after a broker was killed."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster.conftest import REPO, processes_of, pulsar_ref

FAULTS = "kill-bookie,kill-broker,expire-session,pause-bookie"


@pytest.mark.processes
@pytest.mark.zookeeper
@pytest.mark.spark
def test_cluster_run_with_faults_is_valid_and_loses_no_acknowledged_write(cluster_dir: Path, tmp_path: Path) -> None:
    up = pulsar_ref(
        "cluster", "up", "--dir", str(cluster_dir), "--bookies", "3", "--brokers", "2",
        "--ensemble", "2", "--write-quorum", "2", "--ack-quorum", "2",
        "--offload-driver", "filesystem", "--max-entries-per-ledger", "20", "--offload-deletion-lag-ms", "0",
    )  # fmt: skip
    assert up.returncode == 0, up.stderr
    assert up.stdout.strip().startswith("pulsar://127.0.0.1:")

    history = tmp_path / "history.jsonl"
    workload = subprocess.run(
        [
            sys.executable, "-m", "pulsar_ref.cli", "workload", "--cluster-dir", str(cluster_dir),
            "--topics", "2", "--partitions", "2", "--processes", "4", "--ops", "1000", "--rate", "40",
            "--consumers", "8", "--seed", "5", "--nemesis", FAULTS, "--nemesis-order", "cycle", "--nemesis-max", "4",
            "--nemesis-interval", "2", "--lifecycle", "--out", str(history),
        ],
        capture_output=True, text=True, timeout=240, cwd=REPO,
    )  # fmt: skip
    assert workload.returncode == 0, workload.stderr
    events = [json.loads(line) for line in history.read_text().splitlines()]
    injected = {e["f"] for e in events if e["process"] == "nemesis" and e["f"] != "heal" and "error" not in e}
    assert set(FAULTS.split(",")) <= injected, [e for e in events if e["process"] == "nemesis"]
    # the broker killed owned bundles (the nemesis leaves idle brokers alone), so its topics moved
    kills = [e for e in events if e["process"] == "nemesis" and e["f"] == "kill-broker" and "error" not in e]
    assert all(e["bundles"] for e in kills), kills
    acknowledged = {
        e["value"] for e in events if e["process"] != "nemesis" and e["f"] == "append" and e["type"] == "ok"
    }
    assert len(acknowledged) > 100
    # the lifecycle on two brokers: ledgers offloaded and read back, a compaction on demand under the faults
    assert "ledgers offloaded: " in workload.stdout and "ledgers offloaded: 0 " not in workload.stdout, workload.stdout
    raced = [e for e in events if e["f"] == "read-compacted" and e["type"] == "invoke" and "compaction" in e]
    assert raced and any(e["compaction"] == "SUCCESS" for e in raced), raced

    # every node is back after the run
    status = pulsar_ref("cluster", "status", "--dir", str(cluster_dir))
    assert status.returncode == 0, status.stdout

    report_path = tmp_path / "audit.json"
    audit = pulsar_ref("audit", str(history), "--json", str(report_path), timeout=400)
    report = json.loads(report_path.read_text())
    assert audit.returncode == 0, (audit.stdout, report["anomaly_types"])
    assert report["valid"] is True and "lost-write" not in report["anomaly_types"]
    # 3 topics (2 plain, 1 partitioned) x 4 subscription types, each drained, each measured under the faults
    assert "12 of 12 subscriptions drained" in workload.stdout
    figures = report["subscriptions"]
    drained = {(e["topic"], e["subscription"]) for e in events if e["f"] == "drain" and e["type"] == "ok"}
    measured = {(f["topic"], f["subscription"]) for f in figures}
    # a subscription with no figure delivered nothing: the namespace's message TTL expired its whole backlog
    expired = {(x["topic"], x["subscription"]) for x in report["expired"] if x["expired"]}
    assert measured <= drained and drained - measured <= expired, (drained - measured, report["expired"])
    assert {f["fault"] for f in figures} > {"none"}
    # the final reads saw every acknowledged value (checked here too, independently of the audit)
    final_values = {v for e in events if e.get("final") and e["type"] == "ok" for _, v in e["value"]}
    assert acknowledged <= final_values

    assert pulsar_ref("cluster", "down", "--dir", str(cluster_dir)).returncode == 0
    assert processes_of(cluster_dir) == []
