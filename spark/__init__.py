"""Spark audit of run logs. Imports nothing from impl/: a checker must not share bugs with what it checks."""

from __future__ import annotations

import os
from pathlib import Path


def child_env() -> dict[str, str]:
    """The environment of a plain child interpreter (`python -m spark.<module>`) that imports this repository's
    spark package however this process found it."""
    root = str(Path(__file__).resolve().parent.parent)
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")])))
