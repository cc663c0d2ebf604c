"""A BookieTransport over any blocking per-request call (e.g. a unary gRPC stub), on a thread pool.

`call(bookie, request, timeout_s)` performs one request and returns the bookie's
response; it raises TimeoutError (or any OSError / connection error) when the bookie
does not answer in time. Either way the cores get exactly one answer per request:
the response, or None for "no answer" (which the writer treats as a bookie failure
and recovery as an unknown bookie). The gRPC channel of impl/bookie plugs in as `call`.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from impl.bookie.protocol import Request, Response
from impl.metadata.ledger import BookieId

log = logging.getLogger(__name__)

BookieCall = Callable[[BookieId, Request, float], Response]


class ThreadedTransport:
    def __init__(self, call: BookieCall, *, timeout_s: float = 5.0, max_workers: int = 32) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self.call = call
        self.timeout_s = timeout_s
        self._pool = ThreadPoolExecutor(max_workers=max_workers, thread_name_prefix="bookie-transport")

    def send(self, bookie: BookieId, request: Any, on_answer: Callable[[Any], None]) -> None:
        self._pool.submit(self._run, bookie, request, on_answer)

    def _run(self, bookie: BookieId, request: Request, on_answer: Callable[[Any], None]) -> None:
        response: Response | None
        try:
            response = self.call(bookie, request, self.timeout_s)
        except (TimeoutError, OSError, ConnectionError) as e:
            log.debug("no answer from bookie %s to %s: %s", bookie, type(request).__name__, e)
            response = None
        try:
            on_answer(response)
        except Exception:
            # A failing callback is a bug in a shell; log it loudly rather than lose it in the pool.
            log.exception("answer handler failed for %s from bookie %s", type(request).__name__, bookie)
            raise

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)

    def __enter__(self) -> ThreadedTransport:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
