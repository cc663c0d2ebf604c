"""The self-contained HTML page of an audit: verdict, witnesses as timelines, throughput and read lag (inline SVG)."""

from __future__ import annotations

import html
from collections import defaultdict

from spark.history import Op, format_time
from spark.report import Case, Report

W, LANE = 760, 22


def _svg_timeline(case: Case, ops_by_event: dict[int, Op]) -> str:
    ops: list[Op] = []
    for i in case.ops:
        op = ops_by_event.get(i)
        if op is not None and op not in ops:
            ops.append(op)
    if not ops:
        return ""
    t0 = min(op.inv_time for op in ops)
    t1 = max((op.cmp_time or op.inv_time) for op in ops)
    span = max(t1 - t0, 1)
    lanes = sorted({op.process for op in ops})

    def x(t: int) -> float:
        return 110 + (t - t0) / span * (W - 130)

    parts = [f'<svg width="{W}" height="{LANE * len(lanes) + 24}" xmlns="http://www.w3.org/2000/svg">']
    for k, p in enumerate(lanes):
        parts.append(f'<text x="4" y="{k * LANE + 15}" class="lane">process {p}</text>')
    for op in ops:
        k = lanes.index(op.process)
        x0, x1 = x(op.inv_time), x(op.cmp_time or op.inv_time)
        label = f"{op.f} {op.value or ''}".strip()
        if op.position:
            label += f" @{list(op.position)}"
        if op.f == "read":
            label += f" ({len(op.entries)} entries{', final' if op.final else ''})"
        cls = "ok" if op.type == "ok" else op.type
        parts.append(
            f'<rect x="{x0:.1f}" y="{k * LANE + 3}" width="{max(x1 - x0, 2):.1f}" height="{LANE - 6}" class="{cls}">'
            f"<title>{html.escape(label)} events {op.inv_index}-{op.cmp_index} {format_time(op.inv_time)}</title>"
            "</rect>"
        )
        parts.append(f'<text x="{x0 + 3:.1f}" y="{k * LANE + 15}" class="op">{html.escape(label)}</text>')
    parts.append(f'<text x="110" y="{LANE * len(lanes) + 18}" class="lane">{format_time(t0)}</text>')
    parts.append(f'<text x="{W - 120}" y="{LANE * len(lanes) + 18}" class="lane">{format_time(t1)}</text></svg>')
    return "".join(parts)


def _svg_series(points: list[tuple[float, float]], xlabel: str, ylabel: str, dots: bool = False) -> str:
    if not points:
        return "<p>no data</p>"
    h = 180
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x0, x1, y1 = min(xs), max(xs), max(ys) or 1.0
    sx = (W - 80) / max(x1 - x0, 1e-9)

    def at(p: tuple[float, float]) -> tuple[float, float]:
        return 60 + (p[0] - x0) * sx, h - 20 - p[1] / y1 * (h - 40)

    body = (
        "".join(f'<circle cx="{a:.1f}" cy="{b:.1f}" r="1.5" class="dot"/>' for a, b in map(at, points))
        if dots
        else f'<polyline class="line" points="{" ".join(f"{a:.1f},{b:.1f}" for a, b in map(at, points))}"/>'
    )
    return (
        f'<svg width="{W}" height="{h}" xmlns="http://www.w3.org/2000/svg">'
        f'<line x1="60" y1="{h - 20}" x2="{W - 20}" y2="{h - 20}" class="axis"/>'
        f'<line x1="60" y1="20" x2="60" y2="{h - 20}" class="axis"/>{body}'
        f'<text x="2" y="16" class="lane">{html.escape(ylabel)} (max {y1:.3g})</text>'
        f'<text x="{W - 260}" y="{h - 4}" class="lane">{html.escape(xlabel)}: {x0:.3g} to {x1:.3g}</text></svg>'
    )


