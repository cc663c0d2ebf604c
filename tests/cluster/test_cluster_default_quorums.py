"""A killed bookie with the broker's default quorums (E=3, Qw=3, Qa=2 on 3 bookies: no spare bookie for an
ensemble change). Every acknowledged write must still be readable once the bookie is back.

This run found a broker bug (fixed in f63c985): the failed ledger's last entry stayed unreadable for ever
("entry N is beyond the last confirmed entry N-1"), so the final reads never succeeded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cluster.conftest import REPO, pulsar_ref


@pytest.mark.processes
@pytest.mark.zookeeper
def test_all_acknowledged_writes_readable_after_a_bookie_kill_with_default_quorums(
    cluster_dir: Path, tmp_path: Path
) -> None:
    up = pulsar_ref("cluster", "up", "--dir", str(cluster_dir), "--bookies", "3", "--brokers", "2")
    assert up.returncode == 0, up.stderr
    history = tmp_path / "history.jsonl"
    workload = subprocess.run(
        [
            sys.executable, "-m", "pulsar_ref.cli", "workload", "--cluster-dir", str(cluster_dir),
            "--topics", "2", "--partitions", "0", "--processes", "4", "--ops", "300", "--rate", "40",
            "--seed", "1", "--nemesis", "kill-bookie", "--nemesis-max", "1", "--nemesis-interval", "2",
            "--final-read-timeout", "15", "--out", str(history),
        ],
        capture_output=True, text=True, timeout=180, cwd=REPO,
    )  # fmt: skip
    events = [json.loads(line) for line in history.read_text().splitlines()]
    assert any(e["process"] == "nemesis" and e["f"] == "kill-bookie" and "error" not in e for e in events)
    assert workload.returncode == 0, workload.stderr[-2000:]
    acknowledged = {
        e["value"] for e in events if e["process"] != "nemesis" and e["f"] == "append" and e["type"] == "ok"
    }
    final_values = {v for e in events if e.get("final") and e["type"] == "ok" for _, v in e["value"]}
    assert acknowledged <= final_values
