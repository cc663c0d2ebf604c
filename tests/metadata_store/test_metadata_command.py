"""`pulsar-ref metadata` end to end, as a user runs it (a subprocess on an embedded store)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run(url: str, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "pulsar_ref.cli", "metadata", "--url", url, *args],
        cwd=REPO,
        input=stdin,
        capture_output=True,
        timeout=120,
    )


def test_metadata_command_round_trip(tmp_path):
    url = f"embedded://{tmp_path / 'meta'}"
    assert run(url, "create", "-p", "/ledgers/L1", "hello").stdout.decode().strip() == "/ledgers/L1"
    assert run(url, "create", "/ledgers/n-", "--sequential").stdout.decode().strip() == "/ledgers/n-0000000001"
    assert run(url, "ls", "/ledgers").stdout.decode().split() == ["L1", "n-0000000001"]
    assert run(url, "get", "/ledgers/L1").stdout.decode().strip() == "hello"
    assert run(url, "set", "/ledgers/L1", "-", "--version", "0", stdin=b"\x00\xffbin").returncode == 0
    assert run(url, "get", "--raw", "/ledgers/L1").stdout == b"\x00\xffbin"
    assert "0x00ff62696e" in run(url, "get", "/ledgers/L1").stdout.decode()
    stat = run(url, "stat", "/ledgers/L1").stdout.decode()
    assert "version         1" in stat and "data_length     5" in stat
    tree = run(url, "tree", "/").stdout.decode().splitlines()
    assert tree == ["/", "  ledgers", "    L1", "    n-0000000001"]
    assert run(url, "delete", "-r", "/ledgers").returncode == 0
    assert run(url, "ls", "/").stdout.decode().split() == []


def test_metadata_command_errors_are_one_clear_line_and_exit_1(tmp_path):
    url = f"embedded://{tmp_path / 'meta'}"
    run(url, "create", "/a", "v")
    run(url, "create", "/a/b")
    cases = {
        ("set", "/a", "x", "--version", "7"): "BADVERSION",
        ("delete", "/a"): "NOTEMPTY",
        ("get", "/missing"): "NONODE",
        ("create", "/a"): "NODEEXISTS",
        ("create", "bad-path"): "BADARGUMENTS",
    }
    for args, code in cases.items():
        result = run(url, *args)
        err = result.stderr.decode().strip()
        assert result.returncode == 1, args
        assert len(err.splitlines()) == 1 and code in err, err
    bad_url = run("ftp://x", "ls", "/")
    assert bad_url.returncode == 1 and "embedded:///ABSOLUTE/DIR" in bad_url.stderr.decode()
    # The store is untouched by the failures.
    assert run(url, "get", "/a").stdout.decode().strip() == "v"


def test_metadata_help_names_the_default_url():
    out = subprocess.run(
        [sys.executable, "-m", "pulsar_ref.cli", "metadata", "--help"], cwd=REPO, capture_output=True, text=True
    ).stdout
    assert "var/metadata" in out and "zk://" in out
