"""Start a real `pulsar-ref bookie` process for tests and wait until it listens."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

from tests.processes import start_listening


class BookieProcess:
    def __init__(self, data: Path, metadata: str, *options: str) -> None:
        """`options`: more `pulsar-ref bookie` arguments (e.g. "--checkpoint-interval", "0.1", "--port", "P")."""
        args = ["bookie", "--metadata", metadata, "--data", str(data), *options]
        self.proc, self.address, self.banner = start_listening(args, stderr=subprocess.PIPE)
        # banner: "bookie ADDRESS listening; replayed N journal records from checkpoint ..."
        self.port = int(self.address.rsplit(":", 1)[1])

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
