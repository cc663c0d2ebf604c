"""Every `ci` model of spec/models.toml, run through the real TLC, gives the expected result.

The models (all specs, all mutations, including ledger.tla's) are read from the manifest, so a
model added there is checked here without editing this file.
"""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from conformance.tla_values import Record, from_json
from conformance.tlc import (
    SPEC_DIR,
    ManifestError,
    Model,
    Outcome,
    TLCError,
    TLCErrorKind,
    TLCResult,
    load_manifest,
    run_tlc,
    save_trace,
)
from pulsar_ref.commands import spec as spec_command
from tests.spec.blindwrites import blindwrites_entry, copy_blindwrites

pytestmark = pytest.mark.tlc

CI_MODELS = [m for m in load_manifest() if m.profile == "ci"]


def test_every_spec_and_mutation_has_a_ci_model() -> None:
    specs = {m.spec for m in CI_MODELS}
    assert {"fencing.tla", "metadata.tla"} <= specs
    violated = {(m.spec, m.violates) for m in CI_MODELS if m.expect is Outcome.VIOLATION}
    assert ("fencing.tla", "AckedMessagesOnList") in violated  # mutation 4
    assert ("fencing.tla", "SingleWriter") in violated  # mutation 5
    assert ("metadata.tla", "SingleWriter") in violated  # conditional writes alone: two writers


def test_manifest_says_which_models_only_simulation_can_walk(tmp_path: Path) -> None:
    manifest = {m.name: m for m in load_manifest()}
    # The conformance suite replays every passing ci model whole; only a mutation whose counterexample
    # is a step never taken (a liveness violation: no replay can refuse it) may say replay = false.
    unreplayed = [m for m in CI_MODELS if not m.replay]
    assert all(m.expect is Outcome.VIOLATION for m in unreplayed), [m.name for m in unreplayed]
    assert not manifest["ledger-deep"].replay and not manifest["ledger-deep-held-requests"].replay
    entry = '[[model]]\nname = "m"\nspec = "ledger.tla"\nconfig = "c.cfg"\nprofile = "deep"\nexpect = "pass"\n'
    (tmp_path / "ok.toml").write_text(entry + "replay = false\n")
    assert load_manifest(tmp_path / "ok.toml")[0].replay is False
    (tmp_path / "bad.toml").write_text(entry + 'replay = "no"\n')
    with pytest.raises(ManifestError, match="replay must be true or false"):
        load_manifest(tmp_path / "bad.toml")


@pytest.fixture(scope="module")
def ci_results(request: pytest.FixtureRequest) -> Iterator[dict[str, Future[TLCResult]]]:
    """TLC's result for each ci model this session selected, two TLCs at a time: each is one JVM on one
    worker, and the 92 of them are most of this module's time."""
    selected = [
        item.callspec.params["model"]
        for item in request.session.items
        if getattr(item, "originalname", "") == "test_ci_model_gives_expected_result"
    ]
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            m.name: pool.submit(run_tlc, SPEC_DIR / m.spec, SPEC_DIR / m.config, workers=1, short=True)
            for m in selected
        }
        yield futures
        for future in futures.values():
            future.cancel()


@pytest.mark.parametrize("model", CI_MODELS, ids=[m.name for m in CI_MODELS])
def test_ci_model_gives_expected_result(model: Model, ci_results: dict[str, Future[TLCResult]], tmp_path: Path) -> None:
    result = ci_results[model.name].result()
    assert model.check(result) == "", model.check(result)
    # TLC names no violated temporal property and gives no depth for a liveness counterexample
    temporal = result.violated == "temporal properties"
    initial = temporal and len(result.trace) == 1  # a property false in an initial state: TLC counts no state
    assert (result.distinct_states > 0 or initial) and (result.depth > 0 or temporal)
    if model.expect is Outcome.PASS:
        assert result.trace == []
        return
    # A counterexample: parsed into states that a replay can use, each saying which action ran.
    assert result.violated == ("temporal properties" if temporal else model.violates)
    assert len(result.trace) >= 2 or initial
    assert [s.number for s in result.trace] == list(range(1, len(result.trace) + 1))
    first = result.trace[0].values()
    assert result.trace[0].action == "Initial predicate"
    for state in result.trace[1:]:
        values = state.values()
        assert set(values) == set(first), "every state names every variable"
        if "lastAction" in values:
            last = values["lastAction"]
            assert isinstance(last, Record)
            assert last["name"] == state.action, "lastAction names the action TLC reports"
            assert isinstance(last["params"], Record)
    saved = json.loads(save_trace(result, model.spec, model.config, tmp_path / "trace.json").read_text())
    assert saved["violated"] == result.violated
    assert [from_json(v) for v in saved["states"][-1]["values"].values()] == list(result.trace[-1].values().values())


