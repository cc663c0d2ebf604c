"""Bounded shutdown: a component told to stop halts if its graceful stop takes too long.

Pulsar's broker waits `brokerShutdownTimeoutMs` (default 60 s) for its graceful shutdown and then
halts the JVM. A graceful stop here talks to the metadata store and the bookies (unregister, close
cursors and ledgers, release bundles); each call has its own deadline, but a stop makes many of them,
so with ZooKeeper dead or stopped the sum is unbounded in practice. `halt_after` puts one bound on the
whole: it is armed when the stop begins, and ends the process with `HALT_EXIT_CODE` when the bound
passes. Nothing acknowledged is lost by halting: a halt is a crash, which every component survives.
"""

from __future__ import annotations

import faulthandler
import os
import sys
import threading

DEFAULT_SHUTDOWN_TIMEOUT_S = 60.0  # brokerShutdownTimeoutMs
HALT_EXIT_CODE = 3


def halt_after(timeout_s: float, what: str) -> threading.Thread:
    """Arm the bound: if the process still runs `timeout_s` seconds from now, say so and halt it."""

    def halt() -> None:
        print(
            f"{what}: graceful shutdown did not finish within {timeout_s:g} s (--shutdown-timeout); halting. "
            "Where each thread was:",
            file=sys.stderr,
            flush=True,
        )
        # What held the stop, for the operator (a JVM's thread dump): a halt is otherwise silent about it.
        faulthandler.dump_traceback(file=sys.stderr, all_threads=True)
        os._exit(HALT_EXIT_CODE)

    timer = threading.Timer(timeout_s, halt)
    timer.daemon = True
    timer.name = "shutdown-bound"
    timer.start()
    return timer


def add_argument(parser: object) -> None:
    """The `--shutdown-timeout SECONDS` option of every long-running command."""
    import argparse

    assert isinstance(parser, argparse.ArgumentParser)
    parser.add_argument(
        "--shutdown-timeout",
        type=_positive,
        default=DEFAULT_SHUTDOWN_TIMEOUT_S,
        metavar="SECONDS",
        help=f"after SIGTERM, halt if the graceful stop takes longer (Pulsar's brokerShutdownTimeoutMs; default "
        f"{DEFAULT_SHUTDOWN_TIMEOUT_S:g}; exit code {HALT_EXIT_CODE})",
    )


def _positive(text: str) -> float:
    import argparse

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be > 0 seconds, not {text!r}")
    return value
