"""The SparkSession the audit runs on: local Spark bound to loopback, UI off, quiet, modest shuffles."""

from __future__ import annotations

import os
from typing import Any

_session: Any = None


def spark_session(master: str | None = None, shuffle_partitions: int = 8) -> Any:
    global _session
    if _session is not None:
        return _session
    from pyspark.sql import SparkSession

    master = master or os.environ.get("PULSAR_REF_SPARK_MASTER") or "local[*]"
    builder = SparkSession.builder.appName("pulsar-ref-audit").master(master)
    if master.startswith("local"):
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    builder = (
        builder.config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.adaptive.enabled", "true")
        .config("spark.driver.memory", os.environ.get("PULSAR_REF_SPARK_DRIVER_MEMORY", "2g"))
        .config("spark.ui.showConsoleProgress", "true")
    )
    _session = builder.getOrCreate()
    _session.sparkContext.setLogLevel("ERROR")
    return _session


def stop_session() -> None:
    global _session
    if _session is not None:
        _session.stop()
        _session = None
