"""Fixtures of the conformance suite. `conformance`: TLC's behaviours of each manifest model and their replay
against the unmutated cores, computed once per session (tests/conformance/shared.py)."""

from __future__ import annotations

import pytest

from tests.conformance.shared import Conformance


@pytest.fixture(scope="session")
def conformance() -> Conformance:
    return Conformance()
