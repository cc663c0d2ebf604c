"""wait_exited: a process has ended once it is a zombie, whoever is to reap it."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil
import pytest

from impl.process_exit import wait_exited

# A parent that forks a child, lets it exit and never reaps it: the child stays a zombie, as a cluster
# node (an orphan) does until the machine's init reaps it.
NEVER_REAPS = "import os, time\npid = os.fork()\nif pid == 0:\n    os._exit(0)\nprint(pid, flush=True)\ntime.sleep(60)"


def test_a_zombie_someone_else_must_reap_has_exited() -> None:
    parent = subprocess.Popen([sys.executable, "-c", NEVER_REAPS], stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout is not None
        child = psutil.Process(int(parent.stdout.readline()))
        wait_exited(child, 30)
        assert child.status() == psutil.STATUS_ZOMBIE
        with pytest.raises(psutil.TimeoutExpired):
            child.wait(0.2)  # psutil's wait (what `cluster down` used) waits for the reaping
    finally:
        parent.kill()
        parent.wait()


def test_our_own_child_is_reaped_and_a_running_process_times_out() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    process = psutil.Process(child.pid)
    with pytest.raises(psutil.TimeoutExpired):
        wait_exited(process, 0.2)
    child.kill()
    wait_exited(process, 30)
    with pytest.raises(ChildProcessError):
        os.waitpid(child.pid, os.WNOHANG)  # already reaped: no zombie left behind
