"""Helpers for tests that run `pulsar-ref cluster` as real processes on loopback."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

REPO = Path(__file__).resolve().parents[2]


def pulsar_ref(*args: str, timeout: float = 180) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "pulsar_ref.cli", *args], capture_output=True, text=True, timeout=timeout, cwd=REPO
    )


def processes_under(directory: Path | str) -> list[psutil.Process]:
    """Every live process whose command line mentions `directory` (ZooKeeper's config, a node's data dir)."""
    found = []
    for p in psutil.process_iter(["cmdline", "status"]):
        try:
            if p.info["status"] != psutil.STATUS_ZOMBIE and any(str(directory) in a for a in p.info["cmdline"] or []):
                found.append(p)
        except psutil.Error:
            continue
    return found


def processes_of(directory: Path) -> list[psutil.Process]:
    """Every live process of the cluster in `directory`: those naming the directory, and those naming its
    metadata store (brokers and proxies are started with its URL only)."""
    found = processes_under(directory)
    try:
        metadata = state(directory)["metadata"]
    except (OSError, ValueError, KeyError):
        return found
    return (
        found + [p for p in processes_under(Path(metadata)) if p not in found]
        if metadata.startswith("zk://")
        else found
    )


def state(directory: Path) -> dict:
    return json.loads((directory / "cluster.json").read_text())


def free_port_block(size: int) -> int:
    """A first port P such that P .. P+size-1 were all free on 127.0.0.1 a moment ago."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            base = s.getsockname()[1]
        if base + size > 65535:
            continue
        ok = True
        for port in range(base, base + size):
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))
                except OSError:
                    ok = False
                    break
        if ok:
            return base
    raise RuntimeError("no block of free ports found")


@pytest.fixture
def cluster_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory for one cluster; whatever runs from it is stopped afterwards, even if the test failed."""
    directory = (tmp_path / "cluster").resolve()
    try:
        yield directory
    finally:
        if (directory / "cluster.json").exists():
            pulsar_ref("cluster", "down", "--dir", str(directory), timeout=120)
        for p in processes_of(directory):  # belt and braces: the test must leave nothing behind
            p.kill()
