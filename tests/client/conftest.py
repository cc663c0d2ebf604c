"""Fixtures shared by the client tests that talk to a real bookie process."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from .real_cluster import BookieOnPort


@pytest.fixture
def bookie(tmp_path: Path) -> Iterator[BookieOnPort]:
    """One `pulsar-ref bookie` process on a free port with embedded metadata, always stopped after the test."""
    process = BookieOnPort(tmp_path / "data", f"embedded://{tmp_path / 'metadata'}")
    try:
        yield process
    finally:
        process.ensure_stopped()  # SIGKILL: also ends a SIGSTOPped bookie
