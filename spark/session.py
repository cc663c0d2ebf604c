"""The SparkSession the audit runs on: local Spark bound to loopback, UI off, quiet, modest shuffles."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

_session: Any = None
# Below this much input (~200,000 events of JSON Lines) a local audit is dominated by the fixed cost of code
# generation and JIT for its ~20 stages: the C1-only JIT compiles that code far more cheaply (measured 31 vs
# ~50 CPU s for 20,000 events), while at a million events the C2 JIT's faster code wins (bench/history/audit.md).
SMALL_INPUT_BYTES = 32 * 2**20


def input_bytes(paths: Sequence[str]) -> int:
    """Total size of the histories (a Parquet directory counts its files)."""
    total = 0
    for path in map(Path, paths):
        if path.is_dir():
            total += sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
        elif path.exists():
            total += path.stat().st_size
    return total


def spark_session(
    master: str | None = None,
    shuffle_partitions: int = 8,
    input_size: int | None = None,
    record_classes: str | None = None,
) -> Any:
    """The one session of this process; `input_size` (bytes to audit) tunes a new local JVM for small inputs.

    A local JVM maps the class archive of spark/classes.py if one was recorded; `record_classes` (a path)
    records one instead, written when the JVM exits.
    """
    global _session
    if _session is not None:
        return _session
    from pyspark.sql import SparkSession

    from spark.jvm import QUIET, java_options

    master = master or os.environ.get("PULSAR_REF_SPARK_MASTER") or "local[*]"
    builder = SparkSession.builder.appName("pulsar-ref-audit").master(master)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
        java = [f"-XX:ArchiveClassesAtExit={record_classes}", *QUIET] if record_classes else java_options()
        if input_size is not None and input_size < SMALL_INPUT_BYTES:
            java.append("-XX:TieredStopAtLevel=1")
            shuffle_partitions = min(shuffle_partitions, 2)  # a task per core: fewer, cheaper stages
            # Interpreted expressions too: no Janino compilation of generated code for a few thousand rows
            # (20,000 events: 19.6 -> 15.4 CPU s for the whole command), and no adaptive re-planning between
            # the stages of a query (the screen of 20,000 events: 5.6-6.3 against 6.9-7.1 s in one noisy A/B).
            builder = (
                builder.config("spark.sql.codegen.wholeStage", "false")
                .config("spark.sql.codegen.factoryMode", "NO_CODEGEN")
                .config("spark.sql.adaptive.enabled", "false")
            )
        if java:
            builder = builder.config("spark.driver.extraJavaOptions", " ".join(java))
    builder = (
        builder.config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        # The screen caches the parsed events and the operations once and reads them several times: building
        # uncompressed column batches is cheaper (10M events: 163-167 against 184 CPU s), and fits in 2 GB.
        .config("spark.sql.inMemoryColumnarStorage.compressed", "false")
        .config("spark.driver.memory", os.environ.get("PULSAR_REF_SPARK_DRIVER_MEMORY", "2g"))
        .config("spark.ui.showConsoleProgress", "true")
    )
    _session = builder.getOrCreate()
    _session.sparkContext.setLogLevel("ERROR")
    return _session


def cancel_jobs() -> bool:
    """Cancel what the session runs (an audit whose input turned out unusable); False if there is no session."""
    if _session is None:
        return False
    _session.sparkContext.cancelAllJobs()
    return True


def stop_session() -> None:
    global _session
    if _session is not None:
        _session.stop()
        _session = None
