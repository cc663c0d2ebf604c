"""The benchmarks' machine-readable records: bench/results/<bench>.jsonl, one JSON object per run.

Each bench/bench_*.py appends one record at the end of a run with `append(bench, rows, calibration=...)`;
bench/dashboard.py builds bench/RESULTS.md's table from the newest record of each row, so the table cannot
drift from what the benchmarks measured. A record:

    {"date": "2026-11-27 16:44", "commit": "615bf30", "command": ".venv/bin/python bench/bench_pulsar.py ...",
     "calibration": "calibration: 3M-step Python loop 104 ms; load average 1.50 1.20",
     "rows": [{"name": "cluster: async batched 1 KiB", "value": 19757, "unit": "msg/s",
               "peer": "pulsar-lite", "peer_value": 22408}]}

`peer`/`peer_value` is the peer's figure from the same run (pulsar-lite, raw kazoo, the raw disk loop, the
direct path, ...). Records seeded from the dated entries of bench/history/ say so in `note`.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

# PULSAR_REF_BENCH_RESULTS redirects the records (a trial run that must not reach the dashboard).
RESULTS = Path(os.environ.get("PULSAR_REF_BENCH_RESULTS") or Path(__file__).resolve().parent / "results")


def calibration() -> str:
    """A fixed pure-Python loop's time and the load average, measured now: what a figure is read against."""
    start = time.perf_counter()
    total = 0
    for i in range(3_000_000):
        total += i & 7
    loop_ms = (time.perf_counter() - start) * 1000
    load = os.getloadavg()
    return f"calibration: 3M-step Python loop {loop_ms:.0f} ms; load average {load[0]:.2f} {load[1]:.2f}"


def row(name: str, value: float, unit: str, peer: str | None = None, peer_value: float | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"name": name, "value": round(value, 3), "unit": unit}
    if peer is not None and peer_value is not None:
        out.update(peer=peer, peer_value=round(peer_value, 3))
    return out


def _commit() -> str | None:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"],
            cwd=Path(__file__).resolve().parent,
            capture_output=True,
            text=True,
            timeout=10,
        )
    except OSError:
        return None
    return done.stdout.strip() or None


def append(bench: str, rows: list[dict[str, Any]], *, calibration: str, directory: Path | None = None) -> Path:
    """Append one run's record to <directory or bench/results>/<bench>.jsonl; returns the file."""
    if not rows:
        return (directory or RESULTS) / f"{bench}.jsonl"
    record = {
        "date": time.strftime("%Y-%m-%d %H:%M", time.gmtime()),
        "commit": _commit(),
        "command": shlex.join([".venv/bin/python", f"bench/{Path(sys.argv[0]).name}", *sys.argv[1:]]),
        "calibration": calibration,
        "rows": rows,
    }
    path = (directory or RESULTS) / f"{bench}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(record) + "\n")
    print(f"recorded in {path} (regenerate the table: .venv/bin/python bench/dashboard.py)", file=sys.stderr)
    return path
