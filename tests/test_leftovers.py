"""tests/leftovers.py: a process a test starts dies with the suite even when the suite is SIGKILLed, and a suite
that ends with one still running fails. Each case runs a small suite of its own in a child pytest."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# A test that starts a sleeper in a session of its own (as the cluster's nodes are), writes its pid, and waits.
INNER = """
import os, subprocess, sys, time
from pathlib import Path

def test_start_a_detached_sleeper():
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    Path(os.environ["PIDFILE"]).write_text(str(p.pid))
    if os.environ.get("HANG"):
        time.sleep(600)
"""


def alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


def inner_suite(tmp_path: Path, hang: bool) -> tuple[subprocess.Popen[str], Path]:
    (tmp_path / "test_inner.py").write_text(INNER)
    pidfile = tmp_path / "sleeper.pid"
    env = {**os.environ, "PIDFILE": str(pidfile), "HANG": "1" if hang else "", "PYTHONPATH": str(ROOT)}
    suite = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "tests.leftovers",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            "-o",
            "addopts=",
            str(tmp_path / "test_inner.py"),
        ],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    return suite, pidfile


def wait_for(condition, what: str, timeout_s: float = 60) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.1)


def test_a_killed_suite_leaves_nothing_behind(tmp_path: Path) -> None:
    suite, pidfile = inner_suite(tmp_path, hang=True)
    try:
        wait_for(lambda: pidfile.exists() and pidfile.read_text(), "the inner test started its sleeper")
        sleeper = int(pidfile.read_text())
        assert alive(sleeper)
        suite.send_signal(signal.SIGKILL)  # no teardown, no session end: only the reaper is left to act
        suite.wait(timeout=30)
        wait_for(lambda: not alive(sleeper), "the reaper killed the detached sleeper", 30)
    finally:
        suite.kill()
        if pidfile.exists() and pidfile.read_text() and alive(int(pidfile.read_text())):
            os.kill(int(pidfile.read_text()), signal.SIGKILL)


def test_a_suite_that_leaves_a_process_running_fails(tmp_path: Path) -> None:
    suite, pidfile = inner_suite(tmp_path, hang=False)
    out, _ = suite.communicate(timeout=120)
    assert "1 passed" in out, out
    assert suite.returncode == 1, out  # the test passed, the session-end check failed the run
    assert "still running at its end" in out and f"pid {pidfile.read_text()}" in out, out
    assert not alive(int(pidfile.read_text()))
