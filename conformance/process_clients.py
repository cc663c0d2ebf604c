"""The client processes of a real-process run: `python -m conformance.process_clients writer|recover`.

conformance/process_runs.py starts one of each per run and speaks to them by lines:

- the writer creates a ledger through the BookKeeper client (prints `ledger ID`), waits for `go`,
  adds its entries (pausing after `--fence-after` of them for another `go`) and prints the outcome
  of every add;
- the recovery client prints `ready`, reads `LEDGER DELAY`, waits DELAY seconds, opens the ledger
  with recovery and prints how that ended.

Each records its cores' events in its own trace file (impl/trace.py's `TraceFile`), the tracer its
BookKeeper client hands to every writer and recovery op it creates.
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from typing import Any

PASSWORD = b"process-traces"


def _writer(args: argparse.Namespace) -> int:
    from impl.bookie.client.connect import connect_bookkeeper
    from impl.bookie.client.errors import LedgerClientError
    from impl.metadata.url import connect
    from impl.trace import TraceFile

    e, qw, qa = (int(x) for x in args.quorums.split(","))
    rng = random.Random(args.seed)
    store = connect(args.metadata)
    recorder = TraceFile(args.trace, role="writer")
    client = connect_bookkeeper(store, seed=args.seed, tracer=recorder)
    outcomes: list[str] = []
    try:
        handle = client.create_ledger(e, qw, qa, password=PASSWORD)
        recorder.write("LedgerCreated", {"ledger": handle.ledger_id, "ensemble": list(handle.metadata.last_ensemble)})
        print(f"ledger {handle.ledger_id}", flush=True)
        sys.stdin.readline()  # go
        futures: list[Any] = []
        for i in range(args.entries):
            if i == args.fence_after:
                _settle(futures, outcomes, LedgerClientError)
                print("paused", flush=True)
                sys.stdin.readline()  # go on, after the recovery
            futures.append(handle.add_async(b"entry %d" % i))
            if args.fence_after < 0:
                time.sleep(rng.uniform(0, 0.04))
        _settle(futures, outcomes, LedgerClientError)
    finally:
        client.close()
        store.close()
        recorder.close()
    print("adds " + " ".join(outcomes), flush=True)
    return 0


def _settle(futures: list[Any], outcomes: list[str], errors: type[Exception]) -> None:
    for f in futures:
        try:
            outcomes.append(str(f.result(timeout=30)))
        except errors as exc:
            outcomes.append(type(exc).__name__)
    futures.clear()


def _recover(args: argparse.Namespace) -> int:
    from impl.bookie.client.connect import connect_bookkeeper
    from impl.bookie.client.errors import LedgerClientError
    from impl.metadata.url import connect
    from impl.trace import TraceFile

    store = connect(args.metadata)
    recorder = TraceFile(args.trace, role="recovery")
    client = connect_bookkeeper(store, seed=args.seed, tracer=recorder)
    try:
        print("ready", flush=True)
        ledger, delay = sys.stdin.readline().split()
        time.sleep(float(delay))
        try:
            handle = client.open_ledger(int(ledger), PASSWORD, recovery=True)
            outcome = f"closed last entry {handle.metadata.last_entry_id}"
        except LedgerClientError as exc:
            outcome = f"failed: {exc}"
    finally:
        client.close()
        store.close()
        recorder.close()
    print(f"recovery {outcome}", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m conformance.process_clients",
        description="A client process of a real-process trace-validation run (started by validate_process_runs).",
    )
    sub = parser.add_subparsers(dest="role", required=True)
    for role in ("writer", "recover"):
        p = sub.add_parser(role)
        p.add_argument("--metadata", required=True)
        p.add_argument("--trace", required=True, help="the TraceFile to append to")
        p.add_argument("--seed", type=int, default=0)
        if role == "writer":
            p.add_argument("--quorums", default="3,3,2", help="E,Qw,Qa")
            p.add_argument("--entries", type=int, default=3)
            p.add_argument("--fence-after", type=int, default=-1, help="pause after this many adds (-1: never)")
    args = parser.parse_args(argv)
    return _writer(args) if args.role == "writer" else _recover(args)


if __name__ == "__main__":
    sys.exit(main())
