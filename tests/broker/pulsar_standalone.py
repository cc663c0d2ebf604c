"""A real `pulsar-ref standalone` process for tests that talk Pulsar's protocol to it."""

from __future__ import annotations

import re
import subprocess
import warnings
from collections.abc import Iterator
from pathlib import Path

import pytest

from impl.broker.web.admin_client import AdminClient

__all__ = ["ROOT", "Standalone", "running_standalone"]
from tests.processes import ROOT, start_listening

SHUTDOWN_BOUND_S = 15.0  # below the harness's wait; a clean stop takes well under a second


class Standalone:
    def __init__(self, data: Path, *options: str) -> None:
        """`options`: more `pulsar-ref standalone` arguments."""
        # Its own stop is bounded below the harness's wait, so a stop that hangs halts with a thread dump
        # in the log (impl/shutdown.py) rather than dying silently by SIGKILL.
        bound = () if "--shutdown-timeout" in options else ("--shutdown-timeout", str(SHUTDOWN_BOUND_S))
        self.log = data.with_name(data.name + ".stderr")
        with self.log.open("w") as log:
            self.proc, self.broker_address, banner = start_listening(
                ["standalone", "--data", str(data), "--port", "0", "--web-port", "0", *_tls_ports(options)]
                + [*bound, *options],
                stderr=log,
            )
        found = re.search(r"Pulsar clients: (pulsar://\S+);", banner)
        web = re.search(r"web service [^:]*: (http://\S+);", banner)
        assert found and web, banner
        self.url = found.group(1)
        self.web_url = web.group(1)
        tls = re.search(r"TLS: (pulsar\+ssl://[^\s,]+), (https://[^\s;]+)", banner)
        self.tls_url, self.web_tls_url = (tls.group(1), tls.group(2)) if tls else ("", "")
        secure = re.search(r"super-user token ([^\s;]+); trust certs (\S+)", banner)  # --secure
        self.token_file, self.trust_file = (Path(secure.group(1)), Path(secure.group(2))) if secure else (None, None)
        self.admin = AdminClient(self.web_url, timeout_s=20)

    def stop(self) -> None:
        if self.proc.poll() is not None:
            return  # the test stopped or killed it itself
        self.proc.terminate()
        try:
            code = self.proc.wait(SHUTDOWN_BOUND_S + 10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            code = self.proc.wait()
        if code != 0:  # the test passed or failed already; this says why its teardown took long
            tail = self.log.read_text(errors="replace")[-6000:]
            warnings.warn(f"the standalone's stop ended with exit code {code}; its stderr ends:\n{tail}", stacklevel=2)


def _tls_ports(options: tuple[str, ...]) -> list[str]:
    """Any free ports for TLS, when it is on (never Pulsar's defaults, which another test may hold)."""
    return ["--tls-port", "0", "--web-tls-port", "0"] if "--tls-cert-file" in options or "--secure" in options else []


def running_standalone(tmp_path_factory: pytest.TempPathFactory, *options: str) -> Iterator[Standalone]:
    """For a module's fixture: one standalone process (`options`: more arguments), stopped afterwards."""
    s = Standalone(tmp_path_factory.mktemp("pulsar-standalone"), *options)
    try:
        yield s
    finally:
        s.stop()
