"""The processes of a real-process run: bookies with trace files, and the child processes of a run.

`ProcessCluster` starts three `pulsar-ref bookie --trace FILE` processes on 127.0.0.1 over an
embedded metadata store, can SIGKILL and restart one of them on its address and data, and stops
them; `ChildProcess` runs one Python child spoken to by lines on stdin and stdout (a bookie, or a
client of conformance/process_clients.py), always stopped in the end.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from conformance.trace_files import read_log

ROOT = Path(__file__).resolve().parents[1]


class ChildProcess:
    """A child process spoken to by lines on stdin/stdout, always stopped by `stop`."""

    def __init__(self, args: list[str], stderr: Path) -> None:
        self._stderr: IO[str] = open(stderr, "w")  # noqa: SIM115 (closed by stop())
        self.stderr_path = stderr
        self.proc = subprocess.Popen(
            [sys.executable, *args], cwd=ROOT, text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._stderr,
        )  # fmt: skip
        self._lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._read, name="process-stdout", daemon=True).start()

    def line(self, timeout: float, what: str) -> str:
        """The next stdout line; the process's stderr in the error if it ends or stalls first."""
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            line = None
        if line is None:
            self.stop()
            raise RuntimeError(f"{what}: no answer; stderr: {self.stderr_path.read_text()[-2000:]}")
        return line.strip()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        with contextlib.suppress(OSError, ValueError):
            for line in self.proc.stdout:
                self._lines.put(line)
        self._lines.put(None)

    def tell(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            self.stop()

    def stop(self, sig: int = signal.SIGKILL) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()
        self._stderr.close()


class ProcessCluster:
    """Three `pulsar-ref bookie --trace` processes over an embedded metadata store in `directory`."""

    def __init__(self, directory: Path, bookies: int = 3) -> None:
        self.directory = directory
        self.metadata = f"embedded://{directory / 'meta'}"
        self.bookies: dict[str, ChildProcess] = {}
        self.names: dict[str, str] = {}  # address -> spec name
        try:
            for i in range(1, bookies + 1):
                self._start(f"b{i}")
        except BaseException:
            self.stop()
            raise

    def _start(self, name: str, port: int = 0) -> None:
        args = [
            "-m", "pulsar_ref.cli", "bookie", "--metadata", self.metadata,
            "--data", str(self.directory / name), "--trace", str(self.log(name)), "--port", str(port),
            "--gc-interval", "0", "--checkpoint-interval", "3600",
        ]  # fmt: skip
        proc = ChildProcess(args, self.directory / f"{name}.stderr")
        self.bookies[name] = proc
        banner = proc.line(60, f"bookie {name} start")
        if "listening" not in banner:
            raise RuntimeError(f"bookie {name} did not start: {banner!r}")
        self.names[banner.split()[1]] = name

    def restart(self, name: str) -> int:
        """SIGKILL bookie `name` and start it again on its address and data; returns the line of its
        trace file where the new process begins (its `TraceFileOpened`). The restart waits for the
        killed process's metadata session to expire (about 10 s), which holds its registration."""
        from impl.metadata.registry import BookieRegistry
        from impl.metadata.url import connect

        address = next(a for a, n in self.names.items() if n == name)
        self.bookies[name].stop(signal.SIGKILL)
        boundary = len(read_log(self.log(name)))
        store = connect(self.metadata)
        try:
            registry = BookieRegistry(store)
            deadline = time.monotonic() + 60
            while address in registry.membership().writable:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"bookie {name}'s registration outlived its session by a minute")
                time.sleep(0.5)
        finally:
            store.close()
        self._start(name, int(address.rsplit(":", 1)[1]))
        return boundary

    def log(self, bookie: str) -> Path:
        return self.directory / f"{bookie}.trace.jsonl"

    def stop(self) -> None:
        """SIGTERM (graceful) every bookie, SIGKILL any that does not stop."""
        for proc in self.bookies.values():
            proc.stop(signal.SIGTERM)

    def __enter__(self) -> ProcessCluster:
        return self

    def __exit__(self, *_: object) -> None:
        self.stop()


@contextlib.contextmanager
def process_cluster(directory: Path | None = None) -> Iterator[ProcessCluster]:
    """A ProcessCluster in `directory` (default: a temporary one, removed afterwards)."""
    with contextlib.ExitStack() as stack:
        if directory is None:
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="process-traces-")))
        cluster = stack.enter_context(ProcessCluster(directory))
        yield cluster
