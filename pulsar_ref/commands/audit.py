"""`pulsar-ref audit`: the command lives with the audit (spark/cli.py), which imports nothing of the CLI."""

from __future__ import annotations

from spark.cli import main

__all__ = ["main"]
