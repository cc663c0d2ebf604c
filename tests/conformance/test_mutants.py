"""The mutation score (conformance/mutants.py): broken cores the conformance suite must kill.

- the catalogue: documented, every patch target present, patches undone after use;
- kills come from the conformance machinery (a replay mismatch, a regression trace followed,
  a refused trace), and only from checks that pass without the mutant;
- a harmless "mutant" survives, and `pulsar-ref conform --mutants` names it and exits 1;
- the whole catalogue is killed (the CI run of the score).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from conformance import mutants as mutation
from conformance.mutants import CATALOGUE, Checks, Mutant, MutantError, Patch, applied, run_mutant
from conformance.tlc import load_manifest
from conformance.trace_validation import CONFIGS
from impl.bookie.client.writer import LedgerWriter
from impl.metadata import transitions
from tests.conformance.shared import Conformance

MODELS = {m.name: m for m in load_manifest()}
ROOT = Path(__file__).resolve().parents[2]


def _harmless(original: object, writer: object, *args: object) -> object:
    return original(writer, *args)  # type: ignore[operator]


HARMLESS = Mutant(
    "harmless",
    "impl/bookie/client/writer.py",
    "not broken at all: the original method behind a wrapper",
    (Patch("impl.bookie.client.writer:LedgerWriter", "_deliver_completed", mutation._method(_harmless)),),
    ("ledger-ci-liveness",),
)


# ---- the catalogue -------------------------------------------------------------------------------------


def test_catalogue_is_documented_and_its_checks_exist() -> None:
    names = [m.name for m in CATALOGUE]
    assert len(names) == len(set(names)) >= 10
    traces = {c.name for c in CONFIGS}
    for m in CATALOGUE:
        assert m.bug and m.patches and m.checks, m.name
        assert (ROOT / m.core).is_file(), m.core
        for check in m.checks:
            if check.startswith("traces:"):
                _, config, runs = check.split(":")
                assert config in traces and int(runs) > 0, check
            else:
                assert check in MODELS and MODELS[check].profile == "ci", check
        for patch in m.patches:
            assert patch.target() is not None  # MutantError if the core lost the attribute
        assert m.specs == {MODELS[c].spec if c in MODELS else "ledger.tla" for c in m.checks}, m.name
    # A check that is no model is an error, not a check silently skipped by `conform --spec`.
    with pytest.raises(MutantError, match="no-such-model"):
        mutation.spec_of("no-such-model")
    # The examples are all in the catalogue.
    assert {
        "recovery-reads-without-fence",
        "negative-threshold-qa",
        "lac-past-a-hole",
        "ensemble-change-without-cw",
        "writer-close-over-closed",
        "ml-writes-after-bad-version",
    } <= set(names)


def test_the_catalogue_is_in_the_spec_pages() -> None:
    # spec/conformance.md ("Mutation score") and the pages of the specs whose conformance names them
    pages = "".join(p.read_text() for p in sorted((ROOT / "spec").glob("*.md")))
    for m in CATALOGUE:
        assert f"`{m.name}`" in pages, f"{m.name} is not documented in spec/conformance.md or a spec's page"


def test_applied_patches_and_restores() -> None:
    by_name = {m.name: m for m in CATALOGUE}
    method = LedgerWriter.__dict__["_deliver_completed"]
    function = transitions.writer_close
    with applied(by_name["lac-past-a-hole"]):
        assert LedgerWriter.__dict__["_deliver_completed"] is not method
    assert LedgerWriter.__dict__["_deliver_completed"] is method
    with pytest.raises(RuntimeError), applied(by_name["writer-close-over-closed"]):
        assert transitions.writer_close is not function
        raise RuntimeError("the block failed")
    assert transitions.writer_close is function


def test_a_patch_of_a_missing_attribute_is_a_typed_error() -> None:
    gone = Mutant(
        "gone",
        "impl/bookie/client/writer.py",
        "-",
        (Patch("impl.bookie.client.writer:LedgerWriter", "_no_such", lambda o: o),),
        (),
    )
    with pytest.raises(MutantError, match="no attribute _no_such"), applied(gone):
        pass
    with pytest.raises(MutantError, match="no class"):
        Patch("impl.bookie.client.writer:NoSuchClass", "x", lambda o: o).target()


# ---- kills ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def checks(conformance: Conformance) -> Checks:
    """TLC's behaviours and the models' baselines (their unmutated replays) are the session's (conftest.py):
    the replay tests' own results, or computed here if this module runs alone."""
    return conformance.checks()


