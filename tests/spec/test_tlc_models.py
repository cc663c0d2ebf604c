"""Every `ci` model of spec/models.toml, run through the real TLC, gives the expected result.

The models (all specs, all mutations, including ledger.tla's) are read from the manifest, so a
model added there is checked here without editing this file.
"""

from __future__ import annotations

import json
import shutil
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
    load_manifest,
    run_tlc,
    save_trace,
)
from pulsar_ref.commands import spec as spec_command

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
    assert all(m.replay for m in CI_MODELS)  # the conformance suite replays every ci model whole
    assert not manifest["ledger-deep"].replay and not manifest["ledger-deep-held-requests"].replay
    entry = '[[model]]\nname = "m"\nspec = "ledger.tla"\nconfig = "c.cfg"\nprofile = "deep"\nexpect = "pass"\n'
    (tmp_path / "ok.toml").write_text(entry + "replay = false\n")
    assert load_manifest(tmp_path / "ok.toml")[0].replay is False
    (tmp_path / "bad.toml").write_text(entry + 'replay = "no"\n')
    with pytest.raises(ManifestError, match="replay must be true or false"):
        load_manifest(tmp_path / "bad.toml")


@pytest.mark.parametrize("model", CI_MODELS, ids=[m.name for m in CI_MODELS])
def test_ci_model_gives_expected_result(model: Model, tmp_path: Path) -> None:
    result = run_tlc(SPEC_DIR / model.spec, SPEC_DIR / model.config, workers=1)
    assert model.check(result) == "", model.check(result)
    assert result.distinct_states > 0 and result.depth > 0
    if model.expect is Outcome.PASS:
        assert result.trace == []
        return
    # A counterexample: parsed into states that a replay can use, each saying which action ran.
    assert result.violated == model.violates
    assert len(result.trace) >= 2
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
    assert saved["violated"] == model.violates
    assert [from_json(v) for v in saved["states"][-1]["values"].values()] == list(result.trace[-1].values().values())


def _copy_spec(tmp_path: Path, module: str, cfg: str) -> tuple[Path, Path]:
    shutil.copy(SPEC_DIR / module, tmp_path / module)
    shutil.copy(SPEC_DIR / cfg, tmp_path / cfg)
    return tmp_path / module, tmp_path / cfg


def test_parse_error_in_the_spec_is_typed(tmp_path: Path) -> None:
    spec, cfg = _copy_spec(tmp_path, "metadata.tla", "metadata_blindwrites_ci.cfg")
    spec.write_text(spec.read_text().replace("Spec == Init /\\ [][Next]_vars", "Spec == Init /\\ [][Next]_"))
    with pytest.raises(TLCError) as err:
        run_tlc(spec, cfg)
    assert err.value.kind is TLCErrorKind.PARSE
    assert "line" in err.value.detail  # says where SANY stopped


def test_semantic_error_in_the_spec_is_typed(tmp_path: Path) -> None:
    spec, cfg = _copy_spec(tmp_path, "metadata.tla", "metadata_blindwrites_ci.cfg")
    spec.write_text(
        spec.read_text().replace("NoLostUpdate == counter.data = updates", "NoLostUpdate == undefinedThing")
    )
    with pytest.raises(TLCError) as err:
        run_tlc(spec, cfg)
    assert err.value.kind is TLCErrorKind.SEMANTIC
    assert "undefinedThing" in err.value.detail


def test_config_naming_an_undefined_invariant_is_typed(tmp_path: Path) -> None:
    spec, cfg = _copy_spec(tmp_path, "metadata.tla", "metadata_blindwrites_ci.cfg")
    cfg.write_text(cfg.read_text().replace("    SingleWriter", "    NoSuchInvariant"))
    with pytest.raises(TLCError) as err:
        run_tlc(spec, cfg)
    assert err.value.kind is TLCErrorKind.CONFIG
    assert "NoSuchInvariant" in str(err.value)


def test_check_exits_nonzero_when_a_mutation_is_expected_but_not_caught(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _copy_spec(tmp_path, "metadata.tla", "metadata_blindwrites_ci.cfg")
    manifest = tmp_path / "models.toml"
    entry = (
        '[[model]]\nname = "{name}"\nspec = "metadata.tla"\nconfig = "metadata_blindwrites_ci.cfg"\n'
        'profile = "ci"\nexpect = "violation"\nviolates = "{inv}"\ndescription = "test"\n'
    )
    manifest.write_text(entry.format(name="right", inv="NoLostUpdate"))
    assert spec_command.main(["--manifest", str(manifest), "check", "--trace-dir", str(tmp_path / "t")], "spec") == 0
    out = capsys.readouterr().out
    assert "violation: NoLostUpdate" in out and "IncrementCounter" in out
    assert json.loads((tmp_path / "t" / "right.json").read_text())["violated"] == "NoLostUpdate"
    manifest.write_text(entry.format(name="wrong", inv="SingleWriter"))
    assert spec_command.main(["--manifest", str(manifest), "check"], "spec") == 1
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
