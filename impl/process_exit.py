"""Waiting for another process to end, without waiting for its reaping.

A node started by an earlier `pulsar-ref cluster up` is an orphan: when it exits, its zombie waits for
init to reap it, and some machines' init reaps only every ~2 s. psutil's `wait` waits for the reaping,
so stopping a cluster of 8 nodes took ~16 s where the nodes themselves took well under one second
each. A zombie has exited (its ports and files are closed, it runs nothing), so it counts as ended.
"""

from __future__ import annotations

import os
import time

import psutil


def wait_exited(process: psutil.Process, timeout_s: float) -> None:
    """Return once `process` has exited (gone, or a zombie; our own child is reaped here); raise
    psutil.TimeoutExpired if it still runs after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    delay = 0.001
    while True:
        try:
            if os.waitpid(process.pid, os.WNOHANG)[0] == process.pid:
                return  # our own child, reaped now
        except ChildProcessError:
            pass  # not our child: init reaps it
        try:
            if process.status() == psutil.STATUS_ZOMBIE:
                return
        except psutil.NoSuchProcess:
            return
        if time.monotonic() >= deadline:
            raise psutil.TimeoutExpired(timeout_s, pid=process.pid)
        time.sleep(delay)
        delay = min(delay * 2, 0.02)
