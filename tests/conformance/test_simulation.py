"""Random behaviours from TLC's simulation mode (conformance/simulation.py), for models too large for their graph."""

from __future__ import annotations

import pytest

from conformance import mutants as mutation
from conformance.simulation import Simulation, replay_simulation, simulate, simulation_config
from conformance.suite import mapping_for
from conformance.tlc import SPEC_DIR, load_manifest

MODELS = {m.name: m for m in load_manifest()}
DEEP = MODELS["ledger-deep"]


def test_the_simulation_config_keeps_the_constants_and_checks_only_where_walks_end() -> None:
    text = (SPEC_DIR / DEEP.config).read_text()
    assert "VIEW" in text and "SYMMETRY" in text and "NoDivergence" in text  # what must go
    cfg = simulation_config(text)
    assert "VIEW" not in cfg and "SYMMETRY" not in cfg and "NoDivergence" not in cfg and "PROPERTIES" not in cfg
    assert "NumEntries = 2" in cfg and "SPECIFICATION Spec" in cfg
    assert cfg.rstrip().endswith("INVARIANT SimGoesOn")


@pytest.fixture(scope="module")
def walks() -> Simulation:
    return simulate(DEEP, count=60, seed=1, depth=40)


@pytest.mark.tlc
def test_ledger_deep_behaviours_are_distinct_deterministic_and_followed(walks: Simulation) -> None:
    assert len(walks.behaviours) == 60 and walks.walks >= 60
    keys = {tuple((a, repr(s.get("lastAction"))) for a, s in b) for b in walks.behaviours}
    assert len(keys) == 60  # de-duplicated
    assert max(len(b) for b in walks.behaviours) > 10  # not just the first steps
    actions = {a for b in walks.behaviours for a, _ in b}
    assert {"RecoveryStarts", "BookieCrashes", "WriterReceivesAddResponse"} <= actions
    again = simulate(DEEP, count=5, seed=1, depth=40)
    assert again.behaviours == walks.behaviours[:5]  # one worker, a fixed seed: the same walks
    replayed = replay_simulation(mapping_for(DEEP), walks)
    assert not replayed.mismatches, str(replayed.mismatches[0].mismatch)
    assert replayed.steps == sum(len(b) - 1 for b in walks.behaviours)


@pytest.mark.tlc
def test_a_broken_core_is_caught_by_some_behaviour(walks: Simulation) -> None:
    broken = next(m for m in mutation.CATALOGUE if m.name == "recovery-reads-without-fence")
    with mutation.applied(broken):
        replayed = replay_simulation(mapping_for(DEEP), walks)
    assert replayed.mismatches, "no random behaviour caught recovery reads without the fence flag"
    first = replayed.mismatches[0].mismatch
    assert first is not None and first.action.startswith("Recovery")


@pytest.mark.tlc
def test_cli_simulates_deep_models_and_rejects_a_bad_count(capsys: pytest.CaptureFixture[str]) -> None:
    from pulsar_ref.commands import conform

    argv = ["--profile", "deep", "--model", "ledger-deep", "--simulate", "20", "--seed", "2"]
    assert conform.main(argv, "pulsar-ref conform") == 0
    out = capsys.readouterr().out
    assert "ledger-deep" in out and "20/20" in out and "all 20 behaviours followed" in out
    assert conform.main([*argv[:-3], "0"], "pulsar-ref conform") == conform.EXIT_USAGE
    # without --simulate a model too large to replay whole is a usage error, not an endless TLC run
    assert conform.main(argv[:4], "pulsar-ref conform") == conform.EXIT_USAGE
    assert "add --simulate N" in capsys.readouterr().err
