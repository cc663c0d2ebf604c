"""impl/shutdown.halt_after: past the bound the process halts, and says where each thread was."""

from __future__ import annotations

import subprocess
import sys
import textwrap

from impl.shutdown import HALT_EXIT_CODE
from tests.processes import ROOT

# A process whose "graceful stop" never ends: its main thread waits on an event nothing sets.
HUNG_STOP = textwrap.dedent(
    """
    import threading
    from impl.shutdown import halt_after

    def close_the_ledgers_forever():
        threading.Event().wait()

    halt_after(0.3, "broker")
    close_the_ledgers_forever()
    """
)


def test_a_stop_past_the_bound_halts_with_each_threads_stack() -> None:
    done = subprocess.run(
        [sys.executable, "-c", HUNG_STOP], cwd=ROOT, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == HALT_EXIT_CODE, done
    assert "broker: graceful shutdown did not finish within 0.3 s (--shutdown-timeout); halting" in done.stderr
    # The dump names the function the stop was stuck in, on the main thread, and the halting timer's thread.
    assert "close_the_ledgers_forever" in done.stderr, done.stderr
    assert "halt" in done.stderr.split("Where each thread was:")[1], done.stderr
