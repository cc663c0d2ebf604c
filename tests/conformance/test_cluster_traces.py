"""Trace validation of a broker cluster run (conformance/cluster_traces.py).

One short run of `pulsar-ref workload` on a real cluster (ZooKeeper, 3 bookies, 2 brokers, every
bookie and broker tracing; a bookie is killed, so writers change ensembles, and a broker, so its
topics move and the new owner recovers their last ledgers); each ledger's logs are merged and
checked by TLC against ledger.tla. Doctored copies of real ledgers must be rejected at the doctored
event: an acknowledged entry missing from the bookie's log, a writer's close whose metadata version
puts it before the recovery's start.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from conformance import cluster_traces as ct
from conformance.linearization import RECOVERER, WRITER, linearize
from conformance.trace_validation import Run, check_traces

pytestmark = [pytest.mark.processes, pytest.mark.zookeeper, pytest.mark.tlc]

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Checked:
    run: ct.ClusterRun
    verdicts: list[ct.LedgerVerdict]


@pytest.fixture(scope="module")
def checked(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Checked]:
    """A 15-second workload, a bookie killed 3 s in and restarted 3 s later, then a broker killed; then
    every ledger checked."""
    directory = tmp_path_factory.mktemp("cluster-traces")
    run = ct.run_cluster(directory, duration_s=15, seed=7, nemesis="kill-bookie,kill-broker", nemesis_interval_s=3)
    verdicts, _ = ct.check_dir(run.trace_dir)
    yield Checked(run, verdicts)


def _recovered(checked: Checked, *, quiet_writer: bool = False) -> ct.LedgerTrace:
    """An accepted ledger whose writer added entries and that another broker process recovered.
    `quiet_writer`: one whose writer's last event came before the recovery started (its adds all
    confirmed, none refused), at the LAC the recovery closed the ledger with."""
    for v in checked.verdicts:
        t = v.ledger
        w, r1 = t.events_of(WRITER), t.events_of(RECOVERER)
        adds = [r for r in w if r["name"] == "WriterReceivesAddResponse"]
        if not (v.accepted and t.recoverers and t.recoverers != [t.writer] and adds):
            continue
        if quiet_writer:
            starts = [r["ns"] for r in r1 if r["name"] == "RecoveryStarts"]
            ends = [r["params"]["lastEntry"] for r in r1 if r["name"] == "RecoveryCloses"]
            ok = all(r["params"]["ok"] for r in adds) and ends == [max(r["params"]["lac"] for r in adds)]
            if not (ok and w[-1]["name"] == "WriterReceivesAddResponse" and w[-1]["ns"] < starts[0]):
                continue
        return copy.deepcopy(t)
    raise AssertionError("no such recovered ledger: " + ct.summary(checked.verdicts, 0))


def test_every_ledger_of_the_cluster_run_is_checked_and_none_rejected(checked: Checked) -> None:
    text = ct.summary(checked.verdicts, 0)
    assert not [v for v in checked.verdicts if v.rejected], text
    accepted = [v for v in checked.verdicts if v.accepted]
    assert len(accepted) >= 10, text
    # rolled over by their writer (its close is a step), and taken over: recovered by the new owner
    assert any(any(r["name"] == "WriterCloses" for r in v.ledger.events_of(WRITER)) for v in accepted), text
    assert _recovered(checked).events_of(RECOVERER)
    # writers changed ensembles when the bookie died: the adds it never logged were lost before the change
    changed = [v for v in accepted if any(r["name"] == "WriterChangesEnsemble" for r in v.ledger.events_of(WRITER))]
    assert changed, text
    names = [s.name for s in changed[0].verdict.steps]  # type: ignore[union-attr]
    assert names.index("MessageLost") < names.index("WriterChangesEnsemble"), names
    assert any("BookieCrashes" in [s.name for s in v.verdict.steps] for v in accepted), text  # type: ignore[union-attr]
    assert checked.run.summary.ok > 100 and checked.run.summary.faults >= 1
    total = next(line for line in text.splitlines() if " ledgers seen: " in line)
    assert total.startswith(f"{len(checked.verdicts)} ledgers seen: {len(accepted)} accepted"), total


def _without_acknowledged_entry(t: ct.LedgerTrace) -> tuple[ct.LedgerTrace, str, int]:
    """The ledger with the first counted add's bookie no longer holding that entry in its log."""
    answer = next(r for r in t.events_of(WRITER) if r["name"] == "WriterReceivesAddResponse" and r["params"]["counted"])
    bookie, entry = t.names[answer["params"]["bookie"]], answer["params"]["entry"]
    for r in t.bookie_logs[bookie]:
        if r["name"] == "BookieHandles" and entry in r["params"]["entries"]:
            r["params"]["entries"].remove(entry)
    return t, bookie, entry