def _copy_spec(tmp_path: Path, module: str, cfg: str) -> tuple[Path, Path]:
    shutil.copy(SPEC_DIR / module, tmp_path / module)
    shutil.copy(SPEC_DIR / cfg, tmp_path / cfg)
    return tmp_path / module, tmp_path / cfg


def test_parse_error_in_the_spec_is_typed(tmp_path: Path) -> None:
    spec, cfg = copy_blindwrites(tmp_path)
    spec.write_text(spec.read_text().replace("Spec == Init /\\ [][Next]_vars", "Spec == Init /\\ [][Next]_"))
    with pytest.raises(TLCError) as err:
        run_tlc(spec, cfg)
    assert err.value.kind is TLCErrorKind.PARSE
    assert "line" in err.value.detail  # says where SANY stopped


def test_a_run_keeps_the_standard_modules_it_extracts_to_itself(tmp_path: Path) -> None:
    """TLC copies the standard modules a spec extends out of its jar to java.io.tmpdir and deletes them
    at exit: with the JVM's shared default (/tmp), one TLC's exit took Naturals.tla from another one
    still parsing. A run must leave the shared files alone (here, one planted where TLC would write)."""
    shared = Path("/tmp/Bags.tla")  # the JVM's default java.io.tmpdir on Linux, whatever TMPDIR says
    if shared.exists():
        pytest.skip(f"{shared} exists already")
    (tmp_path / "bagged.tla").write_text(
        "---- MODULE bagged ----\nEXTENDS Bags, Naturals\nVARIABLE x\n"
        "Init == x = EmptyBag\nNext == UNCHANGED x\nSpec == Init /\\ [][Next]_x\n====\n"
    )
    (tmp_path / "bagged.cfg").write_text("SPECIFICATION Spec\n")
    planted = "---- MODULE Bags ----\n\\* planted by the test\n====\n"
    shared.write_text(planted)
    try:
        assert run_tlc(tmp_path / "bagged.tla", tmp_path / "bagged.cfg").outcome is Outcome.PASS
        assert shared.exists() and shared.read_text() == planted, "TLC rewrote or deleted the shared Bags.tla"
    finally:
        shared.unlink(missing_ok=True)


def test_semantic_error_in_the_spec_is_typed(tmp_path: Path) -> None:
    spec, cfg = copy_blindwrites(tmp_path)
    spec.write_text(
        spec.read_text().replace("NoLostUpdate == counter.data = updates", "NoLostUpdate == undefinedThing")
    )
    with pytest.raises(TLCError) as err:
        run_tlc(spec, cfg)
    assert err.value.kind is TLCErrorKind.SEMANTIC
    assert "undefinedThing" in err.value.detail


def test_config_naming_an_undefined_invariant_is_typed(tmp_path: Path) -> None:
    spec, cfg = copy_blindwrites(tmp_path)
    cfg.write_text(cfg.read_text().replace("    SingleWriter", "    NoSuchInvariant"))
    with pytest.raises(TLCError) as err:
        run_tlc(spec, cfg)
    assert err.value.kind is TLCErrorKind.CONFIG
    assert "NoSuchInvariant" in str(err.value)


