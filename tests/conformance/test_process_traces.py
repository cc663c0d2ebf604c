"""Trace validation of real-process runs (conformance/process_traces.py).

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

from conformance import process_traces as pt

pytestmark = [pytest.mark.processes, pytest.mark.tlc]

E3, E2 = pt.CONFIGS


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[pt.ProcessRun]]:
    """Three racing runs, and one where the writer adds 1 entry, a bookie is SIGKILLed and restarted,
    the recovery runs, and then the writer adds the rest."""
    directory: Path = tmp_path_factory.mktemp("process-traces")
    done: list[pt.ProcessRun] = []
    with pt.process_cluster(directory) as cluster:
        for k in range(3):
            done.append(pt.run_once(cluster, pt.CONFIGS[k % 2], 500 + k))
        done.append(pt.run_once(cluster, E3, 600, fence_after=1, restart=True))
        cluster.stop()
        pt.collect(cluster, done)
    yield done


def _fenced_add(run: pt.ProcessRun) -> tuple[dict[str, Any], str]:
    """The writer's first add refused as fenced, and the spec name of the bookie that refused it."""
    for record in run.client_logs[pt.WRITER]:
        p = record["params"]
        if record["name"] == "WriterReceivesAddResponse" and not p["ok"]:
            return record, run.names[p["bookie"]]
    raise AssertionError(f"no fenced add in {run.client_logs[pt.WRITER]}")


def _doctored(run: pt.ProcessRun) -> tuple[pt.ProcessRun, int, str]:
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


def _recorded() -> pt.ProcessRun:
    """A real run kept from `pulsar-ref conform --real-processes` whose logs form a cycle (see its "about")."""
    data = json.loads(RECORDED.read_text())
    config = next(c for c in pt.CONFIGS if c.name == data["config"])
    run = pt.ProcessRun(
        config, data["seed"], data["ledger_id"], tuple(data["ensemble"]), data["bookie_logs"],
        data["client_logs"], data["names"], data["writer_output"], data["recovery_output"],
    )  # fmt: skip
    return run


@dataclass
class Checked:
    verdicts: list[pt.ProcessVerdict]  # of the real runs
    doctored: pt.ProcessVerdict
    entry: int  # the doctored answer's entry and bookie
    bookie: str
    recorded: pt.ProcessVerdict


@pytest.fixture(scope="module")
def checked(runs: list[pt.ProcessRun]) -> Checked:
    """The real runs, the doctored one and the recorded one, checked together (one TLC run per configuration)."""
    doctored, entry, bookie = _doctored(runs[-1])
    *verdicts, verdict, recorded = pt.check_runs([*runs, doctored, _recorded()])
    return Checked(verdicts, verdict, entry, bookie, recorded)


def test_real_process_runs_are_accepted_by_ledger_tla(runs: list[pt.ProcessRun], checked: Checked) -> None:
    verdicts = checked.verdicts
    assert all(v.accepted for v in verdicts), pt.summary(verdicts, 0)
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


def _record(seq: int, name: str, **params: Any) -> dict[str, Any]:
    return {"seq": seq, "name": name, "params": params}


def _handles(seq: int, kind: str, entry: int, entries: list[int], fenced: bool = False) -> dict[str, Any]:
    return _record(seq, "BookieHandles", ledger=7, kind=kind, entry=entry, entries=entries, fenced=fenced)


def _add_answer(seq: int, bookie: str, entry: int, lac: int) -> dict[str, Any]:
    return _record(
        seq, "WriterReceivesAddResponse", bookie=bookie, entry=entry, ok=True, counted=True,
        state="writing", fenced=False, lac=lac,
    )  # fmt: skip


