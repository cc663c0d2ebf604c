"""Benchmark of the Spark audit (issue 9): events/s, peak memory and growth with size.

Generates valid histories quickly (batches of P concurrent operations: all invoke, then all complete; reads are
tail reads with a limit of 5) and audits each in-process on local[*]: the validation pass, then the Spark job.

    .venv/bin/python bench/bench_audit.py --sizes 1000000 10000000 --topics 1 1000
    .venv/bin/python bench/bench_audit.py --sizes 20000 --topics 1 --processes 50 --reference  # 10,000 ops
    .venv/bin/python bench/bench_audit.py --sizes 10000000 --topics 1 --cli  # as `pulsar-ref audit` runs
    .venv/bin/python bench/bench_audit.py --sizes 20000 --fresh 5 --inject stale-read  # whole command, 5 times
    .venv/bin/python bench/bench_audit.py --sizes 1000000 10000000 --consumers 0.5  # half the processes consume

Every table starts and ends with a calibration line (a fixed pure-Python loop's time, the load average) and gives
CPU seconds per million events: on a machine whose speed varies those compare across runs, wall time does not.
The first history is also audited once by `pulsar-ref audit HISTORY` in a fresh process, as a user runs it (Python
and JVM start included), in a row of its own (`--no-first` skips it).

Histories are written before each measurement (not timed); the Spark session is started once, before the first
measurement, so the first row does not pay the JVM start.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import os
import random
import resource
import tempfile
import threading
import time

import psutil
from bench_pulsar import calibration
from results_log import append
from results_log import row as record_row


def write_history(path: str, events: int, topics: int, processes: int, seed: int = 0, consumers: float = 0.0) -> int:
    """A valid history of about `events` events. With `consumers` (a share of the processes), those processes
    consume instead: consumer p shares the Shared subscription of topic p mod `topics` with the others of that
    topic, and alternately receives the subscription's next message and acknowledges it; at the end every
    subscription gets the rest and drains (the history stops early enough for that to fit in `events`)."""
    rng = random.Random(seed)
    names = [f"persistent://public/default/t{i}" for i in range(topics)]
    logs: dict[str, list[tuple[int, str]]] = {t: [] for t in names}
    consumer_of = {p: (names[p % topics], "s-shared") for p in range(int(processes * consumers))}
    cursor = dict.fromkeys(consumer_of.values(), 0)  # (topic, subscription) -> next entry to deliver
    holding: dict[int, tuple[int, str] | None] = dict.fromkeys(consumer_of)  # the delivery a consumer must ack
    idx = t_ns = n_op = 0

    def consumer_step(p: int, phase: str) -> str | None:
        """One consumer operation's invoke ('inv') or completion ('cmp') as JSON, or None for a receive that
        finds nothing (no operation this round)."""
        topic, sub = consumer_of[p]
        who = f'"subscription":"{sub}","consumer":"c{p}"'
        held = holding[p]
        if held is not None:
            entry, value = held
            if phase == "cmp":
                holding[p] = None
            kind = "invoke" if phase == "inv" else "ok"
            return (
                f'"type":"{kind}","f":"ack","topic":"{topic}",{who},"value":"{value}","position":[1,{entry},0],'
                f'"cumulative":false'
            )
        at = cursor[(topic, sub)]
        if at >= len(logs[topic]):
            return None
        if phase == "inv":
            return f'"type":"invoke","f":"receive","topic":"{topic}",{who}'
        entry, value = logs[topic][at]
        cursor[(topic, sub)] = at + 1
        holding[p] = (entry, value)
        return (
            f'"type":"ok","f":"receive","topic":"{topic}",{who},"value":"{value}","position":[1,{entry},0],'
            f'"redelivery_count":0'
        )

    with open(path, "w", encoding="utf-8") as fh:
        for p, (topic, sub) in consumer_of.items():  # subscribe
            for kind in ("invoke", "ok"):
                t_ns += 1000
                fh.write(
                    f'{{"index":{idx},"time":{t_ns},"process":{p},"type":"{kind}","f":"subscribe","topic":"{topic}",'
                    f'"subscription":"{sub}","consumer":"c{p}","subscription_type":"Shared"}}\n'
                )
                idx += 1
        subscribed = {topic for topic, _ in consumer_of.values()}

        def drain_left() -> int:  # events the drain will need
            left = sum(len(logs[t]) - cursor[(t, s)] for t, s in cursor)
            return 4 * left + 4 * len(consumer_of) + 2 * len(cursor)

        while idx + 2 * processes + (drain_left() if subscribed else 0) <= events:
            batch: list[tuple[int, str, str, object]] = []
            acting: list[int] = []
            for p in consumer_of:
                line = consumer_step(p, "inv")
                if line is not None:
                    t_ns += 1000
                    fh.write(f'{{"index":{idx},"time":{t_ns},"process":{p},{line}}}\n')
                    idx += 1
                    acting.append(p)
            for p in range(len(consumer_of), processes):
                topic = names[rng.randrange(topics)]
                t_ns += 1000
                if rng.random() < 0.2:
                    log = logs[topic]
                    first = max(len(log) - rng.randrange(1, 10), 0)
                    start = "null" if not log else f"[1,{log[first][0]},0]"
                    batch.append((p, topic, "read", (first, start)))
                    fh.write(
                        f'{{"index":{idx},"time":{t_ns},"process":{p},"type":"invoke","f":"read",'
                        f'"topic":"{topic}","from":{start},"limit":5}}\n'
                    )
                else:
                    value = f"{p}-{n_op}"
                    batch.append((p, topic, "append", value))
                    fh.write(
                        f'{{"index":{idx},"time":{t_ns},"process":{p},"type":"invoke","f":"append",'
                        f'"topic":"{topic}","value":"{value}"}}\n'
                    )
                n_op += 1
                idx += 1
            for p, topic, f, arg in batch:
                t_ns += 1000
                log = logs[topic]
                if f == "read":
                    first, start = arg  # type: ignore[misc]
                    shown = ",".join(f'[[1,{e},0],"{v}"]' for e, v in log[first : first + 5])
                    fh.write(
                        f'{{"index":{idx},"time":{t_ns},"process":{p},"type":"ok","f":"read",'
                        f'"topic":"{topic}","from":{start},"limit":5,"value":[{shown}]}}\n'
                    )
                else:
                    entry = len(log)
                    log.append((entry, arg))  # type: ignore[arg-type]
                    fh.write(
                        f'{{"index":{idx},"time":{t_ns},"process":{p},"type":"ok","f":"append",'
                        f'"topic":"{topic}","value":"{arg}","position":[1,{entry},0]}}\n'
                    )
                idx += 1
            for p in acting:
                t_ns += 1000
                fh.write(f'{{"index":{idx},"time":{t_ns},"process":{p},{consumer_step(p, "cmp")}}}\n')
                idx += 1
        drained: set[tuple[str, str]] = set()
        for p, (topic, sub) in consumer_of.items():  # the drain: everything left, then the backlog is 0
            while holding[p] is not None or cursor[(topic, sub)] < len(logs[topic]):
                for phase in ("inv", "cmp"):
                    t_ns += 1000
                    fh.write(f'{{"index":{idx},"time":{t_ns},"process":{p},{consumer_step(p, phase)}}}\n')
                    idx += 1
            if (topic, sub) in drained:
                continue
            drained.add((topic, sub))
            for kind in ("invoke", "ok"):
                t_ns += 1000
                fh.write(
                    f'{{"index":{idx},"time":{t_ns},"process":{p},"type":"{kind}","f":"drain","topic":"{topic}",'
                    f'"subscription":"{sub}"}}\n'
                )
                idx += 1
    return idx


def cpu_seconds() -> float:
    """CPU time of this process and its children (the Spark JVM): on a shared machine it varies less than wall time."""
    me = psutil.Process()
    total = sum(me.cpu_times()[:2])
    for child in me.children(recursive=True):
        with contextlib.suppress(psutil.Error):
            total += sum(child.cpu_times()[:2])
    reaped = resource.getrusage(resource.RUSAGE_CHILDREN)  # e.g. the CLI's format-check child, once it exited
    return total + reaped.ru_utime + reaped.ru_stime


class PeakRss:
    """Samples the peak resident memory of this process plus its children (the Spark JVM)."""

    def __init__(self) -> None:
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.is_set():
            try:
                rss = me.memory_info().rss + sum(c.memory_info().rss for c in me.children(recursive=True))
                self.peak = max(self.peak, rss)
            except psutil.Error:
                pass
            self._stop.wait(0.5)

    def __enter__(self) -> PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def fresh_runs(a: argparse.Namespace) -> None:
    """`pulsar-ref audit HISTORY` in a fresh process, `a.fresh` times per history (Python and JVM start included),
    alternately with and without the class archive of spark/classes.py if `a.no_archive`."""
    import json
    import statistics
    import subprocess
    import sys

    from spark.generate import inject, write_jsonl

    start = calibration()
    print(start)
    print(f"{'events':>10} {'topics':>6} {'history':>20} {'classes':>10} {'wall s (each run)':>40} {'median':>7}")
    records = []
    with tempfile.TemporaryDirectory(prefix="bench-audit-") as d:
        variants: list[tuple[str, str | None]] = [("archive", None)]
        if a.no_archive:  # a cache directory that holds no archive: the JVM starts as if none was recorded
            variants.append(("no archive", os.path.join(d, "empty-cache")))
        for topics in a.topics:
            for size in a.sizes:
                path = os.path.join(d, f"h-{size}-{topics}.jsonl")
                n = write_history(path, size, topics, a.processes)
                kind = "valid"
                if a.inject:
                    with open(path) as f:
                        events = [json.loads(line) for line in f]
                    injected = inject(events, a.inject, random.Random(5))
                    if injected is None:
                        raise SystemExit(f"no place to inject {a.inject} into the {size}-event history")
                    write_jsonl(injected[0], path)
                    kind = a.inject
                times: dict[str, list[float]] = {name: [] for name, _ in variants}
                for _ in range(a.fresh):
                    for name, cache in variants:
                        env = dict(os.environ, **({"PULSAR_REF_CACHE": cache} if cache else {}))
                        t0 = time.perf_counter()
                        run = subprocess.run(
                            [sys.executable, "-m", "pulsar_ref.cli", "audit", path], env=env, capture_output=True
                        )
                        times[name].append(time.perf_counter() - t0)
                        if run.returncode != (0 if kind == "valid" else 1):
                            raise SystemExit(f"unexpected exit status {run.returncode}: {run.stderr.decode()[-500:]}")
                for name, ts in times.items():
                    each = " ".join(f"{t:.1f}" for t in ts)
                    print(f"{n:>10} {topics:>6} {kind:>20} {name:>10} {each:>40} {statistics.median(ts):>7.1f}")
                    label = f"{size:,} events, {a.processes} processes: whole command, median"
                    if (kind, name, topics) != ("valid", "archive", 1):
                        label += f" ({kind}, {name}, {topics:,} topics)"
                    records.append(record_row(label, statistics.median(ts), "s"))
                os.unlink(path)
    end = calibration()
    print(end)
    append("audit", records, calibration=f"{start} (start); {end} (end)")


def fresh_row(path: str, n: int, topics: int, processes: int) -> None:
    """`pulsar-ref audit HISTORY` in a fresh process, as a user runs it: its own row. Its CPU is the sum over its
    process tree (the Python command, the format check, the JVM), sampled while it runs (a JVM that is not waited
    for never reaches the parent's rusage)."""
    import subprocess
    import sys

    t0 = time.perf_counter()
    cmd = subprocess.Popen(
        [sys.executable, "-m", "pulsar_ref.cli", "audit", path], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    seen: dict[int, float] = {}
    root = psutil.Process(cmd.pid)
    while cmd.poll() is None:
        with contextlib.suppress(psutil.Error):
            for proc in [root, *root.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    seen[proc.pid] = max(seen.get(proc.pid, 0.0), sum(proc.cpu_times()[:2]))
        time.sleep(0.2)
    wall = time.perf_counter() - t0
    cpu = sum(seen.values())
    verdict = {0: "valid", 1: "INVALID"}.get(cmd.returncode, f"exit {cmd.returncode}")
    print(
        f"{n:>10} {topics:>6} {processes:>5} {'(fresh process: the whole command)':>28} {wall:>8.1f} "
        f"{n / wall:>9.0f} {cpu:>7.0f} {cpu / n * 1e6:>7.1f} {'':>8} {verdict:>7}",
        flush=True,
    )


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=[1_000_000])
    p.add_argument("--topics", type=int, nargs="+", default=[1])
    p.add_argument("--processes", type=int, default=50)
    p.add_argument("--master", default="local[*]")
    p.add_argument(
        "--reference",
        action="store_true",
        help="also time the plain-Python reference checker (spark/reference.py) on each history, for comparison",
    )
    p.add_argument(
        "--cli",
        action="store_true",
        help="time `pulsar-ref audit HISTORY` as users run it (format check in a child process, overlapping the "
        "Spark job): 'validate s' is then 0 and 'spark s' the whole command",
    )
    p.add_argument(
        "--fresh",
        type=int,
        metavar="REPEAT",
        help="instead: run the whole `pulsar-ref audit HISTORY` in a fresh process REPEAT times per history",
    )
    p.add_argument("--inject", metavar="ANOMALY", help="with --fresh: inject this anomaly (docs/history.md) first")
    p.add_argument("--no-archive", action="store_true", help="with --fresh: also run without the class archive")
    p.add_argument(
        "--consumers",
        type=float,
        default=0.0,
        metavar="SHARE",
        help="share of the processes that consume (receive and ack on Shared subscriptions) instead (default 0)",
    )
    p.add_argument("--no-first", action="store_true", help="skip the fresh-process audit of the first history")
    a = p.parse_args()
    if a.fresh:
        fresh_runs(a)
        return
    from pulsar_ref.commands.audit import main as audit_command
    from spark.audit import audit
    from spark.history import read_history
    from spark.session import spark_session

    # The JVM is tuned for the input size (spark/session.py); the generator writes ~160 bytes per event.
    spark_session(a.master, input_size=160 * max(a.sizes))
    rows = []
    records = []  # bench/results/audit.jsonl, for bench/dashboard.py
    start = calibration()
    print(start, flush=True)
    print(
        f"{'events':>10} {'topics':>6} {'procs':>5} {'validate s':>10} {'spark s':>8} {'total s':>8} "
        f"{'events/s':>9} {'cpu s':>7} {'cpu s/M':>7} {'peak MB':>8} {'verdict':>7}",
        flush=True,
    )
    first = not a.no_first
    with tempfile.TemporaryDirectory(prefix="bench-audit-") as d:
        for topics in a.topics:
            for size in a.sizes:
                path = os.path.join(d, f"h-{size}-{topics}.jsonl")
                n = write_history(path, size, topics, a.processes, consumers=a.consumers)
                if first:
                    first = False
                    fresh_row(path, n, topics, a.processes)
                with PeakRss() as peak:
                    c0, t0 = cpu_seconds(), time.perf_counter()
                    if a.cli:
                        t1 = t0
                        with contextlib.redirect_stdout(io.StringIO()):
                            rc = audit_command([path], prog="pulsar-ref audit")
                        valid = rc == 0
                    else:
                        read_history(path, keep_ops=False)
                        t1 = time.perf_counter()
                        (result,) = audit([path])
                        valid = result.report.valid
                    t2, c2 = time.perf_counter(), cpu_seconds()
                verdict = "valid" if valid else "INVALID"
                if a.reference:
                    from spark.reference import check

                    r0 = time.perf_counter()
                    ref = check(read_history(path))
                    print(
                        f"reference checker (validate + check, plain Python): {time.perf_counter() - r0:.1f} s, "
                        f"{'valid' if ref.valid else 'INVALID'}",
                        flush=True,
                    )
                rows.append((n, topics, t1 - t0, t2 - t1))
                events = f"{size / 1e6:g}M" if size >= 1_000_000 else f"{size:,}"
                who = "with consumers" if a.consumers else "no consumers"
                name = f"{events} events, {topics:,} topic{'s' if topics > 1 else ''}, {who}: total"
                records.append(record_row(name, t2 - t0, "s"))
                print(
                    f"{n:>10} {topics:>6} {a.processes:>5} {t1 - t0:>10.1f} {t2 - t1:>8.1f} {t2 - t0:>8.1f} "
                    f"{n / (t2 - t0):>9.0f} {c2 - c0:>7.0f} {(c2 - c0) / n * 1e6:>7.1f} {peak.peak / 2**20:>8.0f} "
                    f"{verdict:>7}",
                    flush=True,
                )
                os.unlink(path)
    # Growth with size: the time ratio between consecutive sizes next to the ratios of n and of n log n.
    for topics in a.topics:
        runs = [(n, v + s) for n, t, v, s in rows if t == topics]
        for (n0, t0), (n1, t1) in zip(runs, runs[1:], strict=False):
            print(
                f"topics {topics}: {n0:,} -> {n1:,} events: time x{t1 / t0:.2f} "
                f"(n x{n1 / n0:.2f}, n log n x{n1 * math.log(n1) / (n0 * math.log(n0)):.2f})"
            )
    print(f"(python driver max RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB)")
    end = calibration()
    print(end, flush=True)
    append("audit", records, calibration=f"{start} (start); {end} (end)")


if __name__ == "__main__":
    main()
