"""`workload --schema`: bad input is refused before anything runs or is written, with a reason that says what to
give instead."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.workload.test_history import run_workload


def workload(*args: str) -> subprocess.CompletedProcess[str]:
    return run_workload(*args, timeout=60)


def test_unknown_schema_kind_and_missing_prerequisites_are_refused(tmp_path: Path) -> None:
    out = tmp_path / "h.jsonl"
    unknown = workload("--client", "official", "--schema", "protobuf", "--service", "pulsar://127.0.0.1:1",
                       "--out", str(out))  # fmt: skip
    assert unknown.returncode == 2
    assert "--schema: invalid choice: 'protobuf' (choose from 'none', 'json', 'avro')" in unknown.stderr
    project = workload("--schema", "json", "--service", "pulsar://127.0.0.1:1", "--out", str(out))
    assert project.returncode == 2 and "add --client official" in project.stderr
    no_admin = workload("--client", "official", "--schema", "avro", "--partitions", "0",
                        "--service", "pulsar://127.0.0.1:1", "--out", str(out))  # fmt: skip
    assert no_admin.returncode == 2 and "--admin-url or --cluster-dir, or run with --schema none" in no_admin.stderr
    assert not out.exists()  # refused before anything was written
