"""The audit's HTML page (docs/history.md, The report) as a person sees it, in Debian's headless Chromium.

One generated history with consumers holds one anomaly of every kind of spark.report.ONE_CLUSTER_ANOMALIES (injected by
spark/generate.py) and nemesis steps of several kinds: healed faults, a heal without a kind, a failed injection,
a failed heal (so one fault lasts to the end) and a stop. The plain-Python reference checker audits it, the page
is rendered and opened, and what the page shows is compared with what the test works out from the events
themselves: the verdict, one section per anomaly with a lane per process of each witness, the faults shaded on
every plot with a legend, a latency mark of the right shape for every operation, throughput per operation kind,
the unavailability after each fault and the subscription figures.
"""

from __future__ import annotations

import random
import re
from collections import Counter, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from selenium.webdriver.remote.webdriver import WebDriver

from spark.faults import NemesisStep, read_steps
from spark.generate import generate, inject, reindex, write_jsonl
from spark.history import NemesisEvent, Op, read_history
from spark.html import MAX_MARKS, render
from spark.reference import check
from spark.report import ONE_CLUSTER_ANOMALIES, Case, Report, TopicSummary
from tests.browser import headless_chromium, rows, screenshot, text

Event = dict[str, Any]


@dataclass(frozen=True)
class Expected:
    """A fault as the test's own nemesis script makes it."""

    kind: str
    node: str
    start: int
    end: int  # the heal's time, or the end of the history


def _nemesis(events: list[Event]) -> list[Event]:
    """The nemesis's steps over the run, at fixed fractions of its span."""
    t0, t1 = events[0]["time"], events[-1]["time"]

    def at(fraction: float, f: str, node: str, **fields: Any) -> Event:
        step = {"time": t0 + int((t1 - t0) * fraction), "process": "nemesis", "type": "info", "f": f, "value": node}
        return step | fields

    return [
        at(0.10, "kill-bookie", "bookie-1", detail="SIGKILL pid 11"),
        at(0.25, "heal", "bookie-1", fault="kill-bookie", detail="started again"),
        at(0.30, "pause-broker", "broker-0", detail="SIGSTOP pid 12"),
        at(0.45, "heal", "broker-0", fault="pause-broker", detail="SIGCONT pid 12"),
        at(0.50, "kill-proxy", "-", error="no running node to inject it into"),
        at(0.55, "kill-broker", "broker-1", detail="SIGKILL pid 13"),
        at(0.62, "heal", "broker-1", detail="started again (heal_all: no kind)"),
        at(0.70, "expire-session", "bookie-2", detail="session ended"),
        at(0.80, "heal", "bookie-2", fault="expire-session", error="it would not start"),
        at(0.85, "stopped", "-", error="RuntimeError: schedule ended"),
    ]


def _expected_faults(events: list[Event]) -> list[Expected]:
    """Read off the test's own script: which injections hold, and what ends each."""
    end = max(ev["time"] for ev in events)
    steps = [ev for ev in events if ev["process"] == "nemesis"]
    out = []
    for s in steps:
        if s["f"] in ("heal", "stopped") or "error" in s:
            continue
        heal = next(
            (
                h
                for h in steps
                if h["index"] > s["index"]
                and h["f"] == "heal"
                and h["value"] == s["value"]
                and h.get("fault", s["f"]) == s["f"]
                and "error" not in h
            ),
            None,
        )
        out.append(Expected(s["f"], s["value"], s["time"], end if heal is None else heal["time"]))
    return out


def _audit(events: list[Event], path: Path) -> tuple[Report, list[Op]]:
    write_jsonl(events, str(path))
    nemesis: list[NemesisEvent] = []
    ops = read_history(str(path), nemesis=nemesis)
    return check(ops, nemesis), ops


