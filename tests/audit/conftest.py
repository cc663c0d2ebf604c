"""One local SparkSession for the whole test session (loopback, UI off), always stopped."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    from spark.session import spark_session, stop_session

    session = spark_session("local[2]", shuffle_partitions=4)
    try:
        yield session
    finally:
        stop_session()