def _writer_close(t: ct.LedgerTrace, version: int) -> ct.LedgerTrace:
    """The ledger with a writer's close appended to its log: found CLOSED at the recovered end (wrote
    nothing) at metadata `version`."""
    t = copy.deepcopy(t)
    closes = [r for r in t.events_of(RECOVERER) if r["name"] == "RecoveryCloses"]
    last = t.events_of(WRITER)[-1]
    end = closes[-1]["params"]["lastEntry"]
    lac = last["params"]["lac"]
    assert lac == end, (lac, end)  # recovery closed where the writer's LAC stands: its close succeeds
    params = {"ledger": t.ledger_id, "version": version, "written": False, "state": "closed", "fenced": False}
    t.client_logs[WRITER].append(
        {"seq": last["seq"] + 1, "ns": last["ns"] + 1, "name": "WriterCloses", "params": {**params, "lac": lac}}
    )
    return t


def test_doctored_ledgers_are_rejected_at_the_doctored_event(checked: Checked) -> None:
    recovered = _recovered(checked, quiet_writer=True)
    no_entry, bookie, entry = _without_acknowledged_entry(copy.deepcopy(recovered))
    final = max(r["params"]["version"] for r in recovered.events_of(RECOVERER) if "version" in r["params"])
    after_recovery, before_recovery = _writer_close(recovered, final), _writer_close(recovered, 0)
    verdicts = ct.check_ledgers([no_entry, after_recovery, before_recovery])
    missing, late, early = (v.verdict for v in verdicts)
    assert missing is not None and not missing.accepted
    step = missing.steps[missing.reached]
    assert (step.name, step.params["bookie"], step.params["entry"]) == ("WriterReceivesAddResponse", bookie, entry)
    assert entry not in step.state["bookie"]["entries"]
    # The same close, ordered by the store's version: after the recovery's close (version `final`) it finds
    # the ledger closed at its own LAC and succeeds; at version 0 it comes before the recovery started, so
    # it closes the ledger itself and the recovery's start cannot have found it OPEN, as it logged.
    assert late is not None and late.accepted, verdicts[1].describe()
    assert early is not None and not early.accepted
    assert early.steps[early.reached].name == "RecoveryStarts", verdicts[2].describe()
    assert early.steps[early.reached].params["outcome"] == "OPEN"


def test_ledgers_outside_the_merge_are_not_checkable_with_the_reason(checked: Checked) -> None:
    recovered = _recovered(checked)
    twice = copy.deepcopy(recovered)
    bookie = next(b for b, rs in twice.bookie_logs.items() if any(r["name"] == "BookieHandles" for r in rs))
    log = twice.bookie_logs[bookie]
    first = next(k for k, r in enumerate(log) if r["name"] == "BookieHandles")
    log.insert(first + 1, copy.deepcopy(log[first]))
    retried = copy.deepcopy(recovered)
    start = next(r for r in retried.events_of(RECOVERER) if r["name"] == "RecoveryStarts")
    retried.client_logs[RECOVERER].append(copy.deepcopy(start))
    for t in (twice, retried):
        t.reason = ct._unchecked(t, {t.writer: t.events_of(WRITER), t.recoverers[0]: t.events_of(RECOVERER)})
    verdicts = ct.check_ledgers([twice, retried])
    assert [v.verdict for v in verdicts] == [None, None]
    assert verdicts[0].not_checkable.startswith("a request handled twice by one bookie")
    assert verdicts[1].not_checkable.startswith("2 recovery attempts")
    text = ct.summary(verdicts, 0)
    assert "0 accepted" in text and "0 rejected, 2 not checkable" in text
    assert "  not checkable, 1: 2 recovery attempts (retries)" in text


def test_cli_checks_a_trace_dir_and_exits_1_on_a_rejected_ledger(checked: Checked, tmp_path: Path) -> None:
    """`pulsar-ref conform --check-cluster-traces DIR` on a copy of the run's logs with one bookie's
    log doctored (an acknowledged entry gone)."""
    doctored = tmp_path / "traces"
    shutil.copytree(checked.run.trace_dir, doctored)
    recovered = _recovered(checked)
    _, bookie, entry = _without_acknowledged_entry(copy.deepcopy(recovered))
    node = f"bookie-{bookie[1:]}"
    lines = []
    for line in (doctored / f"{node}.trace.jsonl").read_text().splitlines():
        r = json.loads(line)
        p = r["params"]
        if r["name"] == "BookieHandles" and p["ledger"] == recovered.ledger_id and entry in p["entries"]:
            p["entries"].remove(entry)
        lines.append(json.dumps(r))
    (doctored / f"{node}.trace.jsonl").write_text("\n".join(lines) + "\n")
    out = subprocess.run(
        [sys.executable, "-m", "pulsar_ref.cli", "conform", "--check-cluster-traces", str(doctored)],
        capture_output=True, text=True, timeout=300, cwd=REPO,
    )  # fmt: skip
    assert out.returncode == 1, out.stdout + out.stderr
    rejected = {line.strip() for line in out.stdout.splitlines() if ": rejected at step" in line}  # progress, summary
    assert len(rejected) == 1 and f"ledger {recovered.ledger_id} " in next(iter(rejected)), out.stdout
    assert f"'entry': {entry}" in next(iter(rejected))
    total = len(checked.verdicts)
    last = next(line for line in out.stdout.splitlines() if " ledgers seen: " in line)
    assert last.startswith(f"{total} ledgers seen: ") and ", 1 rejected, " in last, last


