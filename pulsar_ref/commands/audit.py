"""`pulsar-ref audit`: decide whether each topic of a run log behaved as a linearizable append-only log.

Exit status: 0 valid, 1 anomalies found, 2 unusable input (the history breaks HISTORY.md's format).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from spark.history import HistoryError, Op, read_history
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
    for c in report.cases[:20]:
        print(f"  {c.anomaly}: events {list(c.ops)}: {c.explanation}")
    if len(report.cases) > 20:
        print(f"  ... {len(report.cases) - 20} more anomalies in the JSON/HTML reports")


def _out_path(base: str, path: str, many: bool) -> Path:
    if not many:
        return Path(base)
    b = Path(base)
    return b.with_name(f"{b.stem}.{Path(path).stem}{b.suffix}")


def main(argv: list[str], prog: str) -> int:
    p = argparse.ArgumentParser(
        prog=prog,
        description="Audit run logs (HISTORY.md: JSON Lines or Parquet) for the anomalies of a linearizable "
        "append-only log. Exit status: 0 valid, 1 anomalies found, 2 unusable input.",
    )
    p.add_argument("histories", nargs="+", metavar="HISTORY")
    p.add_argument("--master", help="Spark master (default local[*]; e.g. spark://host:7077)")
    p.add_argument("--json", metavar="OUT", help="write the JSON report (with several histories: OUT.<name>.json)")
    p.add_argument("--html", metavar="OUT", help="write the self-contained HTML page")
    p.add_argument("--reference", action="store_true", help="use the plain-Python reference checker (no Spark)")
    args = p.parse_args(argv)

    many = len(args.histories) > 1
    need_ops = args.reference or bool(args.html)
    ops_of: dict[str, list[Op]] = {}
    for path in args.histories:
        print(f"validating {path} ...", file=sys.stderr, flush=True)
        try:
            ops_of[path] = read_history(path, keep_ops=need_ops)
        except HistoryError as e:
            print(f"{prog}: unusable history: {e}. Fix the line (see HISTORY.md) and rerun.", file=sys.stderr)
            return EXIT_UNUSABLE
    reports: dict[str, Report] = {}
    if args.reference:
        from spark.reference import check

        for path in args.histories:
            reports[path] = check(ops_of[path])
    else:
        from spark.audit import audit

        print(f"auditing {len(args.histories)} histories with Spark ...", file=sys.stderr, flush=True)
        for audited in audit(args.histories, master=args.master):
            reports[audited.path] = audited.report
    for path in args.histories:
        report = reports[path]
        _print_summary(path, report)
        if args.json:
            out = _out_path(args.json, path, many)
            out.write_text(json.dumps(report.to_json(), indent=1) + "\n")
            print(f"  JSON report: {out}")
        if args.html:
            from spark.html import render

            out = _out_path(args.html, path, many)
            out.write_text(render(path, report, ops_of[path]))
            print(f"  HTML report: {out}")
    return EXIT_VALID if all(r.valid for r in reports.values()) else EXIT_ANOMALIES
