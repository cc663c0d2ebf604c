"""Waiting on a condition rather than on time: tests poll what they wait for, with a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_for(condition: Callable[[], object], what: str, timeout_s: float = 10.0) -> None:
    """Return once `condition()` is true; fail naming `what` after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout_s:g} s waiting for {what}"
        time.sleep(0.01)