def _with_every_anomaly(events: list[Event], path: Path) -> tuple[list[Event], Report, list[Op]]:
    """Inject the anomalies the audit does not flag yet until it flags every kind (a later defect may mask an
    earlier one, hence the rounds)."""
    seed = 0
    report, ops = _audit(events, path)
    for _ in range(6):
        missing = [a for a in ONE_CLUSTER_ANOMALIES if a not in {c.anomaly for c in report.cases}]
        if not missing:
            return events, report, ops
        for anomaly in missing:
            for _ in range(10):
                seed += 1
                try:
                    injected = inject(events, anomaly, random.Random(seed))
                except ValueError as e:
                    pytest.fail(f"spark/generate.py has no generator for the anomaly {anomaly!r} ({e})")
                if injected is not None:
                    events = injected[0]
                    break
        report, ops = _audit(events, path)
    missing = [a for a in ONE_CLUSTER_ANOMALIES if a not in {c.anomaly for c in report.cases}]
    pytest.fail(f"no generated history shows every anomaly; the audit never flagged {missing}")


@dataclass
class Shown:
    events: list[Event]
    report: Report
    faults: list[Expected]
    browser: WebDriver


@pytest.fixture(scope="module")
def shown(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Shown]:
    tmp = tmp_path_factory.mktemp("report-page")
    events = generate(seed=1, ops=300, processes=6, topics=2, consumers=4, nemesis=False)
    events = reindex(sorted(events + _nemesis(events), key=lambda ev: ev["time"]))
    events, report, ops = _with_every_anomaly(events, tmp / "h.jsonl")
    page = tmp / "report.html"
    page.write_text(render(str(tmp / "h.jsonl"), report, ops, read_steps(str(tmp / "h.jsonl"))))
    for browser in headless_chromium():
        browser.get(page.as_uri())
        yield Shown(events, report, _expected_faults(events), browser)
        screenshot(browser, tmp / "report.png")


def _operations(events: list[Event]) -> list[tuple[Event, Event | None]]:
    """Invokes paired with their completions (None: never completed, counts as info)."""
    pending: dict[Any, int] = {}
    pairs: list[tuple[Event, Event | None]] = []
    for ev in events:
        if ev["process"] == "nemesis":
            continue
        if ev["type"] == "invoke":
            pending[ev["process"]] = len(pairs)
            pairs.append((ev, None))
        else:
            at = pending.pop(ev["process"])
            pairs[at] = (pairs[at][0], ev)
    return pairs


def _outcome(done: Event | None) -> str:
    return "info" if done is None else str(done["type"])


def _ns(shown_text: str) -> float:
    """A duration as the page writes it ("12.3 ms", "1.234 s", "5.0 µs", "7 ns") in nanoseconds."""
    m = re.fullmatch(r"([0-9.]+) (ns|µs|ms|s)", shown_text.strip())
    assert m, f"not a duration: {shown_text!r}"
    return float(m[1]) * {"ns": 1, "µs": 1e3, "ms": 1e6, "s": 1e9}[m[2]]


def _js(browser: WebDriver, script: str, *args: Any) -> Any:
    return browser.execute_script(script, *args)


def test_the_verdict_names_every_anomaly(shown: Shown) -> None:
    verdict = text(shown.browser, "verdict")
    assert verdict.startswith(f"INVALID: {len(shown.report.cases)} anomalies")
    for anomaly in ONE_CLUSTER_ANOMALIES:
        assert anomaly in verdict
    colour = _js(shown.browser, "return getComputedStyle(document.getElementById('verdict')).color")
    assert colour == "rgb(170, 0, 0)"


