"""The self-contained HTML page of an audit (docs/history.md, The report), for people.

What it shows: the verdict; the faults, each with the time until every topic served a successful operation
again (unavailability); every anomaly's witness as a timeline with one lane per process; a latency plot of every
operation (ok, fail and info in different marks, a colour per operation kind); throughput per operation kind;
the read lag; the subscriptions' figures. Every plot shades the interval of each fault, a colour per fault kind.

Plots are inline SVG; the page loads nothing. A history of millions of operations gives a page of bounded size:
plotted points are sampled (fail and info operations drawn first, then a sample of the ok ones), tables are
cut, and the page says so.
"""

from __future__ import annotations

import bisect
import dataclasses
import html
import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence

from spark.faults import Fault, NemesisStep, intervals
from spark.history import DRAIN_CONSUMER_PREFIX, Op, Position, format_position, format_time
from spark.report import ANOMALIES, Case, Report

W = 900  # plot width (px)
LEFT, RIGHT = 70, 20  # plot margins
LANE = 22  # a timeline's lane height
MAX_MARKS = 6000  # latency marks on the page, in all
MAX_LAG_POINTS = 3000
RATE_BINS = 120
MAX_CASES = 50  # witnesses drawn per anomaly kind
MAX_TOPIC_ROWS = 200
MAX_FAULT_ROWS = 500
MAX_SUBSCRIPTION_ROWS = 500
OUTCOMES = ("ok", "fail", "info")

