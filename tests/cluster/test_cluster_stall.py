"""Issue 49: the nemesis's `stall` on a real cluster (ZooKeeper, 3 bookies, 2 brokers): a broker or bookie is
SIGSTOPped past its 10 s session timeout and resumed; it must register again by itself (each stall's heal says
so, with no error) and the audited history stays valid with nothing acknowledged lost. Deep: two stalls of
12 s each make it a minute or two."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster.conftest import REPO, pulsar_ref


@pytest.mark.deep
@pytest.mark.processes
@pytest.mark.zookeeper
@pytest.mark.spark
def test_stalled_nodes_register_again_by_themselves_and_the_audit_stays_valid(
    cluster_dir: Path, tmp_path: Path
) -> None:
    up = pulsar_ref(
        "cluster", "up", "--dir", str(cluster_dir), "--bookies", "3", "--brokers", "2",
        "--ensemble", "2", "--write-quorum", "2", "--ack-quorum", "2",
    )  # fmt: skip
    assert up.returncode == 0, up.stderr
    history = tmp_path / "history.jsonl"
    workload = subprocess.run(
        [
            sys.executable, "-m", "pulsar_ref.cli", "workload", "--cluster-dir", str(cluster_dir),
            "--topics", "2", "--partitions", "2", "--processes", "4", "--ops", "1500", "--rate", "30",
            "--seed", "3", "--nemesis", "stall", "--nemesis-max", "2", "--nemesis-interval", "3",
            "--stall-seconds", "12", "--out", str(history),
        ],
        capture_output=True, text=True, timeout=400, cwd=REPO,
    )  # fmt: skip
    assert workload.returncode == 0, workload.stderr
    events = [json.loads(line) for line in history.read_text().splitlines()]
    steps = [e for e in events if e["process"] == "nemesis"]
    stalls = [e for e in steps if e["f"] == "stall" and "error" not in e]
    assert len(stalls) == 2, steps
    heals = [e for e in steps if e["f"] == "heal" and e.get("fault") == "stall"]
    assert len(heals) == 2 and all("error" not in e and "by itself" in e["detail"] for e in heals), heals
    report_path = tmp_path / "audit.json"
    audit = pulsar_ref("audit", str(history), "--json", str(report_path), timeout=400)
    report = json.loads(report_path.read_text())
    assert audit.returncode == 0, (audit.stdout, report["anomaly_types"])
    assert report["valid"] is True
    assert pulsar_ref("cluster", "down", "--dir", str(cluster_dir)).returncode == 0
