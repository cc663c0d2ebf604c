"""`workload --lifecycle`: refused before anything runs or is written where it cannot set its namespace's
policies, with a reason that says what to give instead."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.workload.test_history import run_workload


def workload(*args: str) -> subprocess.CompletedProcess[str]:
    return run_workload(*args, timeout=60)


def test_lifecycle_needs_an_admin_url_and_one_cluster(tmp_path: Path) -> None:
    out = tmp_path / "h.jsonl"
    no_admin = workload("--lifecycle", "--partitions", "0", "--service", "pulsar://127.0.0.1:1", "--out", str(out))
    assert no_admin.returncode == 2 and "--lifecycle sets the namespace's policies" in no_admin.stderr
    assert "give --admin-url or --cluster-dir" in no_admin.stderr
    geo = workload("--lifecycle", "--instance-dir", str(tmp_path / "i"), "--out", str(out))
    assert geo.returncode == 2 and "--lifecycle runs on one cluster; drop --instance-dir" in geo.stderr
    assert not out.exists()  # refused before anything was written
    helped = workload("--help")
    assert "--lifecycle" in helped.stdout and "public/lifecycle-<run>" in helped.stdout
