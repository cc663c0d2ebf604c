"""Start real `pulsar-ref` processes in tests and wait until they listen.

Every server command prints one line on stdout once it serves, "<role> ADDRESS listening ...";
the tests read that line to learn the address (ports are chosen by the server: 0 = any free).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parents[1]


def start_listening(
    args: list[str], stderr: IO[str] | int = subprocess.DEVNULL
) -> tuple[subprocess.Popen[str], str, str]:
    """Run `pulsar-ref ARGS`; returns (process, address, banner line). Raises RuntimeError
    (after killing the process) if it exits or prints anything else first."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "pulsar_ref.cli", *args],
        stdout=subprocess.PIPE, stderr=stderr, text=True, cwd=ROOT,
    )  # fmt: skip
    assert proc.stdout is not None
    line = proc.stdout.readline()
    if "listening" not in line:
        proc.kill()
        proc.wait()
        errors = proc.stderr.read() if proc.stderr is not None else ""
        raise RuntimeError(f"`pulsar-ref {' '.join(args)}` did not start: {line!r} {errors}")
    return proc, line.split()[1], line
