"""The workload's history against docs/history.md: the writer alone, and whole runs on a real standalone.

The format is checked with the audit's own validator (spark/history.py) and the plain-Python reference
checker (spark/reference.py): using them in a *test* is fine; the workload itself never imports spark/.
"""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from impl.broker.web.admin_client import AdminClient, topic_path
from impl.cluster.deployment import Cluster
from impl.workload.history import HistoryWriter
from spark.history import read_history
from spark.reference import check

REPO = Path(__file__).resolve().parents[2]


def events(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_writer_assigns_consecutive_indexes_and_monotonic_times_across_threads(tmp_path: Path) -> None:
    writer = HistoryWriter(tmp_path / "h.jsonl")

    def work(process: int) -> None:
        for n in range(200):
            writer.invoke(process, "append", "t", value=f"{process}-{n}")
            writer.complete(process, "ok", "append", "t", value=f"{process}-{n}", position=[1, n, process])

    threads = [threading.Thread(target=work, args=(p,)) for p in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    writer.nemesis("kill-bookie", "bookie-1")
    writer.close()
    evs = events(tmp_path / "h.jsonl")
    assert [e["index"] for e in evs] == list(range(len(evs))) == list(range(1601))
    assert all(a["time"] <= b["time"] for a, b in zip(evs, evs[1:], strict=False))
    assert all(isinstance(e["time"], int) for e in evs)
    assert writer.counts["ok"] == 800
    ops = read_history(str(tmp_path / "h.jsonl"))  # the audit's validator accepts it
    assert len(ops) == 800
    with pytest.raises(ValueError):
        HistoryWriter(tmp_path / "x.jsonl").complete(1, "done", "append", "t")


def test_the_workload_does_not_import_the_audit() -> None:
    for module in (REPO / "impl" / "workload").glob("*.py"):
        text = module.read_text()
        assert "import spark" not in text and "from spark" not in text, module


@pytest.fixture
def standalone(tmp_path: Path) -> Iterator[Cluster]:
    cluster = Cluster.plan_standalone(tmp_path / "standalone", die_with_parent=True)
    try:
        cluster.up(timeout_s=90)
        yield cluster
    finally:
        cluster.down()


def run_workload(*args: str, timeout: float = 150) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pulsar_ref.cli", "workload", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )


def assert_well_formed(history: Path, expected_topics: int) -> None:
    """Every rule of docs/history.md the workload is responsible for."""
    ops = read_history(str(history))  # index, time, process discipline, unique values, positions on ok appends
    evs = events(history)
    assert [e["index"] for e in evs] == list(range(len(evs)))
    assert all(a["time"] <= b["time"] for a, b in zip(evs, evs[1:], strict=False))
    client_ops = [op for op in ops]
    assert all(op.cmp_index is not None for op in client_ops), "every invoke got a completion"
    appends = [op for op in client_ops if op.f == "append"]
    assert appends and all(op.value and op.value.startswith(f"{op.process}-") for op in appends)
    assert len({op.value for op in appends}) == len(appends)
    assert all(op.position is not None for op in appends if op.type == "ok")
    # a process whose operation ended info never invokes again
    info_processes = {op.process for op in client_ops if op.type == "info"}
    for p in info_processes:
        last = max(op.inv_index for op in client_ops if op.process == p)
        assert [op.type for op in client_ops if op.process == p and op.inv_index == last] == ["info"]
    finals = [op for op in client_ops if op.final and op.type == "ok"]
    assert len({op.topic for op in finals}) == expected_topics
    assert all(op.start is None and op.limit is None for op in finals)
    assert max(op.inv_index for op in client_ops if not op.final) < min(op.inv_index for op in finals)
    reads = [op for op in client_ops if op.f == "read" and not op.final]
    assert any(op.start is not None for op in reads) and any(op.start is None for op in reads)
    assert any(op.limit is not None for op in reads)
    assert any("-partition-" in op.topic for op in appends)


@pytest.mark.processes
def test_workload_history_on_standalone_is_well_formed_and_valid(standalone: Cluster, tmp_path: Path) -> None:
    history = tmp_path / "h.jsonl"
    result = run_workload(
        "--service", standalone.pulsar_service_url or "", "--admin-url", standalone.admin_url or "",
        "--topics", "2", "--partitions", "2", "--processes", "4",
        "--ops", "300", "--rate", "0", "--seed", "7", "--out", str(history),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "ops" in result.stderr and "final reads" in result.stderr  # progress on screen
    assert_well_formed(history, expected_topics=4)
    report = check(read_history(str(history)))
    assert report.valid, report.to_json()


@pytest.mark.processes
def test_workload_with_faults_on_standalone_marks_unknown_outcomes(standalone: Cluster, tmp_path: Path) -> None:
    """Pauses longer than a send's timeout and a whole-process kill make operations time out or fail: those
    are info/fail, never guessed."""
    history = tmp_path / "h.jsonl"
    result = run_workload(
        "--cluster-dir", str(standalone.directory), "--topics", "2", "--partitions", "1", "--processes", "4",
        "--ops", "750", "--rate", "30", "--seed", "11", "--nemesis", "pause-standalone,kill-standalone",
        "--nemesis-order", "cycle", "--nemesis-max", "2", "--nemesis-interval", "6", "--out", str(history),
        timeout=240,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert_well_formed(history, expected_topics=3)
    evs = events(history)
    injected = [e["f"] for e in evs if e["process"] == "nemesis" and e["f"] != "heal" and "error" not in e]
    assert {"pause-standalone", "kill-standalone"} <= set(injected)
    assert any(e["type"] in ("info", "fail") for e in evs if e["process"] != "nemesis")
    report = check(read_history(str(history)))
    assert report.valid, report.to_json()


@pytest.mark.processes
def test_workload_through_the_official_client_is_well_formed_and_valid(standalone: Cluster, tmp_path: Path) -> None:
    """`--client official`: Apache Pulsar's client appends and reads; the audit judges its history alike."""
    history = tmp_path / "h.jsonl"
    result = run_workload(
        "--client", "official", "--cluster-dir", str(standalone.directory), "--topics", "2", "--partitions", "2",
        "--processes", "4", "--ops", "300", "--rate", "0", "--seed", "5", "--out", str(history),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "official client" in result.stderr and str(standalone.pulsar_service_url) in result.stderr
    assert_well_formed(history, expected_topics=4)
    report = check(read_history(str(history)))
    assert report.valid, report.to_json()


@pytest.mark.processes
def test_workload_official_client_under_a_broker_kill_records_honest_outcomes(
    standalone: Cluster, tmp_path: Path
) -> None:
    history = tmp_path / "h.jsonl"
    result = run_workload(
        "--client", "official", "--cluster-dir", str(standalone.directory), "--topics", "2", "--partitions", "0",
        "--processes", "4", "--ops", "300", "--rate", "30", "--seed", "13", "--nemesis", "kill-broker",
        "--nemesis-max", "1", "--nemesis-interval", "2", "--out", str(history),
        timeout=240,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    evs = events(history)
    assert any(e["process"] == "nemesis" and e["f"] == "kill-broker" for e in evs)
    report = check(read_history(str(history)))
    assert report.valid, report.to_json()
    # The official client resends what it had in flight when its broker died: only de-duplication keeps a
    # resend of a stored message out of the log (duplicate-value); the workload turns it on per topic.
    topics = {e["topic"] for e in evs if e.get("f") == "append"}
    admin = AdminClient(standalone.admin_url or "")
    assert {admin.call("GET", topic_path(t) + "/stats")["deduplicationStatus"] for t in topics} == {"Enabled"}


def test_official_client_needs_an_admin_for_the_partitioned_topic(tmp_path: Path) -> None:
    result = run_workload("--client", "official", "--service", "pulsar://127.0.0.1:1", "--out", str(tmp_path / "h"))
    assert result.returncode == 2 and "--partitions 0" in result.stderr


def test_instance_dir_refusals_say_what_to_do(tmp_path: Path) -> None:
    missing = run_workload("--instance-dir", str(tmp_path / "none"), "--out", str(tmp_path / "h"))
    assert missing.returncode == 2 and "pulsar-ref instance up --dir" in missing.stderr
    consumers = run_workload("--instance-dir", str(tmp_path), "--consumers", "2", "--out", str(tmp_path / "h"))
    assert consumers.returncode == 2 and "--consumers 0" in consumers.stderr
    both = run_workload(
        "--instance-dir", str(tmp_path), "--service", "pulsar://127.0.0.1:1", "--out", str(tmp_path / "h")
    )
    assert both.returncode == 2 and "drop --cluster-dir, --service, --admin-url" in both.stderr
    assert not (tmp_path / "h").exists()  # refused before anything was written
