"""The class archive of the local Spark JVM: Spark's classes loaded once, mapped by every later audit.

A local audit of a small history is mostly a cold JVM: loading, verifying and interpreting Spark's classes
(bench/history/audit.md: of ~13 s for 20,000 events, ~4 s is the session start and most of the rest the first
queries). Java's application class-data sharing records the classes a JVM loaded, parsed and verified, into a
file at its exit (a dynamic CDS archive, `-XX:ArchiveClassesAtExit`); a later JVM maps that file
(`-XX:SharedArchiveFile`) instead of loading them again.

`make setup` records the archive once (`python -m spark.classes`) by auditing a small generated history with an
anomaly, so that the screen and the exact job both load their classes. Without an archive an audit runs as
before, only slower to start.

An archive belongs to one JDK and one Spark install, and its file name carries both. A JVM quietly ignores an
archive of another JDK or classpath, but a truncated one crashes it: a new archive is recorded under a temporary
name, checked by starting a JVM on it, and only then renamed into place.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from spark import child_env
from spark.jvm import QUIET, _java, archive_path


class ArchiveError(Exception):
    """The archive could not be recorded; the message says why."""


def _check(archive: Path) -> None:
    """Start a JVM on `archive`: a broken file crashes it (a good one for another classpath is just unused)."""
    java = _java()
    assert java is not None
    with tempfile.TemporaryDirectory() as crash_dir:  # where a crashing JVM writes its hs_err file
        run = subprocess.run(
            [str(java), f"-XX:SharedArchiveFile={archive}", *QUIET, "-XX:-CreateCoredumpOnCrash", "-version"],
            capture_output=True,
            cwd=crash_dir,
        )
    if run.returncode != 0:
        raise ArchiveError(f"a JVM started on the new archive exited with status {run.returncode}")


def record(force: bool = False) -> Path:
    """Record the archive (in a child process, whose JVM writes it at exit) unless it exists; return its path."""
    path = archive_path()
    if path is None:
        raise ArchiveError("no java found (set JAVA_HOME or put java on PATH)")
    if path.is_file() and not force:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.stem}.{os.getpid()}.recording")  # the JVM creates it at exit
    try:
        child = subprocess.run(
            [sys.executable, "-m", "spark.classes", "--child", str(tmp)],
            env=child_env(),
            capture_output=True,
            text=True,
        )
        if child.returncode != 0 or not tmp.is_file() or tmp.stat().st_size == 0:
            tail = "\n".join(child.stderr.strip().splitlines()[-5:])
            raise ArchiveError(f"recording failed (status {child.returncode}): {tail}")
        _check(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _child(out: str) -> int:
    """Audit a small history with one anomaly in a JVM that archives its classes to `out` when it exits."""
    import random

    from pyspark import SparkContext

    from spark.audit import audit
    from spark.generate import generate, inject, write_jsonl
    from spark.session import spark_session, stop_session

    events = generate(seed=1, ops=400, processes=8, topics=3)
    injected = inject(events, "lost-write", random.Random(1))
    if injected is None:
        raise ArchiveError("the generated history has no acknowledged append to lose")
    with tempfile.TemporaryDirectory() as tmp:
        history = str(Path(tmp) / "history.jsonl")
        write_jsonl(injected[0], history)
        spark_session(input_size=Path(history).stat().st_size, record_classes=out)
        [audited] = audit([history])
        if audited.report.valid:
            raise ArchiveError("the recording audit missed its injected lost write")
    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    stop_session()
    if gateway is None or proc is None:
        return 1
    # The JVM writes the archive as it exits, which it does when its stdin (our pipe) closes.
    gateway.shutdown()
    proc.stdin.close()
    return 0 if proc.wait(timeout=300) == 0 else 1


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m spark.classes",
        description="Record the class archive that makes local Spark audits start faster (once per JDK and "
        "Spark install; `make setup` runs this).",
    )
    p.add_argument("--force", action="store_true", help="record again even if the archive exists")
    p.add_argument("--where", action="store_true", help="print where the archive is (or would be) and exit")
    p.add_argument("--child", metavar="OUT", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.child:
        return _child(args.child)
    if args.where:
        print(archive_path() or "no java found")
        return 0
    path = archive_path()
    if path is not None and path.is_file() and not args.force:
        print(f"class archive: {path} (exists)")
        return 0
    print("recording the Spark class archive (once, ~30 s) ...", file=sys.stderr, flush=True)
    try:
        path = record(force=args.force)
    except ArchiveError as e:
        print(
            f"python -m spark.classes: {e}\n(audits still work without the archive, only slower to start)",
            file=sys.stderr,
        )
        return 1
    print(f"class archive: {path} ({path.stat().st_size // 2**20} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
