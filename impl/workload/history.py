"""Writing a history in the format of docs/history.md.

Index and time are assigned under one lock, at the moment the event is written: an invoke is
written before the operation starts and a completion after it ended, so the order of lines is a
real-time order the audit may rely on (realtime-reorder and stale-read checks compare them).
Every line is flushed at once, so a crashed workload still leaves a usable history prefix.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

Position = list[int]  # [ledger_id, entry_id, batch_index]
NEMESIS = "nemesis"


class HistoryWriter:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "w", encoding="utf-8")  # noqa: SIM115 (closed by close())
        self._lock = threading.Lock()
        self._index = 0
        self._origin = time.monotonic_ns()
        self.counts: Counter[str] = Counter()  # completions by type, for progress output

    def record(self, event: dict[str, Any]) -> dict[str, Any]:
        """Write one event (without index/time); returns it with its index and time."""
        with self._lock:
            line = {"index": self._index, "time": time.monotonic_ns() - self._origin, **event}
            self._file.write(json.dumps(line, separators=(",", ":")) + "\n")
            self._file.flush()
            self._index += 1
            if event.get("process") != NEMESIS and event.get("type") != "invoke":
                self.counts[str(event["type"])] += 1
            return line

    def invoke(self, process: int, f: str, topic: str, **fields: Any) -> dict[str, Any]:
        return self.record({"process": process, "type": "invoke", "f": f, "topic": topic, **fields})

    def complete(self, process: int, kind: str, f: str, topic: str, **fields: Any) -> dict[str, Any]:
        if kind not in ("ok", "fail", "info"):
            raise ValueError(f"a completion is ok, fail or info, not {kind!r}")
        return self.record({"process": process, "type": kind, "f": f, "topic": topic, **fields})

    def nemesis(self, f: str, value: str, **fields: Any) -> dict[str, Any]:
        return self.record({"process": NEMESIS, "type": "info", "f": f, "value": value, **fields})

    @property
    def events(self) -> int:
        with self._lock:
            return self._index

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                self._file.close()