def test_contradictory_logs_are_reported_as_a_cycle() -> None:
    # The writer saw b1's answer for entry 0 before the one for entry 1; b1 says it handled 1 first.
    writer = [
        _record(0, "WriterSendsAdd", entry=0, lac=-1),
        _record(1, "WriterSendsAdd", entry=1, lac=-1),
        _add_answer(2, "b1", 0, -1),
        _add_answer(3, "b1", 1, -1),
    ]
    b1 = [_handles(0, "add", 1, [1]), _handles(1, "add", 0, [0, 1])]
    with pytest.raises(pt.CycleError, match="cycle") as info:
        pt.linearize({"b1": b1}, {"w": writer}, 7)
    assert "bookie b1 handles add of entry 1 (its line 0)" in str(info.value)
    # both answers counted: neither can be taken as a lost reply
    with pytest.raises(pt.CycleError):
        pt.linearize({"b1": b1}, {"w": writer}, 7, relaxed=True)
    # in the right order the same logs merge into one delivery step per answer
    events = pt.linearize({"b1": list(reversed(b1))}, {"w": writer}, 7).events
    assert [e.name for e in events] == [
        "WriterSendsAdd", "WriterSendsAdd", "BookieHandles", "WriterReceivesAddResponse",
        "BookieHandles", "WriterReceivesAddResponse",
    ]  # fmt: skip


def test_an_ignored_late_answer_on_a_cycle_is_taken_as_a_lost_reply() -> None:
    # As seen in real runs: b1 stores add 0, is fenced, refuses add 1 at once (EFENCED is not
    # journalled) while add 0's OK waits for the journal, so the writer sees EFENCED 1 first, stops,
    # and then ignores OK 0. Atomic deliveries cannot keep both orders: OK 0 becomes a lost reply.
    writer = [
        _record(0, "WriterSendsAdd", entry=0, lac=-1),
        _record(1, "WriterSendsAdd", entry=1, lac=-1),
        _record(2, "WriterReceivesAddResponse", bookie="b1", entry=1, ok=False, counted=False,
                state="failed", fenced=True, lac=-1),
        _record(3, "WriterReceivesAddResponse", bookie="b1", entry=0, ok=True, counted=False,
                state="failed", fenced=True, lac=-1),
    ]  # fmt: skip
    recovery = [
        _record(0, "RecoveryStarts", outcome="OPEN", phase="fencing", end_found=False, next=-1, written_back=-1),
        _record(1, "RecoveryReceivesReadLacResponse", bookie="b1", stale=False, start=-1, lac=-1, phase="fencing"),
    ]
    b1 = [_handles(0, "add", 0, [0]), _handles(1, "readLac", -1, [0], fenced=True), _handles(2, "add", 1, [0], True)]
    clients = {"w": writer, "r1": recovery}
    with pytest.raises(pt.CycleError, match="client w WriterReceivesAddResponse"):
        pt.linearize({"b1": b1}, clients, 7)
    lin = pt.linearize({"b1": b1}, clients, 7, relaxed=True)
    assert lin.lost == [
        "bookie b1 handles add of entry 0 (its line 0) + client w WriterReceivesAddResponse (its line 3)"
    ]
    names = [(e.name, e.params.get("kind"), e.params.get("entry")) for e in lin.events]
    assert names.index(("ReplyLost", "add", 0)) < names.index(("BookieHandles", "readLac", -1))
    assert ("WriterReceivesAddResponse", None, 0) not in names  # the ignored answer's event is dropped
    assert names.index(("WriterReceivesAddResponse", None, 1)) > names.index(("BookieHandles", "add", 1))


def test_conform_real_processes_prints_a_verdict_per_run(
    checked: Checked,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from pulsar_ref.commands import conform

    verdicts, rejected = checked.verdicts, checked.doctored
    calls = []

    def fake(count: int, **kwargs: Any) -> list[pt.ProcessVerdict]:
        calls.append((count, kwargs["seed"], kwargs["restart_every"]))
        return verdicts if count == len(verdicts) else [*verdicts, rejected]

    monkeypatch.setattr(pt, "validate_process_runs", fake)  # the runs above, not new processes
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
    with pytest.raises(pt.CycleError) as info:
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
