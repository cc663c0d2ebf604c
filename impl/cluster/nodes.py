"""One `pulsar-ref` node process (bookie, broker or standalone), run detached from its launcher.

A node lives in its own directory: `node.log` (stdout and stderr, appended across restarts) and
`node.pid`. The pidfile alone is not trusted: a pid counts as the node only while the process's
command line still equals the one recorded, so a reused pid is never signalled. Nodes run in a
session of their own, so they outlive the `cluster up` that started them; `die_with_parent`
asks Linux to SIGKILL them when the launching thread ends instead (test fixtures).
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from impl.process_exit import wait_exited

PR_SET_PDEATHSIG = 1


class NodeError(Exception):
    """A node process could not be started, found or signalled; the message says what to do."""


def _kill_me_when_parent_dies() -> None:
    """In the forked child, before exec: ask Linux for SIGKILL when the launching thread exits."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def port_accepts(port: int, timeout_s: float = 0.5) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout_s):
            return True
    except OSError:
        return False


@dataclass
class Node:
    """A node: `name` (bookie-1, broker-2, ...), its `role`, loopback `port`, directory and command."""

    name: str
    role: str
    port: int
    directory: Path
    command: list[str]
    die_with_parent: bool = False
    _process: subprocess.Popen[bytes] | None = field(default=None, repr=False, compare=False)

    @property
    def log_file(self) -> Path:
        return self.directory / "node.log"

    @property
    def pid_file(self) -> Path:
        return self.directory / "node.pid"

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def pid(self) -> int | None:
        """The running process's pid, or None (no pidfile, exited, zombie, or pid reused by another program)."""
        if self._process is not None:
            # Our own child: ask it directly (between fork and exec its command line is still ours).
            return self._process.pid if self._process.poll() is None else None
        try:
            pid = int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None
        try:
            process = psutil.Process(pid)
            if process.status() == psutil.STATUS_ZOMBIE or process.cmdline() != self.command:
                return None
        except psutil.Error:
            return None
        return pid

    def paused(self) -> bool:
        pid = self.pid()
        try:
            return pid is not None and psutil.Process(pid).status() == psutil.STATUS_STOPPED
        except psutil.Error:
            return False

    def launch(self) -> int:
        """Start the process in the background; returns the log offset where its output begins."""
        if (pid := self.pid()) is not None:
            raise NodeError(f"{self.name} is already running (pid {pid}); stop or kill it first")
        self.directory.mkdir(parents=True, exist_ok=True)
        offset = self.log_file.stat().st_size if self.log_file.exists() else 0
        # PDEATHSIG fires when the launching *thread* exits, so only the main thread may ask for it.
        die = self.die_with_parent and threading.current_thread() is threading.main_thread()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        with open(self.log_file, "ab") as log:
            log.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%S')} launching: {' '.join(self.command)}\n".encode())
            log.flush()
            process = subprocess.Popen(
                self.command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                start_new_session=True,
                env=env,
                preexec_fn=_kill_me_when_parent_dies if die else None,
            )
        self.pid_file.write_text(f"{process.pid}\n")
        self._process = process
        # Reap the child when it exits so a killed node does not linger as a zombie of ours.
        threading.Thread(target=process.wait, name=f"reap-{self.name}", daemon=True).start()
        return offset

    def wait_listening(self, log_offset: int, timeout_s: float) -> None:
        """Wait for the node's `... listening` line (written after `log_offset`) and its port to accept."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.pid() is None:
                raise NodeError(
                    f"{self.name} exited during start-up (port {self.port} taken? metadata store down?). "
                    f"Log tail ({self.log_file}):\n{self.log_tail()}"
                )
            if "listening" in self.log_since(log_offset) and port_accepts(self.port):
                return
            time.sleep(0.1)
        raise NodeError(
            f"{self.name} did not report listening on {self.address} within {timeout_s:.0f}s. "
            f"Log tail ({self.log_file}):\n{self.log_tail()}"
        )

    def log_since(self, offset: int) -> str:
        try:
            with open(self.log_file, "rb") as f:
                f.seek(offset)
                return f.read(64 * 1024).decode(errors="replace")
        except OSError:
            return ""

    def signal(self, sig: signal.Signals) -> int:
        pid = self.pid()
        if pid is None:
            raise NodeError(f"{self.name} is not running; start it with `pulsar-ref cluster restart ... {self.name}`")
        os.kill(pid, sig)
        return pid

    def kill(self) -> int | None:
        """SIGKILL (a crash: no clean shutdown); returns the pid killed, None if it was not running."""
        pid = self.pid()
        self._process = None
        if pid is not None:
            with contextlib.suppress(psutil.Error):
                process = psutil.Process(pid)
                process.kill()
                wait_exited(process, 10)
        self.pid_file.unlink(missing_ok=True)
        return pid

    def unrecorded_pid(self) -> int | None:
        """A live process running exactly this node's command that no pidfile names: its launcher was
        killed between starting it and writing the pidfile. Its command (ports included) is unique to
        this node, so stopping it is safe."""
        for process in psutil.process_iter(["cmdline", "status"]):
            with contextlib.suppress(psutil.Error):
                if process.info["status"] != psutil.STATUS_ZOMBIE and process.info["cmdline"] == self.command:
                    return int(process.pid)
        return None

    def stop(self, timeout_s: float = 10.0) -> int | None:
        """Graceful stop: SIGCONT (it may be paused), SIGTERM, then SIGKILL after `timeout_s`."""
        pid = self.pid()
        if pid is None:
            pid = self.unrecorded_pid()
        self._process = None
        if pid is not None:
            with contextlib.suppress(psutil.Error):
                process = psutil.Process(pid)
                process.send_signal(signal.SIGCONT)
                process.terminate()
                try:
                    wait_exited(process, timeout_s)
                except psutil.TimeoutExpired:
                    process.kill()
                    wait_exited(process, 10)
        self.pid_file.unlink(missing_ok=True)
        return pid

    def healthy(self) -> bool:
        return self.pid() is not None and not self.paused() and port_accepts(self.port)

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "".join(self.log_file.read_text(errors="replace").splitlines(keepends=True)[-lines:])
        except OSError:
            return "(no log written)"


def pulsar_ref_command(*args: str) -> list[str]:
    """The command line of a `pulsar-ref` subcommand run by this interpreter (works without the script on PATH)."""
    return [sys.executable, "-m", "pulsar_ref.cli", *args]
