"""Kill every process of a test suite once the suite ends (tests/leftovers.py starts this).

Usage: reaper.py SUITE_PID TOKEN. Its stdin is a pipe from the suite: end of file, or the suite's pid gone, means
the suite ended, however it ended. Then every process whose environment holds PULSAR_REF_TEST_SUITE=TOKEN gets
SIGKILL, in rounds, until a round finds none (a dying supervisor may start something on its way out)."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import time
from pathlib import Path


def marked(token: str) -> list[int]:
    needle = f"PULSAR_REF_TEST_SUITE={token}\0".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if needle in (entry / "environ").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                pass
    return found


def alive(pid: int) -> bool:
    try:
        stat = (Path("/proc") / str(pid) / "stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")  # a zombie has ended


def main(suite_pid: int, token: str) -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a ^C to the terminal's group is the suite's, not ours
    while alive(suite_pid):
        ready, _, _ = select.select([sys.stdin], [], [], 1.0)
        if ready and not os.read(sys.stdin.fileno(), 4096):
            break  # end of file: the suite closed the pipe or died
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        pids = [p for p in marked(token) if p != os.getpid()]
        if not pids:
            return
        for p in pids:
            with contextlib.suppress(OSError):
                os.kill(p, signal.SIGKILL)
        time.sleep(0.2)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