def test_each_anomaly_has_a_section_whose_witnesses_have_one_lane_per_process(shown: Shown) -> None:
    cases = defaultdict(list)
    for c in shown.report.cases:
        cases[c.anomaly].append(c)
    drawn = _js(
        shown.browser,
        """return [...document.querySelectorAll('section.anomaly')].map(s => [s.dataset.anomaly,
             s.querySelector('h2').innerText,
             [...s.querySelectorAll('div.case')].map(d => [d.dataset.ops,
                 [...d.querySelectorAll('svg.timeline g.lane')].map(g => [g.dataset.process,
                      g.querySelector('text.lane-name').textContent, g.querySelectorAll('rect.op').length])])])""",
    )
    assert [name for name, _, _ in drawn] == [a for a in ONE_CLUSTER_ANOMALIES if a in cases]
    for name, heading, witnesses in drawn:
        assert heading == f"{name} ({len(cases[name])})"
        assert len(witnesses) == min(len(cases[name]), 50)
        assert {w[0] for w in witnesses} == {",".join(map(str, c.ops)) for c in cases[name]}
        for ops, lanes in witnesses:
            witness = [shown.events[int(i)] for i in ops.split(",")]
            processes = sorted({str(ev["process"]) for ev in witness})
            assert sorted(p for p, _, _ in lanes) == processes, (name, ops)
            for process, label, bars in lanes:
                assert label == ("nemesis" if process == "nemesis" else f"process {process}")
                if process != "nemesis":
                    assert bars >= 1, (name, ops, process)


def test_every_plot_shades_each_fault_in_the_colour_of_its_kind(shown: Shown) -> None:
    expected = {(f.kind, f.node, f.start, f.end) for f in shown.faults}
    assert {k for k, _, _, _ in expected} == {"kill-bookie", "pause-broker", "kill-broker", "expire-session"}
    plots = _js(
        shown.browser,
        """return [...document.querySelectorAll('figure.plot')].map(p => [p.id,
             [...p.querySelectorAll('rect.fault')].map(r => [r.dataset.kind, r.dataset.node, r.dataset.start,
                  r.dataset.end, getComputedStyle(r).fill, r.getBBox().width])])""",
    )
    ids = [i for i, _ in plots]
    assert "latency-plot" in ids and "read-lag-plot" in ids and any(i.startswith("throughput-") for i in ids)
    fills: dict[str, set[str]] = defaultdict(set)
    for plot_id, rects in plots:
        assert {(k, n, int(a), int(b)) for k, n, a, b, _, _ in rects} == expected, plot_id
        assert all(width > 0 for *_, width in rects), plot_id
        for kind, *_, fill, _ in rects:
            fills[kind].add(fill)
    assert all(len(f) == 1 for f in fills.values()), fills  # one colour per kind, on every plot
    assert len({next(iter(f)) for f in fills.values()}) == len(fills)  # and kinds differ
    legend = _js(
        shown.browser,
        """return [...document.querySelectorAll('#fault-legend li.fault-key')].map(li => [li.dataset.kind,
             li.innerText.trim(), getComputedStyle(li.querySelector('rect')).fill])""",
    )
    counts = Counter(k for k, _, _, _ in expected)
    assert sorted((k, t, fill) for k, t, fill in legend) == sorted(
        (k, f"{k} ({counts[k]})", next(iter(fills[k]))) for k in counts
    )
    failed = text(shown.browser, "failed-steps")
    assert "kill-proxy" in failed and "no running node" in failed and "it would not start" in failed


def test_the_latency_plot_marks_every_operation_by_outcome(shown: Shown) -> None:
    pairs = _operations(shown.events)
    expected = Counter((inv["f"], _outcome(done)) for inv, done in pairs)
    marks = _js(
        shown.browser,
        """return [...document.querySelectorAll('#latency-plot .mark:not(.key)')].map(m => [m.dataset.f,
             ['ok', 'fail', 'info'].find(t => m.classList.contains(t)), m.tagName])""",
    )
    assert Counter((f, t) for f, t, _ in marks) == expected
    shapes = {t: {tag for _, u, tag in marks if u == t} for t in ("ok", "fail", "info")}
    assert shapes["ok"] == {"circle"} and shapes["fail"] == shapes["info"] == {"path"}
    assert {k: v for k, v in expected.items() if k[1] != "ok"}, "the history should hold fail and info operations"
    ds = _js(
        shown.browser,
        "return [...document.querySelectorAll('#latency-plot path.mark.fail:not(.key)')].map(m => m.getAttribute('d'))",
    )
    info = _js(
        shown.browser,
        "return [...document.querySelectorAll('#latency-plot path.mark.info:not(.key)')].map(m => m.getAttribute('d'))",
    )
    assert all(d.count("M") == 2 for d in ds) and all(d.endswith("Z") for d in info)  # a cross, a triangle
    keys = _js(
        shown.browser, "return [...document.querySelectorAll('#latency-plot li')].map(li => li.innerText.trim())"
    )
    fs = sorted({f for f, _ in expected})
    assert sorted(k for k in keys if k in fs) == fs
    assert [k.split(" ")[0] for k in keys if k.split(" ")[0] in ("ok", "fail", "info")] == ["ok", "fail", "info"]
    assert "sampled" not in text(shown.browser, "latency-plot")