def throughput(ops: list[Op], bins: int = 60) -> list[tuple[float, float]]:
    done = [op.cmp_time for op in ops if op.type == "ok" and op.cmp_time is not None]
    if not done:
        return []
    t0, t1 = min(done), max(done)
    width = max((t1 - t0) / bins, 1)
    counts = [0] * (bins + 1)
    for t in done:
        counts[int((t - t0) / width)] += 1
    return [((t0 + k * width) / 1e9, c / (width / 1e9)) for k, c in enumerate(counts)]


def read_lag(ops: list[Op], limit: int = 3000) -> list[tuple[float, float]]:
    """Per acknowledged append: time from its ack to the first read completion that shows it (seconds)."""
    acked = {op.value: op.cmp_time for op in ops if op.f == "append" and op.type == "ok"}
    first: dict[str, int] = {}
    for op in sorted((o for o in ops if o.f == "read" and o.type == "ok"), key=lambda o: o.cmp_time or 0):
        for _, v in op.entries:
            if v in acked and v not in first:
                first[v] = op.cmp_time  # type: ignore[assignment]
    pts = []
    for v, t in first.items():
        at = acked[v]
        if at is not None:
            pts.append((at / 1e9, max(t - at, 0) / 1e9))
    pts.sort()
    step = max(len(pts) // limit, 1)
    return pts[::step]


CSS = """body{font-family:sans-serif;margin:2em;max-width:900px}.valid{color:#060}.invalid{color:#a00}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}
rect.ok{fill:#8c8}rect.fail{fill:#e88}rect.info{fill:#ec6}text.op{font-size:10px}text.lane{font-size:11px}
.axis{stroke:#444}.line{fill:none;stroke:#36c;stroke-width:1.5}.dot{fill:#36c}"""


def render(path: str, report: Report, ops: list[Op]) -> str:
    ops_by_event: dict[int, Op] = {}
    for op in ops:
        ops_by_event[op.inv_index] = op
        if op.cmp_index is not None:
            ops_by_event[op.cmp_index] = op
    verdict = "valid" if report.valid else f"INVALID: {len(report.cases)} anomalies"
    out = [
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>audit {html.escape(path)}</title>"
        f"<style>{CSS}</style></head><body><h1>Audit of {html.escape(path)}</h1>",
        f"<h2 class='{'valid' if report.valid else 'invalid'}'>{verdict}</h2>",
        "<table><tr><th>topic</th><th>ops</th><th>appends ok</th><th>fail</th><th>info</th><th>reads</th>"
        "<th>anomalies</th></tr>",
    ]
    for topic, s in sorted(report.topics.items()):
        out.append(
            f"<tr><td>{html.escape(topic)}</td><td>{s.ops}</td><td>{s.appends_ok}</td><td>{s.appends_fail}</td>"
            f"<td>{s.appends_info}</td><td>{s.reads}</td><td>{s.anomalies}</td></tr>"
        )
    out.append("</table>")
    grouped: dict[str, list[Case]] = defaultdict(list)
    for c in report.cases:
        grouped[c.anomaly].append(c)
    for name, cases in grouped.items():
        out.append(f"<h2>{html.escape(name)} ({len(cases)})</h2>")
        for c in cases[:50]:
            out.append(f"<p><b>{html.escape(c.topic)}</b>, events {list(c.ops)}: {html.escape(c.explanation)}</p>")
            out.append(_svg_timeline(c, ops_by_event))
        if len(cases) > 50:
            out.append(f"<p>... and {len(cases) - 50} more (see the JSON report)</p>")
    out.append("<h2>Throughput (ok operations per second)</h2>")
    out.append(_svg_series(throughput(ops), "time (s)", "ops/s"))
    out.append("<h2>Read lag (ack to first appearance in a read)</h2>")
    out.append(_svg_series(read_lag(ops), "ack time (s)", "lag (s)", dots=True))
    out.append("</body></html>")
    return "\n".join(out)
