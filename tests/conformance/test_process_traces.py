"""Trace validation of real-process runs (conformance/process_traces.py and the modules it names).

Three real bookie processes, a writer process and a recovery process race on one ledger per
run; each process logs its own events, the merger orders them (each bookie's handling order,
each client's order) and TLC checks the merged trace against ledger.tla. A doctored log (an add
acknowledged after the bookie was fenced) must be rejected at that event, and logs whose orders
contradict each other must be reported as a cycle.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conformance import process_traces
from conformance.linearization import WRITER, CycleError
from conformance.process_cluster import process_cluster
from conformance.process_runs import ProcessRun, collect, run_once
from conformance.process_traces import CONFIGS, ProcessVerdict, check_runs, summary

pytestmark = [pytest.mark.processes, pytest.mark.tlc]

E3, E2 = CONFIGS


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[ProcessRun]]:
    """Three racing runs, and one where the writer adds 1 entry, a bookie is SIGKILLed and restarted,
    the recovery runs, and then the writer adds the rest."""
    directory: Path = tmp_path_factory.mktemp("process-traces")
    done: list[ProcessRun] = []
    with process_cluster(directory) as cluster:
        for k in range(3):
            done.append(run_once(cluster, CONFIGS[k % 2], 500 + k))
        done.append(run_once(cluster, E3, 600, fence_after=1, restart=True))
        cluster.stop()
        collect(cluster, done)
    yield done


def _fenced_add(run: ProcessRun) -> tuple[dict[str, Any], str]:
    """The writer's first add refused as fenced, and the spec name of the bookie that refused it."""
    for record in run.client_logs[WRITER]:
        p = record["params"]
        if record["name"] == "WriterReceivesAddResponse" and not p["ok"]:
            return record, run.names[p["bookie"]]
    raise AssertionError(f"no fenced add in {run.client_logs[WRITER]}")


def _doctored(run: ProcessRun) -> tuple[ProcessRun, int, str]:
    """A copy of a run whose writer added after the recovery, with the first refused add doctored in
    both logs: the fenced bookie stored it, and the writer counted its OK. Returns (run, entry, bookie)."""
    run = copy.deepcopy(run)  # deep: the runs share the bookie logs
    assert run.writer_output.endswith("LedgerFencedError LedgerFencedError"), run.writer_output
    answer, bookie = _fenced_add(run)
    entry = answer["params"]["entry"]
    answer["params"].update(ok=True, counted=True, state="writing", fenced=False)
    handling = next(
        r
        for r in run.bookie_logs[bookie]
        if r["name"] == "BookieHandles"
        and r["params"]["ledger"] == run.ledger_id
        and (r["params"]["kind"], r["params"]["entry"]) == ("add", entry)
    )
    assert handling["params"]["fenced"]
    handling["params"]["entries"] = sorted({*handling["params"]["entries"], entry})
    return run, entry, bookie


RECORDED = Path(__file__).with_name("process_trace_cycle.json")


def _recorded() -> ProcessRun:
    """A real run kept from `pulsar-ref conform --real-processes` whose logs form a cycle (see its "about")."""
    data = json.loads(RECORDED.read_text())
    config = next(c for c in CONFIGS if c.name == data["config"])
    run = ProcessRun(
        config, data["seed"], data["ledger_id"], tuple(data["ensemble"]), data["bookie_logs"],
        data["client_logs"], data["names"], data["writer_output"], data["recovery_output"],
    )  # fmt: skip
    return run


@dataclass
class Checked:
    verdicts: list[ProcessVerdict]  # of the real runs
    doctored: ProcessVerdict
    entry: int  # the doctored answer's entry and bookie
    bookie: str
    recorded: ProcessVerdict


@pytest.fixture(scope="module")
def checked(runs: list[ProcessRun]) -> Checked:
    """The real runs, the doctored one and the recorded one, checked together (one TLC run per configuration)."""
    doctored, entry, bookie = _doctored(runs[-1])
    *verdicts, verdict, recorded = check_runs([*runs, doctored, _recorded()])
    return Checked(verdicts, verdict, entry, bookie, recorded)


