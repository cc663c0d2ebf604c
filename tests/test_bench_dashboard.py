"""bench/RESULTS.md is the dashboard bench/dashboard.py builds from bench/results/*.jsonl (issue 48, item 3):
a figure edited by hand, or a record added without regenerating, fails here."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"


def module(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"bench_{name}_under_test", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def test_committed_table_is_the_generated_one() -> None:
    done = subprocess.run([sys.executable, str(BENCH / "dashboard.py"), "--check"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_results_md_is_short() -> None:
    assert len((BENCH / "RESULTS.md").read_text().splitlines()) < 300


def test_every_row_links_to_a_history_page_that_exists() -> None:
    text = (BENCH / "RESULTS.md").read_text()
    links = set(re.findall(r"\]\((history/[^)]+)\)", text))
    assert links, "no history links"
    for link in links:
        assert (BENCH / link).is_file(), link
    # and every history page is reachable from the dashboard
    pages = {f"history/{p.name}" for p in (BENCH / "history").glob("*.md")}
    assert pages <= links, pages - links


def test_a_changed_figure_changes_the_table(tmp_path: Path) -> None:
    dashboard = module("dashboard")
    results = tmp_path / "results"
    shutil.copytree(BENCH / "results", results)
    before = dashboard.render(results)
    assert before == (BENCH / "RESULTS.md").read_text()
    path = results / "pulsar.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    # the newest record holding the row (a short run records only some rows)
    row = next(r for rec in reversed(records) for r in rec["rows"] if r["name"] == "cluster: async batched 1 KiB")
    row["value"] = 12_345
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    after = dashboard.render(results)
    assert "12,345 msg/s" in after and "12,345 msg/s" not in before
    assert "| pulsar | cluster: async batched 1 KiB | 12,345 msg/s | >= 20,000 msg/s: **NOT met**" in after


def test_a_benchmark_record_becomes_the_current_row(tmp_path: Path) -> None:
    # what a bench script does at the end of a run (bench/results_log.py), read back by the dashboard
    log, dashboard = module("results_log"), module("dashboard")
    results = tmp_path / "results"
    shutil.copytree(BENCH / "results", results)
    rows = [log.row("through the proxy: async unbatched", 3000.0, "msg/s", "direct", 10_000.0)]
    log.append(
        "proxy", rows, calibration="calibration: 3M-step Python loop 100 ms; load average 1.00 1.00", directory=results
    )
    text = dashboard.render(results)
    line = next(x for x in text.splitlines() if "| through the proxy: async unbatched |" in x)
    assert "3,000 msg/s" in line and "direct: 10,000 msg/s" in line and "| 0.30 |" in line
    assert ">= 0.7x peer: **NOT met**" in line and "load average 1.00 1.00" in line
