"""Start a real `pulsar-ref bookie` process for tests and wait until it listens."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path


class BookieProcess:
    def __init__(self, data: Path, metadata: str, *options: str) -> None:
        """`options`: more `pulsar-ref bookie` arguments (e.g. "--checkpoint-interval", "0.1")."""
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "pulsar_ref.cli", "bookie", "--metadata", metadata, "--data", str(data), *options],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=Path(__file__).resolve().parents[2],
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if "listening" not in line:
            self.proc.kill()
            raise RuntimeError(f"bookie did not start: {line!r} {self.proc.stderr.read() if self.proc.stderr else ''}")
        self.address = line.split()[1]
        self.banner = line  # "bookie ADDRESS listening; replayed N journal records from checkpoint ..."

    @property
    def replayed(self) -> int:
        return int(self.banner.split("replayed ")[1].split()[0])

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def terminate(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(30)

    def ensure_stopped(self) -> None:
        if self.proc.poll() is None:
            self.kill()