@pytest.mark.tlc
@pytest.mark.parametrize(
    ("name", "killer", "how"),
    [
        ("bookie-ignores-fence", "ledger-ci-liveness", "mismatch at step"),
        ("writer-ignores-efenced", "ledger-ci-liveness", "mismatch at step"),
        ("writer-close-over-closed", "ledger-ci-liveness", "WriterCloses"),
        ("recovery-reads-without-fence", "ledger-mutation1-nofence-ci", "followed to the end"),
    ],
)
def test_a_mutant_is_killed_by_the_check_it_names(checks: Checks, name: str, killer: str, how: str) -> None:
    verdict = run_mutant(next(m for m in CATALOGUE if m.name == name), checks)
    assert verdict.killed and not verdict.error, verdict
    assert verdict.killed_by == killer and how in verdict.how, verdict
    assert checks.baseline[killer], "a kill counts only where the check passes without the mutant"


@pytest.mark.tlc
def test_a_harmless_mutant_survives(checks: Checks) -> None:
    verdict = run_mutant(HARMLESS, checks)
    assert not verdict.killed and verdict.tried == ["ledger-ci-liveness: conforms (960/960 edges)"]
    assert mutation.score([verdict]) == "mutants killed: 0/1 (SURVIVED: harmless)"


@pytest.mark.tlc
def test_a_check_that_fails_unmutated_kills_nothing(checks: Checks) -> None:
    # ledger-ci-liveness with a deliberately wrong baseline: the check is skipped, the mutant survives.
    wrong = Checks(checks._behaviours, baseline={"ledger-ci-liveness": False})
    lethal = next(m for m in CATALOGUE if m.name == "bookie-ignores-fence")
    verdict = run_mutant(dataclasses.replace(lethal, checks=("ledger-ci-liveness",)), wrong)
    assert not verdict.killed and verdict.tried == ["ledger-ci-liveness: fails without the mutant (no verdict)"]


@pytest.mark.tlc
def test_the_cli_names_a_survivor_and_exits_1(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from pulsar_ref.commands import conform

    lethal = next(m for m in CATALOGUE if m.name == "bookie-ignores-fence")
    monkeypatch.setattr(mutation, "CATALOGUE", (lethal, HARMLESS))
    code = conform.main(["--mutants", "--spec", "ledger"], "pulsar-ref conform")
    out = capsys.readouterr().out
    assert code == conform.EXIT_MISMATCH, out
    assert "bookie-ignores-fence: killed by ledger-ci-liveness" in out
    assert "harmless: SURVIVED" in out and "mutants killed: 1/2 (SURVIVED: harmless)" in out
    assert conform.main(["--mutants", "--model", "ledger-ci-liveness"], "pulsar-ref conform") == conform.EXIT_USAGE


@pytest.mark.tlc
def test_every_mutant_of_the_catalogue_is_killed(checks: Checks) -> None:
    verdicts = mutation.run_mutants(checks)
    survivors = {v.mutant.name: (v.error, v.tried) for v in verdicts if not v.killed}
    assert not survivors, survivors
    assert mutation.score(verdicts) == f"mutants killed: {len(CATALOGUE)}/{len(CATALOGUE)}"


@pytest.mark.tlc
def test_the_default_run_scores_the_mutants_after_the_models(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from pulsar_ref.commands import conform

    # A manifest of one model, and a catalogue of a lethal mutant and a harmless one: the models'
    # own replay is the baseline, the summary says the score, and the survivor fails the run.
    monkeypatch.setattr(conform, "load_manifest", lambda: [MODELS["ledger-ci-liveness"]])
    lethal = next(m for m in CATALOGUE if m.name == "bookie-ignores-fence")
    monkeypatch.setattr(mutation, "CATALOGUE", (lethal, HARMLESS))
    code = conform.main(["--spec", "ledger"], "pulsar-ref conform")
    out = capsys.readouterr().out
    assert "960/960" in out and "mutants killed: 1/2 (SURVIVED: harmless)" in out, out
    assert f"{conform.DEFAULT_TRACES}/{conform.DEFAULT_TRACES} traces accepted by ledger.tla" in out, out
    assert code == conform.EXIT_MISMATCH
    monkeypatch.setattr(mutation, "CATALOGUE", (lethal,))
    assert conform.main(["--spec", "ledger"], "pulsar-ref conform") == 0
    assert "mutants killed: 1/1" in capsys.readouterr().out
    assert conform.main(["--spec", "ledger", "--no-mutants"], "pulsar-ref conform") == 0
    assert "mutants killed: not run" in capsys.readouterr().out