def test_check_exits_nonzero_when_a_mutation_is_expected_but_not_caught(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy_blindwrites(tmp_path)
    manifest = tmp_path / "models.toml"
    manifest.write_text(blindwrites_entry("right"))
    argv = ["--manifest", str(manifest), "check", "--no-vacuity"]
    assert spec_command.main([*argv, "--trace-dir", str(tmp_path / "t")], "spec") == 0
    out = capsys.readouterr().out
    assert "violation: NoLostUpdate" in out and "IncrementCounter" in out
    assert json.loads((tmp_path / "t" / "right.json").read_text())["violated"] == "NoLostUpdate"
    manifest.write_text(blindwrites_entry("wrong", violates="SingleWriter"))
    assert spec_command.main(argv, "spec") == 1
    assert "expected a violation of SingleWriter, TLC reported NoLostUpdate" in capsys.readouterr().err


def test_liveness_counterexample_is_parsed_with_its_loop(tmp_path: Path) -> None:
    (tmp_path / "cycle.tla").write_text(
        "---- MODULE cycle ----\nEXTENDS Naturals\nVARIABLE x\nInit == x = 0\nNext == x' = (x + 1) % 3\n"
        "Spec == Init /\\ [][Next]_x /\\ WF_x(Next)\nReachesFive == <>(x = 5)\n====\n"
    )
    (tmp_path / "cycle.cfg").write_text("SPECIFICATION Spec\nPROPERTY ReachesFive\n")
    result = run_tlc(tmp_path / "cycle.tla", tmp_path / "cycle.cfg")
    assert result.outcome is Outcome.VIOLATION
    assert result.violated == "temporal properties"  # TLC 2.15 does not name the liveness property
    assert [s.values()["x"] for s in result.trace] == [0, 1, 2]
    assert [s.action for s in result.trace] == ["Initial predicate", "Next", "Next"]
    assert "Back to state" in result.lasso


# ---- issue 24: every rule held by a property ---------------------------------------------------------

LEDGER_PASSING = [m for m in CI_MODELS if m.spec == "ledger.tla" and m.expect is Outcome.PASS]


def _cfg_names(model: Model) -> set[str]:
    return {line.strip() for line in (SPEC_DIR / model.config).read_text().splitlines()}


@pytest.mark.parametrize("model", LEDGER_PASSING, ids=[m.name for m in LEDGER_PASSING])
def test_every_passing_ledger_model_checks_the_refinement_and_the_new_invariants(model: Model) -> None:
    names = _cfg_names(model)
    assert {"AtomicLedgerInit", "AtomicLedgerSteps", "ClosedLengthFromAHeader", "FencedBeforeReading"} <= names


def _ledger_cfg(tmp_path: Path, base: str, checks: str, **constants: str) -> tuple[Path, Path]:
    """A copy of ledger.tla with `base`'s CONSTANTS and only `checks`."""
    spec = tmp_path / "ledger.tla"
    shutil.copy(SPEC_DIR / "ledger.tla", spec)
    text = (SPEC_DIR / base).read_text()
    head = text[: text.index("INVARIANTS")]
    for name, value in constants.items():
        head, n = re.subn(rf"^(\s*{name} = ).*$", rf"\g<1>{value}", head, flags=re.MULTILINE)
        assert n == 1, name
    cfg = tmp_path / "check.cfg"
    cfg.write_text(head + checks)
    return spec, cfg


@pytest.mark.parametrize(
    "base",
    ["ledger_ci_basic.cfg", "ledger_ci_recoverers.cfg", "ledger_ci_crash.cfg", "ledger_mutation1_nofence_ci.cfg"],
)
def test_ledger_tla_writes_out_the_atomic_ledger_of_the_module(tmp_path: Path, base: str) -> None:
    # ledger.tla's AtomicInit/AtomicNext (written out: trace validation copies ledger.tla alone) agree
    # with atomic_ledger.tla's Init/Next, by INSTANCE, on every reachable step; also where the
    # refinement breaks (mutation 1).
    for module in ("ledger.tla", "atomic_ledger.tla", "ledger_refines_atomic.tla"):
        shutil.copy(SPEC_DIR / module, tmp_path / module)
    text = (SPEC_DIR / base).read_text()
    cfg = tmp_path / "check.cfg"
    cfg.write_text(text[: text.index("INVARIANTS")] + "PROPERTIES\n    SameInit\n    SameSteps\n")
    result = run_tlc(tmp_path / "ledger_refines_atomic.tla", cfg)
    assert result.outcome is Outcome.PASS, result.violated
    # and the check can fail: a written-out Confirm that allows confirming past the closed end
    source = (tmp_path / "ledger.tla").read_text()
    broken = source.replace('    /\\ AState = "CLOSED" => n <= AEnd\n', "")
    assert broken != source
    (tmp_path / "ledger.tla").write_text(broken)
    if base == "ledger_mutation1_nofence_ci.cfg":  # only a diverging ledger takes such a step
        assert run_tlc(tmp_path / "ledger_refines_atomic.tla", cfg).violated == "SameSteps"


def test_the_refinement_fails_on_a_ledger_that_diverges(tmp_path: Path) -> None:
    # Mutation 1 (reads without the fence flag) with no invariant: the refinement alone notices the
    # writer confirming an entry past the closed end (the atomic ledger's Confirm allows none).
    spec, cfg = _ledger_cfg(
        tmp_path, "ledger_mutation1_nofence_ci.cfg", "PROPERTIES\n    AtomicLedgerInit\n    AtomicLedgerSteps\n"
    )
    result = run_tlc(spec, cfg)
    assert result.outcome is Outcome.VIOLATION and result.violated == "AtomicLedgerSteps"
    # the writer confirmed entry 0 and the recovery closed the ledger empty, in either order
    assert {s.action for s in result.trace[-1:]} <= {"RecoveryCloses", "WriterReceivesAddResponse"}
    last = result.trace[-1].values()
    meta = last["meta"]
    assert isinstance(meta, Record) and meta["state"] == "CLOSED" and last["wLac"] > meta["lastEntry"]  # type: ignore[operator]


def test_safety_does_not_depend_on_the_read_lac_coverage_rule(tmp_path: Path) -> None:
    # Mutation 4 (fencing read-LAC done after one answer) violates FencedBeforeReading only: every
    # safety invariant and the refinement hold, on E=Qw=3 Qa=2 and on striping (spec/ledger.md).
    safety = "INVARIANTS\n    NoDivergence\n    AckedEntriesReadable\n    ClosedEntriesReplicated\n"
    safety += "    InOrderConfirmation\n    ValidFragments\nPROPERTIES\n    AtomicLedgerInit\n    AtomicLedgerSteps\n"
    for base in ("ledger_ci_basic.cfg", "ledger_mutation4_readlacone_ci.cfg"):
        spec, cfg = _ledger_cfg(tmp_path, base, safety, Mutation='"read_lac_one_answer"')
        result = run_tlc(spec, cfg)
        assert result.outcome is Outcome.PASS, (base, result.violated)
    # (ledger-mutation4-readlacone-ci, expect = violation of FencedBeforeReading, is the other half)


def test_fencing_ci_checks_liveness_and_the_property_can_fail(tmp_path: Path) -> None:
    manifest = {m.name: m for m in load_manifest()}
    text = (SPEC_DIR / manifest["fencing-ci"].config).read_text()
    assert "SPECIFICATION FairSpec" in text and "EveryMessageAcknowledged" in text
    # Without fairness for closing a FENCED managed ledger, a broker whose add failed fenced may stay
    # FENCED for ever while owning the topic: no message is acknowledged.
    spec, cfg = _copy_spec(tmp_path, "fencing.tla", "fencing_ci.cfg")
    source = spec.read_text()
    weakened = source.replace(" /\\ WF_vars(CloseFencedManagedLedger(b))", "")
    assert weakened != source
    spec.write_text(weakened)
    cfg.write_text(text.replace("MaxMessages = 2", "MaxMessages = 1"))
    result = run_tlc(spec, cfg)
    assert result.outcome is Outcome.VIOLATION and result.violated == "temporal properties"
    assert any(s.action == "CloseFencedManagedLedger" for s in result.trace) or "fenced" in str(
        result.trace[-1].values()["ml"]
    )


def test_check_model_runs_only_the_named_models_whatever_their_profile(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy_blindwrites(tmp_path)
    manifest = tmp_path / "models.toml"
    other = blindwrites_entry("other").replace("metadata.tla", "fencing.tla")
    manifest.write_text(blindwrites_entry("in-ci") + blindwrites_entry("in-deep", profile="deep") + other)
    argv = ["--manifest", str(manifest), "check", "--model", "in-deep"]
    assert spec_command.main(argv, "spec") == 0
    out = capsys.readouterr().out
    assert "in-deep: TLC on metadata.tla" in out and "in-ci" not in out and "other" not in out
    # a name the manifest does not have: a typed refusal naming it, and no TLC run
    assert spec_command.main(["--manifest", str(manifest), "check", "--model", "in-dep"], "spec") == 2
    captured = capsys.readouterr()
    assert "no model in-dep in" in captured.err and "TLC on" not in captured.out
    # a named model outside the specs given: said so, not blamed on the profile
    assert spec_command.main(["--manifest", str(manifest), "check", "fencing", "--model", "in-deep"], "spec") == 2
    assert "no models named in-deep match the specs given" in capsys.readouterr().err
