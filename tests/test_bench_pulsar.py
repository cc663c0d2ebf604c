"""bench/bench_pulsar.py without a deployment (issue 46, item 6): its arguments, the proxy deployment in them,
the round's ratios (to pulsar-lite, and the cluster's and the proxy's to the standalone, the 0.8x target), the
records the dashboard reads, and the CPU and memory it reads from /proc."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"


def module(name: str) -> ModuleType:
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))  # as when the script runs: results_log beside it
    spec = importlib.util.spec_from_file_location(f"bench_{name}_under_test", BENCH / f"{name}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


bench = module("bench_pulsar")

FIGURES = {
    "standalone": {"async unbatched": 10_000.0, "fixed 1,000 msg/s, publish p99": 10.0, "broker peak RSS": 120.0},
    "cluster": {"async unbatched": 8_500.0, "fixed 1,000 msg/s, publish p99": 12.0, "broker peak RSS": 150.0},
    "proxy": {
        "async unbatched": 7_000.0,
        "fixed 1,000 msg/s, publish p99": 13.0,
        "async unbatched, proxy CPU": 20.0,
        "broker peak RSS": 150.0,
    },
    "pulsar-lite": {"async unbatched": 20_000.0, "fixed 1,000 msg/s, publish p99": 1.0, "broker peak RSS": 20.0},
}


def test_the_proxy_is_a_deployment_and_runs_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    args = bench.parse_args([])
    assert args.deployment == ["standalone", "cluster", "proxy", "pulsar-lite"] and args.rows == ["all"]
    assert bench.parse_args(["--deployment", "proxy"]).deployment == ["proxy"]
    assert bench.DEPLOYMENTS["proxy"].proxies == 1 and bench.DEPLOYMENTS["cluster"].proxies == 0
    with pytest.raises(SystemExit):
        bench.parse_args(["--help"])
    assert "`pulsar-ref proxy`" in capsys.readouterr().out


def test_fixed_rate_and_short_combine_all_and_the_probe_go_alone() -> None:
    assert bench.parse_args(["--rows", "fixed-rate", "short"]).rows == ["fixed-rate", "short"]
    for rows in (["all", "short"], ["disk-probe", "fixed-rate"]):
        with pytest.raises(SystemExit):
            bench.parse_args(["--rows", *rows])


def test_the_rounds_ratios_judge_the_cluster_and_the_proxy_against_the_standalone() -> None:
    lines = bench.compare(FIGURES)
    header = lines[2]
    assert "| cluster / pulsar-lite |" in header and "| proxy / standalone |" in header
    assert "| standalone / standalone" not in header and "pulsar-lite / pulsar-lite" not in header
    rows = {line.split(" | ")[0].lstrip("| "): line.split(" | ") for line in lines[4:]}
    # msg/s: cluster 0.85x (met), proxy 0.70x (not met); the last two columns are to the standalone
    assert rows["async unbatched (msg/s)"][-2:] == ["0.85 met", "0.70 NOT met |"]
    assert rows["async unbatched (msg/s)"][7] == "0.35"  # the proxy to pulsar-lite
    # latency: at most 1.25x of the standalone's: 1.20 met, 1.30 not
    assert rows["fixed 1,000 msg/s, publish p99 (ms)"][-2:] == ["1.20 met", "1.30 NOT met |"]
    # memory: a ratio, no verdict; a figure only the proxy has: no ratio
    assert rows["broker peak RSS (MiB)"][-2:] == ["1.25", "1.25 |"]
    assert rows["async unbatched, proxy CPU (us/msg)"][3] == "20"


def test_records_hold_pulsar_lite_and_the_standalone_as_peers() -> None:
    rows = {r["name"]: r for r in bench.records(FIGURES)}
    assert rows["proxy: async unbatched"] == {
        "name": "proxy: async unbatched",
        "value": 7000.0,
        "unit": "msg/s",
        "peer": "pulsar-lite",
        "peer_value": 20000.0,
    }
    assert rows["proxy: async unbatched, to the standalone"]["peer_value"] == 10_000.0
    assert rows["cluster: fixed 1,000 msg/s, publish p99, to the standalone"]["unit"] == "ms"
    assert rows["standalone: broker peak RSS"]["unit"] == "MiB"
    assert (
        rows["proxy: async unbatched, proxy CPU"]["unit"] == "us/msg"
        and "peer" not in rows["proxy: async unbatched, proxy CPU"]
    )
    assert not any(name.startswith(("standalone:", "pulsar-lite:")) and "to the" in name for name in rows)
    assert not any(name.startswith("pulsar-lite:") for name in rows)


def test_the_dashboard_shows_the_proxy_against_the_standalone(tmp_path: Path) -> None:
    log, dashboard = module("results_log"), module("dashboard")
    results = tmp_path / "results"
    shutil.copytree(BENCH / "results", results)
    log.append("pulsar", bench.records(FIGURES), calibration="calibration: test", directory=results)
    lines = dashboard.render(results).splitlines()
    line = next(x for x in lines if "| proxy: async unbatched, to the standalone |" in x)
    assert "7,000 msg/s" in line and "standalone: 10,000 msg/s" in line and ">= 0.8x peer: **NOT met**" in line
    line = next(x for x in lines if "| cluster: fixed 1,000 msg/s, publish p99, to the standalone |" in x)
    assert "<= 1.25x peer: met" in line
    assert any("| proxy: async unbatched, proxy CPU | 20 us/msg |" in x for x in lines)


def test_cpu_and_memory_come_from_proc() -> None:
    meter = bench.Meter([os.getpid()], [])
    deadline = time.process_time() + 0.1
    while time.process_time() < deadline:
        pass
    broker, proxy = meter.per_message(1000)
    assert broker >= 50 and proxy is None  # >= 0.05 s of CPU over 1,000 messages (ticks of 10 ms)
    assert bench.Meter([os.getpid()], [os.getpid()]).per_message(1)[1] is not None
    now, peak = bench.memory_mib(os.getpid())
    assert 1 < now <= peak
