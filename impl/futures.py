"""A future settled by a callback: the I/O shells' callback APIs offer `..._async` twins this way."""

from __future__ import annotations

from concurrent.futures import Future
from typing import TypeVar

T = TypeVar("T")


def settle(future: Future[T], outcome: T | BaseException) -> None:
    """Complete `future` with `outcome`: an exception instance fails it, anything else is its result."""
    if isinstance(outcome, BaseException):
        future.set_exception(outcome)
    else:
        future.set_result(outcome)
