"""The trace files real processes write (impl/trace.py's `TraceFile`), read back as records.

A trace file holds JSON lines, one record per event in the order the process emitted it:
`{"seq": n, "name": ..., "params": {...}}` (and `ns`, the process's clock, where it has one). A
restarted process continues its file after a `TraceFileOpened` record.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

Record = dict[str, Any]  # one JSON line of a TraceFile: seq, name, params


def read_log(path: Path) -> list[Record]:
    """Every record of the trace file at `path`, in its order; none when there is no file."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