def test_throughput_is_plotted_per_operation_kind(shown: Shown) -> None:
    pairs = _operations(shown.events)
    expected = Counter((inv["f"], _outcome(done)) for inv, done in pairs)
    fs = {f for f, _ in expected}
    assert {"append", "read", "receive", "ack"} <= fs
    plots = _js(
        shown.browser,
        """return [...document.querySelectorAll('figure.plot[id^="throughput-"]')].map(p => [p.dataset.f,
             [...p.querySelectorAll('polyline.rate')].map(l => [l.dataset.type, Number(l.dataset.count),
                  l.points.numberOfItems])])""",
    )
    assert sorted(f for f, _ in plots) == sorted(fs)
    for f, lines in plots:
        want = {t: expected[(f, t)] for t in ("ok", "fail", "info") if t == "ok" or expected[(f, t)]}
        assert {t: n for t, n, _ in lines} == want, f
        assert all(points > 10 for _, _, points in lines)
    table = {r[0]: r[1:4] for r in rows(shown.browser, "operations")}
    assert table == {f: [str(expected[(f, t)]) for t in ("ok", "fail", "info")] for f in fs}


def test_the_unavailability_table_has_a_row_per_fault(shown: Shown) -> None:
    pairs = _operations(shown.events)
    topics = sorted({inv["topic"] for inv, _ in pairs})
    ok = [(inv["topic"], inv["time"], done["time"]) for inv, done in pairs if done and done["type"] == "ok"]
    t0 = min(ev["time"] for ev in shown.events)
    shown_rows = rows(shown.browser, "unavailability")
    faults = sorted(shown.faults, key=lambda f: f.start)
    assert len(shown_rows) == len(faults)
    for row, fault in zip(shown_rows, faults, strict=True):
        kind, node, start, lasted, answered, worst, slowest, after_heal = row
        assert (kind, node) == (fault.kind, fault.node)
        assert abs(float(start) - (fault.start - t0) / 1e9) < 0.0006
        healed = fault.end < max(ev["time"] for ev in shown.events)
        assert lasted.endswith("(never healed)") != healed
        assert abs(_ns(lasted.removesuffix(" (never healed)")) - (fault.end - fault.start)) <= 0.0006e9
        waits = {}
        for topic in topics:
            after = [c for t, i, c in ok if t == topic and i >= fault.start]
            waits[topic] = min(after) - fault.start if after else None
        assert answered == f"{sum(w is not None for w in waits.values())} of {len(topics)}"
        assert all(w is not None for w in waits.values()), "every topic answers again in this history"
        longest = max(w for w in waits.values() if w is not None)
        assert abs(_ns(worst) - longest) <= max(longest * 0.001, 0.06e6), (worst, longest)
        assert waits[slowest] == longest
        if healed:  # the stall's figure: how long until every topic served again once the fault was over
            recovered = [min(c for t, i, c in ok if t == topic and i >= fault.end) - fault.end for topic in topics]
            assert abs(_ns(after_heal) - max(recovered)) <= max(max(recovered) * 0.001, 0.06e6), after_heal
        else:
            assert after_heal == "-"


