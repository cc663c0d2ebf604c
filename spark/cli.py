"""`pulsar-ref audit`: decide whether each topic of a run log behaved as a linearizable append-only log.

Exit status: 0 valid, 1 anomalies found, 2 unusable input (the history breaks docs/history.md's format).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from spark.history import HistoryError, NemesisEvent, Op, is_parquet, read_history
from spark.report import Report

EXIT_VALID, EXIT_ANOMALIES, EXIT_UNUSABLE = 0, 1, 2


def _print_summary(path: str, report: Report) -> None:
    verdict = "VALID" if report.valid else f"INVALID ({', '.join(report.to_json()['anomaly_types'])})"
    print(f"{path}: {verdict}; {report.ops} operations on {len(report.topics)} topics")
    print(f"  {'topic':<44} {'ops':>8} {'ok':>8} {'fail':>6} {'info':>6} {'reads':>8} {'anomalies':>9}")
    for topic, s in sorted(report.topics.items()):
        print(
            f"  {topic:<44} {s.ops:>8} {s.appends_ok:>8} {s.appends_fail:>6} {s.appends_info:>6} {s.reads:>8} "
            f"{s.anomalies:>9}"
        )
    if report.subscriptions:
        print(
            f"  {'subscription':<44} {'fault':<16} {'delivered':>9} {'redelivered':>11} {'after ack':>9} "
            f"{'lag p50 ms':>10}"
        )
        for f in report.subscriptions:
            name = f"{f.topic.rsplit('/', 1)[-1]} {f.subscription}"
            lag = "-" if f.lag_p50_ms is None else f"{f.lag_p50_ms:.1f}"
            print(f"  {name:<44} {f.fault:<16} {f.deliveries:>9} {f.redeliveries:>11} {f.after_ack:>9} {lag:>10}")
    for n in report.non_persistent:  # loss is allowed there: counted, not flagged (docs/history.md)
        name = f"{n.topic.rsplit('/', 1)[-1]} {n.subscription}"
        lost = f"{n.lost} of {n.acknowledged} acknowledged sends lost"
        print(f"  {name:<44} non-persistent: {lost}, {n.duplicates} duplicates")
    if report.waited_for_drain:
        print(f"  {report.waited_for_drain} messages waited for the final drain (their subscription had no consumer)")
    if report.expired:
        print(
            f"  {report.expired_by_ttl} messages expired by TTL before the drain (never delivered to "
            f"{sum(1 for f in report.expired if f.expired)} of {len(report.expired)} subscriptions with a message TTL)"
        )
    for c in report.cases[:20]:
        print(f"  {c.anomaly}: events {list(c.ops)}: {c.explanation}")
    if len(report.cases) > 20:
        print(f"  ... {len(report.cases) - 20} more anomalies in the JSON/HTML reports")


def _out_path(base: str, path: str, many: bool) -> Path:
    if not many:
        return Path(base)
    b = Path(base)
    return b.with_name(f"{b.stem}.{Path(path).stem}{b.suffix}")


def _unusable(prog: str, error: object) -> None:
    print(f"{prog}: unusable history: {error}. Fix the line (see docs/history.md) and rerun.", file=sys.stderr)


def _validate_while_auditing(
    paths: list[str], master: str | None, reports: dict[str, Report], replication_dedup: bool = True
) -> str | None:
    """Check the format in a child process while Spark audits (JSON Lines only: Parquet is read through Spark).

    The Python check is single-threaded and Spark leaves a core idle for part of its run (JVM start, planning,
    one-task stages), so the check costs little wall time there. Only a history that passes it gets a verdict:
    on a format error the Spark job is cancelled and the error returned.
    """
    from spark import child_env
    from spark.audit import audit

    print(f"validating and auditing {len(paths)} histories with Spark ...", file=sys.stderr, flush=True)
    # A plain child interpreter (not multiprocessing, which re-imports the caller's __main__).
    check = subprocess.Popen(
        [sys.executable, "-m", "spark.history", *paths],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["audited"] = audit(paths, master=master, replication_dedup=replication_dedup)
        except BaseException as e:  # re-raised below unless the format check explains it
            outcome["error"] = e

    worker = threading.Thread(target=run, name="spark-audit", daemon=True)
    worker.start()
    out, err = check.communicate()
    if check.returncode == EXIT_UNUSABLE:
        from spark.session import cancel_jobs

        # Cancel until the job's next action fails. If the session is still starting, leave the daemon thread:
        # the command exits now rather than after the JVM start (the JVM exits with this process).
        while worker.is_alive() and cancel_jobs():
            worker.join(0.5)
        return out.strip()
    if check.returncode != 0:
        raise RuntimeError(f"the format check failed: {err.strip()}")
    worker.join()
    if "error" in outcome:
        raise outcome["error"]
    for audited in outcome["audited"]:
        reports[audited.path] = audited.report
    return None


def main(argv: list[str], prog: str) -> int:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Audit run logs (docs/history.md: JSON Lines or Parquet) for the anomalies of a linearizable "
        "append-only log. Exit status: 0 valid, 1 anomalies found, 2 unusable input.",
        epilog="A local Spark starts ~2 s faster with the class archive that `make setup` records once per JDK "
        "and Spark install (`python -m spark.classes`; `--where` prints where it is).",
    )
    p.add_argument("histories", nargs="+", metavar="HISTORY")
    p.add_argument("--master", help="Spark master (default local[*]; e.g. spark://host:7077)")
    p.add_argument("--json", metavar="OUT", help="write the JSON report (with several histories: OUT.<name>.json)")
    p.add_argument("--html", metavar="OUT", help="write the self-contained HTML page")
    p.add_argument("--reference", action="store_true", help="use the plain-Python reference checker (no Spark)")
    p.add_argument(
        "--replication-dedup",
        choices=("on", "off"),
        default="on",
        help="histories of several clusters: whether the replicated namespace de-duplicated (on, the default: a "
        "value twice in a remote log is replication-duplicate; off: Pulsar promises at-least-once, so it is not)",
    )
    args = p.parse_args(argv)
    dedup = args.replication_dedup == "on"

    many = len(args.histories) > 1
    need_ops = args.reference or bool(args.html)
    ops_of: dict[str, list[Op]] = {}
    nemesis_of: dict[str, list[NemesisEvent]] = {}
    reports: dict[str, Report] = {}
    if not need_ops and not any(is_parquet(p) for p in args.histories if Path(p).exists()):
        error = _validate_while_auditing(args.histories, args.master, reports, dedup)
        if error is not None:
            _unusable(prog, error)
            return EXIT_UNUSABLE
    else:
        for path in args.histories:
            print(f"validating {path} ...", file=sys.stderr, flush=True)
            try:
                nemesis_of[path] = []
                ops_of[path] = read_history(path, keep_ops=need_ops, nemesis=nemesis_of[path])
            except HistoryError as e:
                _unusable(prog, e)
                return EXIT_UNUSABLE
        if args.reference:
            from spark.reference import check

            for path in args.histories:
                reports[path] = check(ops_of[path], nemesis_of[path], replication_dedup=dedup)
        else:
            from spark.audit import audit

            print(f"auditing {len(args.histories)} histories with Spark ...", file=sys.stderr, flush=True)
            for audited in audit(args.histories, master=args.master, replication_dedup=dedup):
                reports[audited.path] = audited.report
    for path in args.histories:
        report = reports[path]
        _print_summary(path, report)
        if args.json:
            out = _out_path(args.json, path, many)
            out.write_text(json.dumps(report.to_json(), indent=1) + "\n")
            print(f"  JSON report: {out}")
        if args.html:
            from spark.faults import read_steps
            from spark.html import render

            out = _out_path(args.html, path, many)
            out.write_text(render(path, report, ops_of[path], read_steps(path)))
            print(f"  HTML report: {out}")
    return EXIT_VALID if all(r.valid for r in reports.values()) else EXIT_ANOMALIES
