"""A real `pulsar-ref standalone` process for tests that talk Pulsar's protocol to it."""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from impl.broker.web.admin_client import AdminClient

__all__ = ["ROOT", "Standalone", "running_standalone"]
from tests.processes import ROOT, start_listening


class Standalone:
    def __init__(self, data: Path, *options: str) -> None:
        """`options`: more `pulsar-ref standalone` arguments."""
        self.proc, self.grpc_address, banner = start_listening(
            ["standalone", "--data", str(data), "--pulsar-port", "0", "--web-port", "0", *options]
        )
        found = re.search(r"Pulsar clients: (pulsar://\S+);", banner)
        web = re.search(r"web service [^:]*: (http://\S+);", banner)
        assert found and web, banner
        self.url = found.group(1)
        self.web_url = web.group(1)
        self.admin = AdminClient(self.web_url, timeout_s=20)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def running_standalone(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Standalone]:
    """For a module's fixture: one standalone process, stopped afterwards."""
    s = Standalone(tmp_path_factory.mktemp("pulsar-standalone"))
    try:
        yield s
    finally:
        s.stop()