def test_the_subscription_figures_are_a_table(shown: Shown) -> None:
    figures = shown.report.subscriptions
    assert figures, "the history has consumers: the audit measures its subscriptions"
    heads = _js(shown.browser, "return [...document.querySelectorAll('#subscriptions th')].map(h => h.innerText)")
    table = rows(shown.browser, "subscriptions")
    assert len(table) == len(figures)
    column = {h: i for i, h in enumerate(heads)}
    shown_figures = sorted(
        (r[column["subscription"]], r[column["fault"]], int(r[column["deliveries"]]), int(r[column["redeliveries"]]))
        for r in table
    )
    assert shown_figures == sorted((f.subscription, f.fault, f.deliveries, f.redeliveries) for f in figures)
    assert {r[column["fault"]] for r in table} >= {"none", "kill-bookie"}


def test_the_read_lag_plot_has_a_point_per_acknowledged_append_read(shown: Shown) -> None:
    pairs = _operations(shown.events)
    read = {
        (tuple(p), v)
        for inv, done in pairs
        if done and inv["f"] == "read" and done["type"] == "ok"
        for p, v in done["value"]
    }
    acked = [done for inv, done in pairs if done and inv["f"] == "append" and done["type"] == "ok"]
    seen = sum((tuple(a["position"]), a["value"]) in read for a in acked)
    assert 0 < seen < len(acked)  # lost-write and the like leave some acknowledged appends unread
    points = _js(shown.browser, "return document.querySelectorAll('#read-lag-plot circle.lag').length")
    assert points == seen


def test_a_witness_with_a_nemesis_step_gets_a_nemesis_lane(tmp_path: Path) -> None:
    events = generate(seed=3, ops=40, processes=3, topics=1, nemesis=False)
    events = reindex(sorted(events + _nemesis(events), key=lambda ev: ev["time"]))
    write_jsonl(events, str(tmp_path / "h.jsonl"))
    ops = read_history(str(tmp_path / "h.jsonl"))
    step = next(ev for ev in events if ev["process"] == "nemesis" and ev["f"] == "pause-broker")
    op = next(ev for ev in events if ev["process"] != "nemesis" and ev["type"] == "ok")
    case = Case("gap", op["topic"], (op["index"], step["index"]), "a witness naming a fault")
    page = render("h", Report(ops=len(ops), cases=[case]), ops, read_steps(str(tmp_path / "h.jsonl")))
    section = page[page.index("<section class='anomaly' id='anomaly-gap'") :]
    lanes = re.findall(r'<g class="lane" data-process="([^"]+)"', section)
    assert lanes == [str(op["process"]), "nemesis"]
    assert "pause-broker broker-0" in section


def test_a_huge_history_gives_a_page_of_bounded_size() -> None:
    """Drawn marks and table rows are capped: fail and info operations are kept before ok ones are sampled."""
    ops = []
    for n in range(200_000):
        outcome = "fail" if n % 997 == 0 else "info" if n % 1009 == 0 else "ok"
        op = Op(n % 500, "append" if n % 3 else "read", f"persistent://public/default/t{n % 1000}", 2 * n, n * 10**6)
        op.type, op.cmp_index, op.cmp_time = outcome, 2 * n + 1, n * 10**6 + 5 * 10**6 + n % 7 * 10**5
        if op.f == "append":
            op.value = f"v{n}"
            if outcome == "ok":
                op.position = (1, n, 0)
        ops.append(op)
    topics = {f"persistent://public/default/t{k}": TopicSummary(ops=200) for k in range(1000)}
    end = ops[-1].cmp_time or 0
    steps = [NemesisStep(0, k * end // 40, "kill-bookie", f"bookie-{k % 3}", None, None) for k in range(40)]
    page = render("huge", Report(ops=len(ops), cases=[], topics=topics), ops, steps)
    assert len(page) < 4_000_000
    marks = Counter(re.findall(r'class="mark (ok|fail|info) f-', page))
    rare = Counter(op.type for op in ops if op.type != "ok")
    assert marks["fail"] == rare["fail"] and marks["info"] == rare["info"]
    assert 1000 < marks["ok"] <= MAX_MARKS
    assert f"{sum(marks.values()):,} of {len(ops):,} operations drawn (sampled)" in page
    assert page.count('<tr class="fault-row"') == 40
    assert "... and 800 more topics" in page
