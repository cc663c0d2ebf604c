"""A typed workload (`workload --schema avro`) on a real standalone, with the schema evolving mid-run under a
broker kill: its history records every delivery's schema version and the registry's versions, and the Spark
audit and the reference agree that it is valid; the same history with one delivery's version changed to one the
registry never returned is flagged as unknown-schema-version by both."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from impl.cluster.deployment import Cluster
from spark.audit import audit
from spark.history import HistoryError, NemesisEvent, read_history
from spark.reference import check
from spark.report import Report

REPO = Path(__file__).resolve().parents[2]


def lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def write(path: Path, events: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(e, separators=(",", ":")) + "\n" for e in events))
    return path


@pytest.fixture(scope="module")
def typed_history(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Avro producers, readers and consumers; the evolution at op 41 of 80 at 20/s falls in the broker kill
    (calm 2 s, then 2 s down). One partitioned topic: its partitions share its schema."""
    root = tmp_path_factory.mktemp("typed")
    cluster = Cluster.plan_standalone(root / "standalone", die_with_parent=True)
    try:
        cluster.up(timeout_s=90)
        history = root / "h.jsonl"
        result = subprocess.run(
            [
                sys.executable, "-m", "pulsar_ref.cli", "workload", "--client", "official", "--schema", "avro",
                "--cluster-dir", str(cluster.directory), "--topics", "0", "--partitions", "2", "--processes", "3",
                "--consumers", "2", "--ops", "80", "--rate", "20", "--seed", "3", "--nemesis", "kill-broker",
                "--nemesis-max", "1", "--nemesis-interval", "2", "--out", str(history),
            ],
            capture_output=True, text=True, timeout=200, cwd=REPO,
        )  # fmt: skip
        assert result.returncode == 0, result.stderr[-3000:]
        assert "schema versions:" in result.stdout
        yield history
    finally:
        cluster.down()


def judged(spark: Any, *paths: Path) -> list[tuple[Report, Report]]:
    """(Spark's report, the reference's) of each history, the Spark ones from one job."""
    out = []
    for path, audited in zip(paths, audit([str(p) for p in paths]), strict=True):
        nemesis: list[NemesisEvent] = []
        out.append((audited.report, check(read_history(str(path), nemesis=nemesis), nemesis)))
    return out


@pytest.mark.processes
@pytest.mark.spark
def test_typed_run_is_valid_and_a_foreign_version_is_flagged_by_both(
    spark: Any, typed_history: Path, tmp_path: Path
) -> None:
    events = lines(typed_history)
    assert any(e["process"] == "nemesis" and e["f"] == "kill-broker" and "error" not in e for e in events)
    registry = {e["topic"]: e["versions"] for e in events if e["f"] == "schemas" and e["type"] == "ok"}
    assert list(registry.values()) == [[0, 1]], registry  # the partitioned topic, by its base name
    delivered = [e for e in events if e["f"] == "receive" and e["type"] == "ok"]
    assert delivered and all("schema_version" in e for e in delivered)
    assert {e["schema_version"] for e in delivered} == {0, 1}  # the evolution reached the consumers

    corrupted = [dict(e) for e in events]
    victim = next(e for e in corrupted if e["f"] == "receive" and e["type"] == "ok" and e["schema_version"] == 1)
    victim["schema_version"] = 7  # a version the registry never returned for its topic
    bad = write(tmp_path / "bad.jsonl", corrupted)

    (good_spark, good_ref), (bad_spark, bad_ref) = judged(spark, typed_history, bad)
    assert good_ref.valid and good_spark.valid, (good_ref.to_json(), good_spark.to_json())
    assert good_spark.ops == good_ref.ops
    for report in (bad_spark, bad_ref):
        assert [c.anomaly for c in report.cases] == ["unknown-schema-version"], report.to_json()
        (case,) = report.cases
        schemas = min(e["index"] for e in events if e["f"] == "schemas" and e["type"] == "ok"
                      and e["topic"] == victim["topic"])  # fmt: skip
        assert case.topic == victim["topic"] and case.ops == tuple(sorted((victim["index"], schemas)))
        assert "version 7" in case.explanation
    assert [(c.key, c.explanation) for c in bad_spark.cases] == [(c.key, c.explanation) for c in bad_ref.cases]
    assert bad_spark.ops == bad_ref.ops


def test_validator_refuses_malformed_versions(tmp_path: Path) -> None:
    base = [
        {"index": 0, "time": 1, "process": 0, "type": "invoke", "f": "schemas", "topic": "t"},
        {"index": 1, "time": 2, "process": 0, "type": "ok", "f": "schemas", "topic": "t", "versions": [0, 1]},
    ]
    ops = read_history(str(write(tmp_path / "ok.jsonl", base)))
    assert [op.versions for op in ops] == [(0, 1)]
    for versions in ("0", [0, -1], [0.5], None):
        broken = [base[0], {**base[1], "versions": versions}]
        with pytest.raises(HistoryError, match="versions"):
            read_history(str(write(tmp_path / "bad.jsonl", broken)))