def test_real_process_runs_are_accepted_by_ledger_tla(runs: list[ProcessRun], checked: Checked) -> None:
    verdicts = checked.verdicts
    assert all(v.accepted for v in verdicts), summary(verdicts, 0)
    names = [s.name for v in verdicts if v.verdict is not None for s in v.verdict.steps]
    # every run fenced the ledger and closed it through the recovery client
    assert names.count("RecoveryStarts") == len(runs)
    assert names.count("RecoveryCloses") == len(runs)
    assert names.count("RecoveryReceivesReadLacResponse") >= 2 * len(runs)
    assert "WriterReceivesAddResponse" in names
    # the restarted bookie: its crash step carries what it replayed from its journal (entry 0 durable)
    (bookie,) = runs[-1].restarts
    restarted = verdicts[-1].verdict
    assert restarted is not None
    crash = next(s for s in restarted.steps if s.name == "BookieCrashes")
    assert crash.params == {"bookie": bookie} and crash.state["bookie"]["entries"] == {0}
    assert [s.name for s in restarted.steps].count("BookieRestarts") == 1


def test_an_add_acknowledged_after_the_fence_is_rejected_at_that_event(
    checked: Checked,
) -> None:
    verdict, entry, bookie = checked.doctored, checked.entry, checked.bookie
    assert verdict.verdict is not None and not verdict.accepted
    steps = verdict.verdict.steps
    doctored = next(
        i
        for i, s in enumerate(steps)
        if s.name == "WriterReceivesAddResponse" and s.params["ok"] and s.params["entry"] == entry
    )
    assert verdict.verdict.reached == doctored, verdict.describe()
    assert steps[doctored].params["bookie"] == bookie and steps[doctored].state["bookie"]["fenced"]
    assert f"rejected at step {doctored + 1}/" in verdict.describe()


def test_conform_real_processes_prints_a_verdict_per_run(
    checked: Checked,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from pulsar_ref.commands import conform

    verdicts, rejected = checked.verdicts, checked.doctored
    calls = []

    def fake(count: int, **kwargs: Any) -> list[ProcessVerdict]:
        calls.append((count, kwargs["seed"], kwargs["restart_every"]))
        return verdicts if count == len(verdicts) else [*verdicts, rejected]

    monkeypatch.setattr(process_traces, "validate_process_runs", fake)  # the runs above, not new processes
    argv = ["--real-processes", str(len(verdicts)), "--seed", "500", "--restart-every", "4"]
    assert conform.main(argv, "pulsar-ref conform") == 0
    out = capsys.readouterr().out
    assert "process-e3-qw3-qa2 seed 500 (ledger 0): accepted" in out
    assert f"/{len(verdicts)} real-process runs accepted by ledger.tla in the processes' own orders" in out
    assert conform.main(["--real-processes", "9"], "pulsar-ref conform") == conform.EXIT_MISMATCH
    assert "rejected at step" in capsys.readouterr().out
    assert calls == [(len(verdicts), 500, 4), (9, 0, 0)]
    assert conform.main(["--real-processes", "0"], "pulsar-ref conform") == conform.EXIT_USAGE


def test_a_recorded_real_run_with_a_cycle_is_reported_then_accepted_with_a_lost_reply(
    checked: Checked,
) -> None:
    run = _recorded()
    with pytest.raises(CycleError) as info:
        run.linearize()
    assert "bookie b1 handles add of entry 2 (its line 269) + client w WriterReceivesAddResponse (its line 10)" in str(
        info.value
    )
    verdict = checked.recorded
    assert verdict.accepted and not verdict.in_order, verdict.describe()
    assert verdict.lost == [  # b3's refusal, which the writer (fenced already) ignored
        "bookie b3 handles add of entry 2 (its line 273) + client w WriterReceivesAddResponse (its line 11)"
    ]
    assert "the run cannot be linearized from its logs" in verdict.error
