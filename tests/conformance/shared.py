"""The conformance suite's session-wide work (the `conformance` fixture, conftest.py): each manifest
model's TLC behaviours, and their replay against the unmutated cores, computed once per test session
(on first use) and shared by the replay tests and the mutation score's baseline.

`behaviours(name)` is `behaviours_of(model)`; `replay(name)` is `replay_behaviours(behaviours(name))`
(seed 0, the production cores): the very computation of `replay_model(model)`, and of the mutation
score's baseline (`Checks.run(name)` with no mutant applied). The replay tests assert on it in full;
`checks()` is a `Checks` whose baseline for a model is that same result's `ok`, so a kill still counts
only where the real, unmutated replay passes (a replay that mismatched fails its replay test and
gives no kill). Trace validation checks (`traces:...`) are run by `Checks` itself, as before.

Replays with a mutant applied, with broken cores, another seed or another config are never cached:
they are computed where they are asserted.
"""

from __future__ import annotations

from typing import Any

from conformance.mutants import CATALOGUE, Checks, MutantError
from conformance.suite import Behaviours, ModelResult, behaviours_of, replay_behaviours
from conformance.tlc import load_manifest

MODELS = {m.name: m for m in load_manifest()}


def _patch_targets() -> dict[tuple[str, str], Any]:
    """What every attribute the catalogue's mutants patch is now (owner, name -> object)."""
    found: dict[tuple[str, str], Any] = {}
    for mutant in CATALOGUE:
        for patch in mutant.patches:
            try:
                found[(patch.owner, patch.name)] = vars(patch.target())[patch.name]
            except MutantError:  # test_mutants reports a stale patch; nothing to guard here
                continue
    return found


_UNMUTATED = _patch_targets()  # at collection, before any test applies a mutant


class Conformance:
    """TLC's behaviours and the unmutated replay of each manifest model, computed once."""

    def __init__(self) -> None:
        self._behaviours: dict[str, Behaviours] = {}
        self._replays: dict[str, ModelResult] = {}

    def behaviours(self, name: str) -> Behaviours:
        if name not in self._behaviours:
            self._behaviours[name] = behaviours_of(MODELS[name])
        return self._behaviours[name]

    def replay(self, name: str) -> ModelResult:
        """The model's behaviours replayed against the production cores (= `replay_model(model)`)."""
        if name not in self._replays:
            patched = [key for key, original in _UNMUTATED.items() if _patch_targets().get(key) is not original]
            assert not patched, f"a mutant is applied ({patched}): this would be no baseline"
            self._replays[name] = replay_behaviours(self.behaviours(name))
        return self._replays[name]

    def checks(self) -> Checks:
        """A `Checks` of the mutation score whose model baselines are the replays above."""
        return _SessionChecks(self)


class _SessionChecks(Checks):
    def __init__(self, conformance: Conformance) -> None:
        super().__init__(conformance.behaviours)
        self._conformance = conformance

    def passes_unmutated(self, check: str) -> bool:
        # Called outside `applied(mutant)` (run_mutant), as the replay it reads was computed.
        if check not in self.baseline and check in MODELS and self.seed == 0:
            self.baseline[check] = self._conformance.replay(check).ok
        return super().passes_unmutated(check)
