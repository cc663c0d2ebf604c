"""Nothing a test starts outlives the suite, however the suite ends (a pytest plugin, loaded by tests/conftest.py).

Every process the suite starts inherits PULSAR_REF_TEST_SUITE=<token>, also those that leave the suite's process
group (the cluster's nodes run in sessions of their own, so a killed pytest orphans them). At the start a reaper
(tests/reaper.py) is started in a session of its own, holding a pipe from pytest: when pytest ends, however (a
timeout's SIGTERM then SIGKILL included), the pipe closes and the reaper kills every process carrying the token.
At the end of a session that was not killed, a check fails the run if any such process is still running (and
then kills it, so that the failure leaves nothing behind either)."""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

VARIABLE = "PULSAR_REF_TEST_SUITE"
REAPER = Path(__file__).with_name("reaper.py")
# The JVM of a local Spark session (pyspark's gateway) ends when its stdin, a pipe from this process, closes:
# it ends with the suite by construction, and it outlives stop_session(), so it is not a leftover.
ENDS_WITH_THE_SUITE = ("org.apache.spark.deploy.SparkSubmit", "pyspark-shell")


def marked(token: str) -> list[int]:
    """Pids of the processes that carry this suite's token (those this user may read)."""
    needle = f"{VARIABLE}={token}\0".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:  # gone meanwhile, or another user's
                pass
    return found


def command_line(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return "(gone)"


def describe(pid: int) -> str:
    return command_line(pid)[:200]


def parent_of(pid: int) -> int:
    try:
        return int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def leftovers(token: str, suite_pid: int, reaper_pid: int) -> list[int]:
    return [
        p
        for p in marked(token)
        if p not in (suite_pid, reaper_pid)
        and not (parent_of(p) == suite_pid and any(s in command_line(p) for s in ENDS_WITH_THE_SUITE))
    ]


class Leftovers:
    def __init__(self) -> None:
        # A suite started by a test of this plugin gets its own token (and its own reaper).
        self.token = f"{os.getpid()}-{secrets.token_hex(8)}"
        self.reaper: subprocess.Popen[bytes] | None = None

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        # The reaper does not carry this suite's token (it must not kill itself), only an outer suite's.
        self.reaper = subprocess.Popen(
            [sys.executable, str(REAPER), str(os.getpid()), self.token],
            stdin=subprocess.PIPE,
            start_new_session=True,  # out of the suite's process group: a group kill of the suite spares it
        )
        os.environ[VARIABLE] = self.token

    @pytest.hookimpl(trylast=True)  # after the session's fixtures are torn down
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        reaper_pid = self.reaper.pid if self.reaper else 0
        deadline = time.monotonic() + 10  # what a teardown stopped may take a moment to exit
        left = leftovers(self.token, os.getpid(), reaper_pid)
        while left and time.monotonic() < deadline:
            time.sleep(0.2)
            left = leftovers(self.token, os.getpid(), reaper_pid)
        if left:
            lines = "\n".join(f"  pid {p}: {describe(p)}" for p in left)
            sys.stderr.write(f"\nprocesses started by the suite are still running at its end (killed now):\n{lines}\n")
            for p in left:
                with contextlib.suppress(OSError):
                    os.kill(p, signal.SIGKILL)
            session.exitstatus = pytest.ExitCode.TESTS_FAILED
        if self.reaper is not None and self.reaper.stdin is not None:
            self.reaper.stdin.close()  # the reaper sweeps once more and exits
            self.reaper.wait(timeout=30)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(Leftovers(), "pulsar-ref-leftovers")
