"""Vacuity (issue 47): every invariant and property of every spec is violated by some ci model.

A property no model can violate is dead or unguarded: a change to the spec that breaks the rule it
states would pass every model. `pulsar-ref spec check` (ci profile) fails on such a property unless
spec/models.toml's [[unguarded]] gives the reason; these tests read the manifest and the configs
only (no TLC), except the last, which runs `spec check` on one tiny model.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from conformance.tlc import SPEC_DIR, config_properties, load_manifest, load_unguarded, vacuity
from pulsar_ref.commands import spec as spec_command
from tests.spec.blindwrites import blindwrites_entry, copy_blindwrites


def test_config_properties_reads_invariants_and_properties_only(tmp_path: Path) -> None:
    cfg = tmp_path / "m.cfg"
    cfg.write_text(
        "\\* INVARIANT Commented\nCONSTANTS\n    N = 2\n    Flag = FALSE\nSPECIFICATION Spec\nVIEW view\n"
        "INVARIANTS\n    TypeOK\n    Safe\nPROPERTY Live\nPROPERTIES\n    Steps\nSYMMETRY Sym\n"
    )
    assert config_properties(cfg) == {"TypeOK", "Safe", "Live", "Steps"}


def test_every_property_of_the_manifest_is_guarded_or_its_reason_given() -> None:
    found = vacuity(load_manifest(), SPEC_DIR, load_unguarded())
    assert [f"{u.spec} {u.prop}" for u in found if not u.reason] == []
    # the reasons listed are for properties still unguarded (a stale entry would hide nothing, but lie)
    assert {(u.spec, u.prop) for u in found} == set(load_unguarded())


def test_a_property_loses_its_guard_when_its_violating_model_goes() -> None:
    models = load_manifest()
    without = [m for m in models if m.name != "metadata-blindwrites-ci"]  # the only NoLostUpdate violation
    found = {(u.spec, u.prop): u for u in vacuity(without, SPEC_DIR, load_unguarded())}
    assert ("metadata.tla", "NoLostUpdate") in found
    assert found[("metadata.tla", "NoLostUpdate")].reason == ""
    assert "metadata-ci" in found[("metadata.tla", "NoLostUpdate")].models
    # a deep model's violation does not count: the guard must run in the ci profile
    deep = [m if m.name != "metadata-blindwrites-ci" else type(m)(**{**m.__dict__, "profile": "deep"}) for m in models]
    assert ("metadata.tla", "NoLostUpdate") in {(u.spec, u.prop) for u in vacuity(deep, SPEC_DIR, {})}


@pytest.mark.tlc
def test_spec_check_fails_on_a_property_no_ci_model_violates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    copy_blindwrites(tmp_path)
    manifest = tmp_path / "models.toml"
    entry = blindwrites_entry("blind")
    manifest.write_text(entry)
    # TLC gives the expected result, yet the check fails: the config's other properties are unguarded
    assert spec_command.main(["--manifest", str(manifest), "check"], "spec") == 1
    captured = capsys.readouterr()
    assert "violation: NoLostUpdate" in captured.out
    assert "vacuity: metadata.tla SingleWriter (checked by blind) is violated by no ci model" in captured.err
    # with a reason for each, it passes and says which are accepted
    others = sorted(config_properties(tmp_path / "metadata_blindwrites_ci.cfg") - {"NoLostUpdate"})
    reasons = "".join(f'\n[[unguarded]]\nspec = "metadata.tla"\nproperty = "{p}"\nreason = "test"\n' for p in others)
    manifest.write_text(entry + reasons)
    assert spec_command.main(["--manifest", str(manifest), "check"], "spec") == 0
    assert "vacuity: metadata.tla SingleWriter: no ci model violates it (accepted: test)" in capsys.readouterr().out
    # a reason kept for a property that is guarded now is a failure too
    stale = '\n[[unguarded]]\nspec = "metadata.tla"\nproperty = "NoLostUpdate"\nreason = "x"\n'
    manifest.write_text(entry + reasons + stale)
    assert spec_command.main(["--manifest", str(manifest), "check"], "spec") == 1
    err = capsys.readouterr().err
    assert "metadata.tla NoLostUpdate is listed as unguarded in models.toml but is guarded now" in err


@pytest.mark.tlc
def test_single_writer_over_epochs_is_blind_to_epochs_that_stop_but_the_term_is_not(tmp_path: Path) -> None:
    """Issue 47 item 1: with every owner node at epoch 1, SingleWriter (over the epochs the protocol
    fences with) passes although an expired owner writes after its successor; SingleWriterByTerm, over
    the ghost ownership term the protocol never reads, fails."""
    from conformance.tlc import Outcome, run_tlc

    shutil.copy(SPEC_DIR / "metadata.tla", tmp_path / "metadata.tla")
    cfg = (SPEC_DIR / "metadata_mutation_epochsstay_ci.cfg").read_text()
    blind = tmp_path / "blind.cfg"
    blind.write_text(cfg.replace("    SingleWriterByTerm\n", ""))
    assert run_tlc(tmp_path / "metadata.tla", blind).outcome is Outcome.PASS
    seen = tmp_path / "seen.cfg"
    seen.write_text(cfg)
    result = run_tlc(tmp_path / "metadata.tla", seen)
    assert (result.outcome, result.violated) == (Outcome.VIOLATION, "SingleWriterByTerm")
    # the counterexample: two owners' writes accepted, the later one from the earlier term
    writes = [s for s in result.trace if s.action == "WriteData"]
    assert len(writes) >= 2