FAULT_COLOURS = ("#d62728", "#1f77b4", "#9467bd", "#ff7f0e", "#2ca02c", "#8c564b", "#e377c2", "#17becf", "#bcbd22")
OP_COLOURS = ("#1f77b4", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#17becf", "#e377c2", "#7f7f7f", "#bcbd22")


def esc(value: object) -> str:
    return html.escape(str(value), quote=True)


def slug(name: str) -> str:
    """A CSS class name part for a fault or operation kind."""
    return re.sub(r"[^a-z0-9_-]", "-", name.lower()) or "-"


def duration(ns: int | float) -> str:
    if ns < 1_000:
        return f"{ns:.0f} ns"
    if ns < 1_000_000:
        return f"{ns / 1e3:.1f} µs"
    if ns < 1_000_000_000:
        return f"{ns / 1e6:.1f} ms"
    return f"{ns / 1e9:.3f} s"


def _power_of_ten(ns: float) -> str:
    """A tick of a log-scale axis of durations: 1 µs, 10 µs, ..., 1 s, 10 s."""
    for unit, size in (("s", 1e9), ("ms", 1e6), ("µs", 1e3)):
        if ns >= size * 0.999:
            return f"{ns / size:.0f} {unit}"
    return f"{ns:.0f} ns"


def short_topic(topic: str) -> str:
    return topic.rsplit("/", 1)[-1]


class Page:
    """What every part of the page shares: the run's time span, the faults and the colours of their kinds."""

    def __init__(self, ops: Sequence[Op], steps: Sequence[NemesisStep]) -> None:
        # Completions come after their invokes: the first event is an invoke (or a step), the last a completion,
        # an invoke never completed or a step.
        firsts = [min((op.inv_time for op in ops), default=None), min((s.time for s in steps), default=None)]
        lasts = [
            max((op.cmp_time if op.cmp_time is not None else op.inv_time for op in ops), default=None),
            max((s.time for s in steps), default=None),
        ]
        self.t0 = min((t for t in firsts if t is not None), default=0)
        self.t1 = max((t for t in lasts if t is not None), default=0)
        self.faults: list[Fault] = intervals(steps, self.t1)
        self.failed_steps = [s for s in steps if s.error is not None]
        self.kinds = sorted({f.kind for f in self.faults})
        # The final drain (after healing, docs/history.md): from its consumers' first invoke to their last event.
        drained = [op for op in ops if (op.consumer or "").startswith(DRAIN_CONSUMER_PREFIX) or op.f == "drain"]
        self.drain: tuple[int, int] | None = (
            (
                min(op.inv_time for op in drained),
                max(op.cmp_time if op.cmp_time is not None else op.inv_time for op in drained),
            )
            if drained
            else None
        )
        self.fs = sorted({op.f for op in ops}, key=lambda f: (_F_ORDER.get(f, len(_F_ORDER)), f))

    def rel(self, t: int) -> float:
        """Seconds since the history's first event."""
        return (t - self.t0) / 1e9

    def css(self) -> str:
        rules = [f".fault-{slug(k)}{{fill:{FAULT_COLOURS[i % len(FAULT_COLOURS)]}}}" for i, k in enumerate(self.kinds)]
        rules += [f".f-{slug(f)}{{--c:{OP_COLOURS[i % len(OP_COLOURS)]}}}" for i, f in enumerate(self.fs)]
        return "\n".join(rules)

    def shades(self, t0: int, t1: int, x: Scale, top: float, bottom: float) -> str:
        """One rectangle per fault overlapping [t0, t1], clipped to it, behind the plot's marks; the drain's phase
        too."""
        out = []
        if self.drain is not None and self.drain[1] >= t0 and self.drain[0] <= t1:
            a, b = max(self.drain[0], t0), min(self.drain[1], t1)
            out.append(
                f'<rect class="phase phase-drain" data-start="{self.drain[0]}" data-end="{self.drain[1]}" '
                f'x="{x(a):.1f}" y="{top:.1f}" width="{max(x(b) - x(a), 1.5):.1f}" height="{bottom - top:.1f}">'
                f"<title>drain: {format_time(self.drain[0])} to {format_time(self.drain[1])}</title></rect>"
            )
        for f in self.faults:
            a, b = max(f.start, t0), min(f.end, t1)
            if b < a or (b == a and not t0 <= f.start <= t1):
                continue
            x0, x1 = x(a), x(b)
            until = format_time(f.end) if f.healed else "the end of the history (never healed)"
            out.append(
                f'<rect class="fault fault-{slug(f.kind)}" data-kind="{esc(f.kind)}" data-node="{esc(f.node)}" '
                f'data-start="{f.start}" data-end="{f.end}" x="{x0:.1f}" y="{top:.1f}" '
                f'width="{max(x1 - x0, 1.5):.1f}" height="{bottom - top:.1f}">'
                f"<title>{esc(f.kind)} {esc(f.node)}: {format_time(f.start)} to {until}</title></rect>"
            )
        return "".join(out)

    def legend(self) -> str:
        drain = (
            "<li class='phase-key'><svg width='14' height='12'><rect class='phase phase-drain' width='14' height='12'/>"
            "</svg> drain (after healing)</li>"
            if self.drain
            else ""
        )
        if not self.kinds:
            return f"<ul id='fault-legend' class='legend'><li>No fault was injected.</li>{drain}</ul>"
        items = "".join(
            f'<li class="fault-key" data-kind="{esc(k)}"><svg width="14" height="12"><rect class="fault '
            f'fault-{slug(k)}" width="14" height="12"/></svg> {esc(k)} '
            f"({sum(1 for f in self.faults if f.kind == k)})</li>"
            for k in self.kinds
        )
        return f"<ul id='fault-legend' class='legend'><li>faults (shaded):</li>{items}{drain}</ul>"


_F_ORDER = {f: i for i, f in enumerate(("append", "read", "subscribe", "receive", "ack", "nack", "close", "drain"))}


class Scale:
    def __init__(self, lo: float, hi: float, a: float, b: float) -> None:
        self.lo, self.span, self.a, self.b = lo, max(hi - lo, 1e-9), a, b

    def __call__(self, v: float) -> float:
        return self.a + (v - self.lo) / self.span * (self.b - self.a)


def _nice_step(span: float, ticks: int = 6) -> float:
    raw = max(span / ticks, 1e-9)
    p = 10 ** math.floor(math.log10(raw))
    return next(m * p for m in (1, 2, 5, 10) if m * p >= raw)


def _time_axis(page: Page, x: Scale, y: float) -> str:
    span = (page.t1 - page.t0) / 1e9
    step = _nice_step(span)
    out = [f'<line x1="{LEFT}" y1="{y}" x2="{W - RIGHT}" y2="{y}" class="axis"/>']
    k = 0
    while k * step <= span + 1e-9:
        px = x(page.t0 + k * step * 1e9)
        out.append(f'<line x1="{px:.1f}" y1="{y}" x2="{px:.1f}" y2="{y + 4}" class="axis"/>')
        out.append(f'<text x="{px:.1f}" y="{y + 15}" class="tick" text-anchor="middle">{k * step:g}</text>')
        k += 1
    out.append(f'<text x="{W - RIGHT}" y="{y + 28}" class="tick" text-anchor="end">seconds since the start</text>')
    return "".join(out)


def _plot(page: Page, name: str, height: int, body: str, y_axis: str, legend: str, f: str | None = None) -> str:
    """A plot over the run's time span: fault shading, then the y axis, the marks and the time axis."""
    x = Scale(page.t0, page.t1, LEFT, W - RIGHT)
    top, bottom = 10, height - 36
    data_f = "" if f is None else f' data-f="{esc(f)}"'
    return (
        f'<figure class="plot" id="{name}-plot"{data_f}><svg class="plot" width="{W}" height="{height}" '
        f'xmlns="http://www.w3.org/2000/svg"><g class="faults">{page.shades(page.t0, page.t1, x, top, bottom)}</g>'
        f'{y_axis}<line x1="{LEFT}" y1="{top}" x2="{LEFT}" y2="{bottom}" class="axis"/>{body}'
        f"{_time_axis(page, x, bottom)}</svg>{legend}</figure>"
    )


def _op_legend(fs: Iterable[str]) -> str:
    """The latency plot's key: a colour per operation kind, a mark per outcome."""
    items = "".join(
        f'<li class="op-key f-{slug(f)}" data-f="{esc(f)}"><svg width="12" height="12">'
        f'<circle class="swatch" cx="6" cy="6" r="3"/></svg> {esc(f)}</li>'
        for f in fs
    )
    shapes = (
        '<li class="mark-key" data-type="ok"><svg width="12" height="12"><circle class="mark ok key" cx="6" '
        'cy="6" r="3"/></svg> ok</li><li class="mark-key" data-type="fail"><svg width="12" height="12">'
        f'<path class="mark fail key" d="{_cross(6, 6)}"/></svg> fail</li><li class="mark-key" data-type="info">'
        f'<svg width="12" height="12"><path class="mark info key" d="{_triangle(6, 6)}"/></svg> info (never '
        "completed: drawn with its time to the end of the history)</li>"
    )
    return f"<ul class='legend'>{items}{shapes}</ul>"


def _cross(x: float, y: float, r: float = 3.0) -> str:
    return f"M{x - r:.1f},{y - r:.1f}L{x + r:.1f},{y + r:.1f}M{x - r:.1f},{y + r:.1f}L{x + r:.1f},{y - r:.1f}"


def _triangle(x: float, y: float, r: float = 3.5) -> str:
    return f"M{x:.1f},{y - r:.1f}L{x + r:.1f},{y + r:.1f}L{x - r:.1f},{y + r:.1f}Z"


def _sample(items: list[Op], cap: int) -> list[Op]:
    if len(items) <= cap:
        return items
    step = len(items) / cap
    return [items[int(k * step)] for k in range(cap)]


def latency_plot(page: Page, ops: Sequence[Op]) -> str:
    """Every operation at its invoke time, its latency on a log scale; an operation never completed is drawn
    with its time until the end of the history (at least that long)."""
    groups: dict[tuple[str, str], list[Op]] = defaultdict(list)
    for op in ops:
        groups[(op.f, op.type)].append(op)
    if not groups:
        return "<p>no operations</p>"
    # Fail and info are rarer and tell more: each may take a third of the marks, ok takes what remains.
    chosen: dict[tuple[str, str], list[Op]] = {}
    budget, total = MAX_MARKS, len(ops)
    for outcome in ("fail", "info", "ok"):
        keys = sorted((k for k in groups if k[1] == outcome), key=lambda k: len(groups[k]))
        room = budget if outcome == "ok" else min(budget, MAX_MARKS // 3)
        for n, k in enumerate(keys):
            chosen[k] = _sample(groups[k], max(room // (len(keys) - n), 1))
            room -= len(chosen[k])
            budget -= len(chosen[k])
    lat = {
        k: [(op, max((op.cmp_time if op.cmp_time is not None else page.t1) - op.inv_time, 1000)) for op in v]
        for k, v in chosen.items()
    }
    values = [ns for v in lat.values() for _, ns in v]
    if not values:
        return "<p>no operations</p>"
    lo = 10 ** math.floor(math.log10(min(values) / 1e6))
    hi = 10 ** math.ceil(math.log10(max(values) / 1e6))
    if hi <= lo:
        hi = lo * 10
    height = 320
    x = Scale(page.t0, page.t1, LEFT, W - RIGHT)
    y = Scale(math.log10(lo), math.log10(hi), height - 36, 10)
    axis = []
    p = lo
    while p <= hi * 1.0001:
        py = y(math.log10(p))
        axis.append(f'<line x1="{LEFT - 4}" y1="{py:.1f}" x2="{W - RIGHT}" y2="{py:.1f}" class="grid"/>')
        axis.append(
            f'<text x="{LEFT - 6}" y="{py + 4:.1f}" class="tick" text-anchor="end">{_power_of_ten(p * 1e6)}</text>'
        )
        p *= 10
    marks = []
    for (f, outcome), points in sorted(lat.items(), key=lambda kv: OUTCOMES.index(kv[0][1])):
        cls = f"mark {outcome} f-{slug(f)}"
        for op, ns in points:
            px, py = x(op.inv_time), y(math.log10(ns / 1e6))
            title = f"<title>{esc(f)} {outcome} {duration(ns)}, events {op.inv_index}-{op.cmp_index}</title>"
            attrs = f'class="{cls}" data-f="{esc(f)}" data-index="{op.inv_index}"'
            if outcome == "ok":
                marks.append(f'<circle {attrs} cx="{px:.1f}" cy="{py:.1f}" r="2">{title}</circle>')
            elif outcome == "fail":
                marks.append(f'<path {attrs} d="{_cross(px, py)}">{title}</path>')
            else:
                marks.append(f'<path {attrs} d="{_triangle(px, py)}">{title}</path>')
    shown = sum(len(v) for v in lat.values())
    note = "" if shown == total else f"<figcaption>{shown:,} of {total:,} operations drawn (sampled)</figcaption>"
    y_axis = "".join(axis)
    fs = [f for f in page.fs if any(k[0] == f for k in lat)]
    return _plot(page, "latency", height, "".join(marks), y_axis, _op_legend(fs) + note)


def rates(page: Page, ops: Sequence[Op], bins: int = RATE_BINS) -> dict[str, tuple[float, dict[str, list[int]]]]:
    """Per operation kind: the bin width in seconds and, per outcome, the completions in each bin over the run's
    span (an operation never completed counts at its invoke)."""
    width = max((page.t1 - page.t0) / bins, 1.0)
    counts: dict[str, dict[str, list[int]]] = {}
    for op in ops:
        per_type = counts.get(op.f)
        if per_type is None:
            per_type = counts[op.f] = {t: [0] * bins for t in OUTCOMES}
        t = op.cmp_time if op.cmp_time is not None else op.inv_time
        per_type[op.type][min(int((t - page.t0) / width), bins - 1)] += 1
    return {f: (width / 1e9, per_type) for f, per_type in counts.items()}


def throughput_plots(page: Page, ops: Sequence[Op]) -> str:
    """One plot per operation kind, each on its own scale: completions per second, ok, fail and info."""
    per_f = rates(page, ops)
    if not per_f:
        return "<p>no operations</p>"
    height = 130
    x = Scale(page.t0, page.t1, LEFT, W - RIGHT)
    out = []
    for f in [f for f in page.fs if f in per_f]:
        w, per_type = per_f[f]
        top = max(c / w for row in per_type.values() for c in row) or 1.0
        y = Scale(0, top, height - 36, 18)
        counts = ", ".join(f"{sum(per_type[t]):,} {t}" for t in OUTCOMES)
        axis = [f'<text x="{LEFT + 6}" y="12" class="plot-name">{esc(f)}: {counts}</text>']
        step = _nice_step(top, 3)
        k = 0
        while k * step <= top * 1.0001:
            py = y(k * step)
            axis.append(f'<line x1="{LEFT - 4}" y1="{py:.1f}" x2="{W - RIGHT}" y2="{py:.1f}" class="grid"/>')
            axis.append(f'<text x="{LEFT - 6}" y="{py + 4:.1f}" class="tick" text-anchor="end">{k * step:g}/s</text>')
            k += 1
        lines = []
        for outcome in OUTCOMES:
            row = per_type[outcome]
            if outcome != "ok" and not any(row):
                continue
            pts = " ".join(f"{x(page.t0 + (i + 0.5) * w * 1e9):.1f},{y(c / w):.1f}" for i, c in enumerate(row))
            lines.append(
                f'<polyline class="rate {outcome} f-{slug(f)}" data-f="{esc(f)}" data-type="{outcome}" '
                f'data-count="{sum(row)}" points="{pts}"><title>{esc(f)} {outcome}: {sum(row):,}</title></polyline>'
            )
        out.append(_plot(page, f"throughput-{slug(f)}", height, "".join(lines), "".join(axis), "", f))
    legend = (
        "<ul class='legend'><li><svg width='24' height='8'><line class='rate ok key' x1='0' y1='4' x2='24' y2='4'/>"
        "</svg> ok</li><li><svg width='24' height='8'><line class='rate fail key' x1='0' y1='4' x2='24' y2='4'/>"
        "</svg> fail</li><li><svg width='24' height='8'><line class='rate info key' x1='0' y1='4' x2='24' y2='4'/>"
        "</svg> info</li></ul>"
    )
    return legend + "".join(out)


def read_lag(ops: Sequence[Op], limit: int = MAX_LAG_POINTS) -> list[tuple[int, int]]:
    """For acknowledged appends (at most `limit`, spread over the run): (ack time, time from the ack to the first
    read completion that shows the value at its acknowledged position). A read's entries are in position order,
    so it is searched, not walked: the work grows with the reads and the appends sampled, not with the entries
    the reads return."""
    acked = sorted(
        (op.cmp_time, op.topic, op.position, op.value)
        for op in ops
        if op.f == "append" and op.type == "ok" and op.cmp_time is not None and op.position is not None
    )
    waiting: dict[str, list[tuple[Position, str, int]]] = defaultdict(list)
    for at, topic, position, value in acked[:: max(len(acked) // limit, 1)]:
        waiting[topic].append((position, str(value), at))
    for pending in waiting.values():
        pending.sort()
    pts: list[tuple[int, int]] = []
    reads = sorted((o for o in ops if o.f == "read" and o.type == "ok" and o.entries), key=lambda o: o.cmp_time or 0)
    for r in reads:
        w = waiting.get(r.topic)
        if not w or r.cmp_time is None:
            continue
        i = bisect.bisect_left(w, r.entries[0][0], key=lambda e: e[0])
        j = bisect.bisect_right(w, r.entries[-1][0], key=lambda e: e[0])
        if i == j:
            continue
        left = []
        for position, value, at in w[i:j]:
            k = bisect.bisect_left(r.entries, position, key=lambda e: e[0])
            if k < len(r.entries) and r.entries[k] == (position, value):
                pts.append((at, max(r.cmp_time - at, 0)))
            else:
                left.append((position, value, at))
        w[i:j] = left
    pts.sort()
    return pts


def read_lag_plot(page: Page, ops: Sequence[Op]) -> str:
    pts = read_lag(ops)
    if not pts:
        return "<p>no acknowledged append was read</p>"
    height = 220
    top = max(lag for _, lag in pts) or 1
    x = Scale(page.t0, page.t1, LEFT, W - RIGHT)
    y = Scale(0, top, height - 36, 10)
    dots = "".join(f'<circle class="lag" cx="{x(t):.1f}" cy="{y(lag):.1f}" r="1.5"/>' for t, lag in pts)
    axis = (
        f'<text x="{LEFT - 6}" y="14" class="tick" text-anchor="end">{duration(top)}</text>'
        f'<text x="{LEFT - 6}" y="{height - 36}" class="tick" text-anchor="end">0</text>'
    )
    return _plot(page, "read-lag", height, dots, axis, "")


def unavailability(
    page: Page, ops: Sequence[Op], after_heal: bool = False
) -> list[tuple[Fault, dict[str, int | None]]]:
    """Per fault: per topic that had any operation, the time from the injection (from the heal if `after_heal`:
    how long the system takes to serve again once the fault is over, e.g. after a stall) to the completion of
    the first `ok` operation on the topic invoked at or after it (None: none was)."""
    by_topic: dict[str, list[tuple[int, int]]] = defaultdict(list)
    topics = set()
    for op in ops:
        topics.add(op.topic)
        if op.type == "ok" and op.cmp_time is not None:
            by_topic[op.topic].append((op.inv_time, op.cmp_time))
    # Per topic: invoke times in order, and from each on the earliest completion (a suffix minimum).
    index: dict[str, tuple[list[int], list[int]]] = {}
    for topic, pairs in by_topic.items():
        pairs.sort()
        suffix = [0] * len(pairs)
        best = None
        for i in range(len(pairs) - 1, -1, -1):
            best = pairs[i][1] if best is None else min(best, pairs[i][1])
            suffix[i] = best
        index[topic] = ([p[0] for p in pairs], suffix)
    out = []
    for fault in page.faults[:MAX_FAULT_ROWS]:
        waits: dict[str, int | None] = {}
        for topic in sorted(topics):
            invokes, suffix = index.get(topic, ([], []))
            since = fault.end if after_heal else fault.start
            i = bisect.bisect_left(invokes, since)
            waits[topic] = suffix[i] - since if i < len(invokes) else None
        out.append((fault, waits))
    return out


def _worst_wait(waits: dict[str, int | None]) -> str:
    if any(w is None for w in waits.values()):
        return "never"
    return duration(max(w for w in waits.values() if w is not None)) if waits else "-"


def unavailability_table(page: Page, ops: Sequence[Op]) -> str:
    if not page.faults:
        return "<p>No fault was injected.</p>"
    rows = [
        "<table id='unavailability'><tr><th>fault</th><th>node</th><th>start (s)</th><th>lasted</th>"
        "<th>topics that answered</th><th>time to next ok (max)</th><th>slowest topic</th>"
        "<th>after the heal: time to next ok (max)</th></tr>"
    ]
    recovered = [waits for _, waits in unavailability(page, ops, after_heal=True)]
    for (fault, waits), after in zip(unavailability(page, ops), recovered, strict=True):
        answered = {t: w for t, w in waits.items() if w is not None}
        never = sorted(t for t, w in waits.items() if w is None)
        if never:
            worst, slowest = "never", never[0] + (f" and {len(never) - 1} more" if len(never) > 1 else "")
        elif answered:
            top = max(answered, key=lambda t: (answered[t], t))
            worst, slowest = duration(answered[top]), top
        else:
            worst, slowest = "-", "-"
        detail = "; ".join(
            f"{short_topic(t)}: {'never' if w is None else duration(w)}" for t, w in list(waits.items())[:30]
        )
        lasted = duration(fault.duration) + ("" if fault.healed else " (never healed)")
        rows.append(
            f'<tr class="fault-row" data-kind="{esc(fault.kind)}" title="{esc(detail)}">'
            f"<td><svg width='10' height='10'><rect class='fault fault-{slug(fault.kind)}' width='10' height='10'/>"
            f"</svg> {esc(fault.kind)}</td><td>{esc(fault.node)}</td><td>{page.rel(fault.start):.3f}</td>"
            f"<td>{lasted}</td><td>{len(answered)} of {len(waits)}</td><td>{worst}</td><td>{esc(slowest)}</td>"
            f"<td>{_worst_wait(after) if fault.healed else '-'}</td></tr>"
        )
    rows.append("</table>")
    if len(page.faults) > MAX_FAULT_ROWS:
        rows.append(f"<p>... and {len(page.faults) - MAX_FAULT_ROWS} more faults</p>")
    if page.failed_steps:
        items = "".join(
            f"<li>{esc(s.f)} {esc(s.node)} at {page.rel(s.time):.3f} s: {esc(s.error)}</li>"
            for s in page.failed_steps[:50]
        )
        rows.append(f"<p>Steps of the nemesis that failed (nothing changed):</p><ul id='failed-steps'>{items}</ul>")
    return "".join(rows)


def _op_label(op: Op) -> str:
    label = op.f
    if op.value is not None:
        label += f" {op.value}"
    if op.position is not None:
        label += f" @{format_position(op.position)}"
    if op.f == "read" and op.type == "ok":
        label += f" ({len(op.entries)} entries{', final' if op.final else ''})"
    if op.consumer is not None:
        label += f" by {op.consumer}"
    elif op.subscription is not None:
        label += f" of {op.subscription}"
    return label


def witness_timeline(page: Page, case: Case, ops_by_event: dict[int, Op], steps: dict[int, NemesisStep]) -> str:
    """The witness's operations (and nemesis steps), one lane per process, over the witness's own time span."""
    ops: list[Op] = []
    marks: list[NemesisStep] = []
    for i in case.ops:
        op = ops_by_event.get(i)
        if op is not None and op not in ops:
            ops.append(op)
        elif i in steps:
            marks.append(steps[i])
    if not ops and not marks:
        return ""
    starts = [op.inv_time for op in ops] + [s.time for s in marks]
    ends = [op.cmp_time if op.cmp_time is not None else op.inv_time for op in ops] + [s.time for s in marks]
    t0, t1 = min(starts), max(ends)
    lanes: list[object] = [*sorted({op.process for op in ops})]
    if marks:
        lanes.append("nemesis")
    height = LANE * len(lanes) + 30
    x = Scale(t0, t1 if t1 > t0 else t0 + 1, 110, W - RIGHT - 10)
    parts = [
        f'<svg class="timeline" width="{W}" height="{height}" xmlns="http://www.w3.org/2000/svg">'
        f'<g class="faults">{page.shades(t0, t1, x, 0, LANE * len(lanes))}</g>'
    ]
    for k, p in enumerate(lanes):
        parts.append(
            f'<g class="lane" data-process="{esc(p)}"><line x1="110" y1="{k * LANE + LANE / 2}" x2="{W - RIGHT}" '
            f'y2="{k * LANE + LANE / 2}" class="grid"/><text x="4" y="{k * LANE + 15}" class="lane-name">'
            f"{'nemesis' if p == 'nemesis' else f'process {p}'}</text>"
        )
        for op in ops:
            if op.process != p:
                continue
            x0, x1 = x(op.inv_time), x(op.cmp_time if op.cmp_time is not None else t1)
            label = _op_label(op)
            # A label that would run past the right edge ends where its operation begins.
            near_end = x0 > W - RIGHT - 6 * len(label)
            tx, anchor = (x0 - 3, "end") if near_end else (x0 + 3, "start")
            parts.append(
                f'<rect x="{x0:.1f}" y="{k * LANE + 3}" width="{max(x1 - x0, 2):.1f}" height="{LANE - 6}" '
                f'class="op {op.type}" data-f="{esc(op.f)}"><title>{esc(label)} {op.type}, events '
                f"{op.inv_index}-{op.cmp_index}, {format_time(op.inv_time)} to {format_time(op.cmp_time)}"
                f'</title></rect><text x="{tx:.1f}" y="{k * LANE + 15}" class="op" text-anchor="{anchor}">'
                f"{esc(label)}</text>"
            )
        if p == "nemesis":
            for s in marks:
                px = x(s.time)
                what = f"{s.f} {s.node}" + (f" ({s.heals})" if s.heals else "")
                tx, anchor = (px - 7, "end") if px > W - RIGHT - 6 * len(what) else (px + 7, "start")
                parts.append(
                    f'<path class="step" d="M{px:.1f},{k * LANE + 3}l5,8l-5,8l-5,-8Z"><title>{esc(what)} '
                    f"{format_time(s.time)}, event {s.index}</title></path>"
                    f'<text x="{tx:.1f}" y="{k * LANE + 15}" class="op" text-anchor="{anchor}">{esc(what)}</text>'
                )
        parts.append("</g>")
    y = LANE * len(lanes) + 18
    parts.append(f'<text x="110" y="{y}" class="tick">{format_time(t0)}</text>')
    parts.append(f'<text x="{W - RIGHT}" y="{y}" class="tick" text-anchor="end">{format_time(t1)}</text></svg>')
    during = [f for f in page.faults if f.start <= t1 and f.end >= t0]
    if during:
        parts.append(
            "<p class='during'>Faults during the witness (shaded): "
            + ", ".join(f"{esc(f.kind)} on {esc(f.node)}" for f in during[:10])
            + (f" and {len(during) - 10} more" if len(during) > 10 else "")
            + "</p>"
        )
    return "".join(parts)


def _percentile(sorted_values: list[int], q: float) -> int | None:
    if not sorted_values:
        return None
    return sorted_values[min(int(q * len(sorted_values)), len(sorted_values) - 1)]


def operations_table(page: Page, ops: Sequence[Op]) -> str:
    counts: Counter[tuple[str, str]] = Counter((op.f, op.type) for op in ops)
    latencies: dict[str, list[int]] = defaultdict(list)
    for op in ops:
        if op.type == "ok" and op.cmp_time is not None:
            latencies[op.f].append(op.cmp_time - op.inv_time)
    rows = [
        "<table id='operations'><tr><th>operation</th><th>ok</th><th>fail</th><th>info</th>"
        "<th>ok latency p50</th><th>p99</th></tr>"
    ]
    for f in page.fs:
        lat = sorted(latencies.get(f, []))
        p50, p99 = _percentile(lat, 0.5), _percentile(lat, 0.99)
        rows.append(
            f'<tr data-f="{esc(f)}"><td>{esc(f)}</td>'
            + "".join(f"<td>{counts[(f, t)]}</td>" for t in OUTCOMES)
            + f"<td>{'-' if p50 is None else duration(p50)}</td><td>{'-' if p99 is None else duration(p99)}</td></tr>"
        )
    rows.append("</table>")
    return "".join(rows)


def topics_table(report: Report) -> str:
    rows = [
        "<table id='topics'><tr><th>topic</th><th>ops</th><th>appends ok</th><th>fail</th><th>info</th>"
        "<th>reads and consumers' ops</th><th>anomalies</th></tr>"
    ]
    ordered = sorted(report.topics.items(), key=lambda kv: (-kv[1].anomalies, kv[0]))
    for topic, s in ordered[:MAX_TOPIC_ROWS]:
        rows.append(
            f"<tr><td>{esc(topic)}</td><td>{s.ops}</td><td>{s.appends_ok}</td><td>{s.appends_fail}</td>"
            f"<td>{s.appends_info}</td><td>{s.reads}</td><td>{s.anomalies}</td></tr>"
        )
    rows.append("</table>")
    if len(ordered) > MAX_TOPIC_ROWS:
        rows.append(f"<p>... and {len(ordered) - MAX_TOPIC_ROWS} more topics (those with anomalies first)</p>")
    return "".join(rows)


def _subscription_table(report: Report) -> str:
    """The subscription figures of the report (docs/history.md, Consumers) as a table: one row per
    subscription and fault kind, one column per figure; nothing when the report has none."""
    figures = list(getattr(report, "subscriptions", None) or [])
    if not figures:
        return ""
    names = [f.name for f in dataclasses.fields(figures[0])] if dataclasses.is_dataclass(figures[0]) else []
    if not names:
        return ""
    head = "".join(f"<th>{esc(n.replace('_', ' '))}</th>" for n in names)
    body = []
    for fig in figures[:MAX_SUBSCRIPTION_ROWS]:
        cells = []
        for n in names:
            v = getattr(fig, n)
            text = "-" if v is None else f"{v:.1f}" if isinstance(v, float) else short_topic(v) if n == "topic" else v
            cells.append(f"<td>{esc(text)}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    more = (
        f"<p>... and {len(figures) - MAX_SUBSCRIPTION_ROWS} more rows</p>"
        if len(figures) > MAX_SUBSCRIPTION_ROWS
        else ""
    )
    return (
        "<h2>Subscriptions</h2><p>What Pulsar does not promise, measured per subscription and per kind of the latest "
        "fault before the delivery; what the final drain's consumers received is under <b>drain</b>.</p>"
        f"<p id='waited-for-drain'>{getattr(report, 'waited_for_drain', 0)} messages waited for the drain: their "
        "subscription had no consumer during the run.</p>"
        f"<table id='subscriptions'><tr>{head}</tr>{''.join(body)}</table>{more}"
    )


CSS = """body{font-family:sans-serif;margin:2em;max-width:960px;color:#222}.valid{color:#060}.invalid{color:#a00}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ccc;padding:2px 8px;text-align:right}
td:first-child,th:first-child{text-align:left}figure{margin:0 0 1em 0}
.legend{list-style:none;padding:0;margin:.2em 0 .8em 0;font-size:12px}.legend li{display:inline-block;margin-right:1em}
rect.fault{fill-opacity:.2}rect.phase-drain{fill:#888;fill-opacity:.15}.legend rect.fault,td rect.fault{fill-opacity:.5}
rect.op.ok{fill:#8c8}rect.op.fail{fill:#e88}rect.op.info{fill:#ec6}text.op{font-size:10px}
text.lane-name,text.tick{font-size:11px;fill:#444}.axis{stroke:#444}.grid{stroke:#eee}
.mark,.swatch{fill:var(--c,#36c);stroke:var(--c,#36c)}.mark.ok{stroke:none;fill-opacity:.7}.mark.fail{fill:none;stroke-width:1.5}
.mark.info{fill:none;stroke-width:1.2}.mark.key{--c:#444}.rate{fill:none;stroke:var(--c,#36c);stroke-width:1.5}
.mark.key{--c:#444}.rate.fail{stroke-dasharray:5 3}.rate.info{stroke-dasharray:2 2}.rate.key{--c:#444}
.plot-name{font-size:12px;font-weight:bold}.lag{fill:#36c}.step{fill:#a00}section.anomaly{border-top:1px solid #ddd}
#unavailability td{white-space:nowrap}
.during{font-size:12px;color:#555;margin-top:0}"""


def render(path: str, report: Report, ops: list[Op], nemesis: Sequence[NemesisStep] = ()) -> str:
    """The page for one audited history: its operations and the nemesis's steps (spark/faults.py)."""
    page = Page(ops, nemesis)
    ops_by_event: dict[int, Op] = {}
    for op in ops:
        ops_by_event[op.inv_index] = op
        if op.cmp_index is not None:
            ops_by_event[op.cmp_index] = op
    steps = {s.index: s for s in nemesis}
    grouped: dict[str, list[Case]] = defaultdict(list)
    for c in report.cases:
        grouped[c.anomaly].append(c)
    names = sorted(grouped, key=lambda n: (ANOMALIES.index(n) if n in ANOMALIES else len(ANOMALIES), n))
    verdict = "valid" if report.valid else f"INVALID: {len(report.cases)} anomalies ({', '.join(names)})"
    kinds = ", ".join(f"{k} x{sum(1 for f in page.faults if f.kind == k)}" for k in page.kinds) or "none"
    out = [
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>audit {esc(path)}</title>"
        f"<style>{CSS}\n{page.css()}</style></head><body><h1>Audit of {esc(path)}</h1>",
        f"<h2 id='verdict' class='{'valid' if report.valid else 'invalid'}'>{esc(verdict)}</h2>",
        f"<p id='summary'>{report.ops:,} operations on {len(report.topics):,} topics over "
        f"{(page.t1 - page.t0) / 1e9:.3f} s; faults: {esc(kinds)}.</p>",
    ]
    if names:
        out.append(
            "<ul id='anomaly-index'>"
            + "".join(f"<li><a href='#anomaly-{slug(n)}'>{esc(n)}</a> ({len(grouped[n])})</li>" for n in names)
            + "</ul>"
        )
    out.append("<h2>Faults and unavailability</h2>")
    out.append(
        "<p>Each fault from its injection to its heal, and per topic that had any operation the time from the "
        "injection to the completion of the first successful operation on it invoked after the injection "
        "(the row's tooltip lists every topic).</p>"
    )
    out.append(page.legend())
    out.append(unavailability_table(page, ops))
    out.append("<h2>Latency of every operation</h2>")
    out.append(latency_plot(page, ops))
    out.append("<h2>Throughput per operation (completions per second)</h2>")
    out.append(throughput_plots(page, ops))
    out.append(operations_table(page, ops))
    out.append("<h2>Read lag (from an append's acknowledgement to the first read that shows it)</h2>")
    out.append(read_lag_plot(page, ops))
    out.append(_subscription_table(report))
    out.append("<h2>Topics</h2>")
    out.append(topics_table(report))
    for name in names:
        cases = grouped[name]
        out.append(f"<section class='anomaly' id='anomaly-{slug(name)}' data-anomaly='{esc(name)}'>")
        out.append(f"<h2>{esc(name)} ({len(cases)})</h2>")
        for c in cases[:MAX_CASES]:
            out.append(f"<div class='case' data-ops='{','.join(map(str, c.ops))}'>")
            out.append(f"<p><b>{esc(c.topic)}</b>, events {list(c.ops)}: {esc(c.explanation)}</p>")
            out.append(witness_timeline(page, c, ops_by_event, steps))
            out.append("</div>")
        if len(cases) > MAX_CASES:
            out.append(f"<p>... and {len(cases) - MAX_CASES} more (see the JSON report)</p>")
        out.append("</section>")
    out.append("</body></html>")
    return "\n".join(out)
