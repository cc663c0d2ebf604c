"""`pulsar-ref audit` end to end: malformed input (exit 2, line named), exit codes, JSON shape, HTML."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from pulsar_ref.commands.audit import main
from spark.generate import generate, inject, write_jsonl

T = "persistent://public/default/t0"
GOOD = [
    {"index": 0, "time": 1, "process": 1, "type": "invoke", "f": "append", "topic": T, "value": "1-1"},
    {"index": 1, "time": 2, "process": "nemesis", "type": "info", "f": "kill-bookie", "value": "b1"},
    {
        "index": 2,
        "time": 3,
        "process": 1,
        "type": "ok",
        "f": "append",
        "topic": T,
        "value": "1-1",
        "position": [4, 0, 0],
    },
]


def _write(tmp_path: Path, lines: list[str]) -> str:
    path = tmp_path / "h.jsonl"
    path.write_text("".join(line + "\n" for line in lines))
    return str(path)


MALFORMED = [
    # (lines after GOOD, the line that must be named, words of the reason)
    (
        [{"index": 3, "time": 4, "process": 2, "type": "ok", "f": "read", "topic": T, "value": []}],
        4,
        "no pending invoke",
    ),
    (
        [
            {"index": 3, "time": 4, "process": 2, "type": "invoke", "f": "read", "topic": T, "from": None},
            {"index": 4, "time": 5, "process": 2, "type": "invoke", "f": "read", "topic": T, "from": None},
        ],
        5,
        "invokes again",
    ),
    (
        [{"index": 3, "time": 4, "process": 2, "type": "invoke", "f": "append", "topic": T, "value": "1-1"}],
        4,
        "appended twice",
    ),
    (
        [
            {"index": 3, "time": 4, "process": 2, "type": "invoke", "f": "append", "topic": T, "value": "x"},
            {"index": 4, "time": 5, "process": 2, "type": "info", "f": "append", "topic": T, "value": "x"},
            {"index": 5, "time": 6, "process": 2, "type": "invoke", "f": "append", "topic": T, "value": "y"},
        ],
        6,
        "after an info",
    ),
    (
        [{"index": 3, "time": "soon", "process": 2, "type": "invoke", "f": "append", "topic": T, "value": "x"}],
        4,
        "time must be an integer",
    ),
    (
        [
            {"index": 3, "time": 4, "process": 2, "type": "invoke", "f": "append", "topic": T, "value": "x"},
            {
                "index": 4,
                "time": 5,
                "process": 2,
                "type": "ok",
                "f": "append",
                "topic": T,
                "value": "x",
                "position": [1, 2],
            },
        ],
        5,
        "position",
    ),
    ([{"index": 7, "time": 4, "process": 2, "type": "invoke", "f": "append", "topic": T, "value": "x"}], 4, "index"),
    ([{"index": 3, "time": 4, "process": 2, "type": "begin", "f": "append", "topic": T, "value": "x"}], 4, "type"),
]


@pytest.mark.parametrize(("extra", "line", "reason"), MALFORMED)
def test_malformed_history_exits_2_naming_the_line(
    extra: list[dict], line: int, reason: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, [json.dumps(e) for e in GOOD + extra])
    assert main([path, "--reference"], prog="pulsar-ref audit") == 2
    err = capsys.readouterr().err
    assert f"h.jsonl:{line}:" in err and reason in err, err


def test_not_json_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path, [json.dumps(GOOD[0]), "{not json"])
    assert main([path, "--reference"], prog="pulsar-ref audit") == 2
    assert "h.jsonl:2: not valid JSON" in capsys.readouterr().err


def test_nemesis_events_are_ignored_and_valid_exits_0(tmp_path: Path) -> None:
    path = _write(tmp_path, [json.dumps(e) for e in GOOD])
    out = tmp_path / "r.json"
    assert main([path, "--reference", "--json", str(out)], prog="pulsar-ref audit") == 0
    assert json.loads(out.read_text()) == {
        "valid": True,
        "ops": 1,
        "topics": 1,
        "anomaly_types": [],
        "anomalies": {},
        "subscriptions": [],
        "waited_for_drain": 0,
    }


def test_cli_reports_anomalies_json_and_html(tmp_path: Path) -> None:
    events, touched = inject(generate(seed=5, ops=200, processes=6), "lost-write", random.Random(5)) or ([], [])
    history = tmp_path / "bad.jsonl"
    write_jsonl(events, str(history))
    out_json, out_html = tmp_path / "r.json", tmp_path / "r.html"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pulsar_ref.cli",
            "audit",
            str(history),
            "--reference",
            "--json",
            str(out_json),
            "--html",
            str(out_html),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr
    assert "INVALID" in proc.stdout and "lost-write" in proc.stdout
    doc = json.loads(out_json.read_text())
    assert set(doc) == {"valid", "ops", "topics", "anomaly_types", "anomalies", "subscriptions", "waited_for_drain"}
    assert doc["valid"] is False and "lost-write" in doc["anomaly_types"]
    assert set(doc["anomaly_types"]) == set(doc["anomalies"])
    for cases in doc["anomalies"].values():
        for c in cases:
            assert set(c) == {"topic", "ops", "explanation"}
            assert all(isinstance(i, int) for i in c["ops"]) and c["explanation"]
    assert any(set(touched) <= set(c["ops"]) for c in doc["anomalies"]["lost-write"])
    page = out_html.read_text()
    assert "<svg" in page and "lost-write" in page and "http://" not in page.replace("http://www.w3.org", "")


def test_lines_the_fast_parser_rejects_fall_back_to_json(tmp_path: Path) -> None:
    """orjson rejects NaN and integers beyond 64 bits, which json accepts: the verdict must not depend on that."""
    first = json.dumps(GOOD[0])[:-1] + ', "note": NaN, "big": 123456789012345678901234567890}'
    path = _write(tmp_path, [first] + [json.dumps(e) for e in GOOD[1:]])
    assert main([path, "--reference"], prog="pulsar-ref audit") == 0


@pytest.mark.parametrize(
    ("line", "reason"), [(b"", "empty line"), (b'{"index": 1, "note": "\xff"}', "not valid UTF-8"), (b"[1]", "object")]
)
def test_unparsable_line_exits_2(line: bytes, reason: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "h.jsonl"
    path.write_bytes(json.dumps(GOOD[0]).encode() + b"\n" + line + b"\n" + json.dumps(GOOD[2]).encode() + b"\n")
    assert main([str(path), "--reference"], prog="pulsar-ref audit") == 2
    err = capsys.readouterr().err
    assert "h.jsonl:2:" in err and reason in err, err


def test_spark_submit_entry_file_runs_the_cli_by_path(tmp_path: Path) -> None:
    """spark-submit runs spark/submit.py as a file from anywhere: it puts its own repository first on the path
    (no PYTHONPATH) and runs the audit's command line."""
    import os

    root = Path(__file__).resolve().parents[2]
    entry = str(root / "spark" / "submit.py")
    code = (
        f"import runpy, sys\nsys.argv = [{entry!r}, '--help']\n"
        f"try:\n    runpy.run_path({entry!r}, run_name='__main__')\n"
        "except SystemExit as e:\n    print('exit', e.code)\n"
        "print(sys.modules['spark.cli'].__file__)"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert "spark-submit spark/submit.py" in run.stdout
    *_, status, cli = run.stdout.strip().splitlines()
    assert (status, cli) == ("exit 0", str(root / "spark" / "cli.py"))