def test_without_its_lost_requests_or_with_a_forgotten_entry_a_ledger_is_rejected(checked: Checked) -> None:
    """The merger's additions are checked, not assumed: without the `MessageLost` steps the writer's
    ensemble change is rejected (ledger.tla's writer times out only on a request no longer in flight),
    and a restarted bookie whose replayed journal lacks an entry it acknowledged is rejected at its
    crash."""
    runs: list[Run] = []
    config = None
    for v in checked.verdicts:
        t = v.ledger
        if not v.accepted:
            continue
        lin = linearize(t.bookie_logs, t.client_logs, t.ledger_id, t.names, restarts=t.restarts)
        events = lin.events
        change = next((k for k, e in enumerate(events) if e.name == "WriterChangesEnsemble"), None)
        if change is None or not any(e.name == "MessageLost" for e in events[:change]):
            continue
        failed = events[change].params["failed"]
        if any(e.name == "ReplyLost" and e.params["bookie"] == failed for e in events[:change]):
            continue  # a lost reply would let the change time out on its own
        config = ct.config_for([t], len(t.bookie_logs))
        runs.append(Run(config, t.ledger_id, t.ensemble, [e for e in events if e.name != "MessageLost"]))
        break
    assert runs, "no ensemble change with lost requests: " + ct.summary(checked.verdicts, 0)
    forgotten = _forgotten_entry(checked)
    assert forgotten is not None, "no crash after an acknowledged add: " + ct.summary(checked.verdicts, 0)
    t, bookie = forgotten
    lin = linearize(t.bookie_logs, t.client_logs, t.ledger_id, t.names, restarts=t.restarts)
    assert config is not None and t.quorums == config.quorums
    runs.append(Run(config, t.ledger_id, t.ensemble, lin.events))
    config = replace(config, entries=max(config.entries, ct.config_for([t], len(t.bookie_logs)).entries))
    verdicts, _ = check_traces(config, [replace(r, config=config) for r in runs])
    no_loss, crash = verdicts
    assert not no_loss.accepted and no_loss.steps[no_loss.reached].name == "WriterChangesEnsemble", no_loss.describe()
    assert not crash.accepted, crash.describe()
    step = crash.steps[crash.reached]
    assert (step.name, step.params["bookie"]) == ("BookieCrashes", bookie), crash.describe()


def _forgotten_entry(checked: Checked) -> tuple[ct.LedgerTrace, str] | None:
    """An accepted ledger with a bookie crash, one entry it acknowledged dropped from what the restarted
    process replayed; and that bookie."""
    for v in checked.verdicts:
        t = v.ledger
        if not v.accepted or not t.restarts:
            continue
        acked = {
            (t.names[r["params"]["bookie"]], r["params"]["entry"])
            for r in t.events_of(WRITER)
            if r["name"] == "WriterReceivesAddResponse" and r["params"]["ok"]
        }
        for bookie, log in t.bookie_logs.items():
            for k, r in enumerate(log):
                p = r["params"]
                if r["name"] == "BookieReplays" and p["kind"] == "ENTRY" and (bookie, p["entry"]) in acked:
                    doctored = copy.deepcopy(t)  # the record stays (restarts are indexes into the log)
                    doctored.bookie_logs[bookie][k]["params"]["kind"] = "MASTER_KEY"  # no longer an entry
                    return doctored, bookie
    return None


E3_LEDGERS = Path(__file__).with_name("cluster_trace_e3.json")


def test_writer_steps_at_their_decision_kept_real_e3_logs(monkeypatch: pytest.MonkeyPatch) -> None:
    """Three ledgers' logs kept from an E=Qw=3 Qa=2 cluster run (4 bookies, seed 31): 114, where an
    entry reached Qa while the writer's ensemble change was being written; 22, where answers came while
    the writer's close was being written; 112, a change decided when nothing was pending any more.
    Taken at their decisions, the first two are accepted; in the order the core logged them (results
    of the writes), TLC rejects them. 112 is not checkable."""
    traces = [ct.LedgerTrace(**t) for t in json.loads(E3_LEDGERS.read_text())]
    for t in traces:
        t.quorums, t.ensemble = tuple(t.quorums), tuple(t.ensemble)  # type: ignore[assignment]  # JSON lists
        t.reason = ct._unchecked(t, {t.writer: t.events_of(WRITER)})
    moved, closed, undecidable = ct.check_ledgers(traces)
    assert moved.accepted and closed.accepted, (moved.describe(), closed.describe())
    assert undecidable.not_checkable.startswith("an ensemble change with no entry pending")

    from conformance import linearization

    monkeypatch.setattr(linearization, "_changes_at_decision", lambda steps, chain: chain)
    logged = ct.check_ledgers(traces[:2])
    assert [v.rejected for v in logged] == [True, True], [v.describe() for v in logged]
    step = logged[0].verdict.steps[logged[0].verdict.reached]  # type: ignore[union-attr]
    assert step.name == "WriterChangesEnsemble" and step.params["first"] == 0
