"""`pulsar-ref conform`: replay TLC behaviours against the implementation's pure cores.

For each model of spec/models.toml in the profile: a model TLC passes has its whole state
graph replayed (every edge once, each spec state compared with the implementation's
abstraction); a mutation model's counterexample is replayed as a regression trace, which the
fixed implementation must refuse. See conformance/replay.py and conformance/suite.py.
Then (ci profile, ledger.tla chosen, no --model) trace validation of DEFAULT_TRACES seeded runs of
the cores (conformance/trace_validation.py: TLC must accept each). Then the mutation score
(conformance/mutants.py): each deliberately broken core of the catalogue is patched in and the
checks it names are run again; every one must fail (the mutant is killed).

Exit status: 0 all replayed models conform, every mutant run is killed and every requested spec
is supported; 1 a mismatch (a behaviour the implementation does not follow, a mutation trace it
follows to the end, a graph not fully covered), a rejected trace or a surviving mutant; 2 bad arguments or TLC
unavailable; 3 no mismatch, but some requested specs have no replay mapping yet (reported, not passed).
"""

from __future__ import annotations

import argparse
import sys
import time

from conformance import mutants as mutation
from conformance import simulation
from conformance.replay import GraphReplay
from conformance.suite import Behaviours, ModelResult, behaviours_of, mapping_for, replay_model, supported
from conformance.tlc import PROFILES, ManifestError, Model, Outcome, TLCError, load_manifest
from conformance.trace_validation import summary, validate_traces

SPECS = ("ledger", "fencing", "metadata", "replication", "cursor", "storage")
EXIT_MISMATCH, EXIT_USAGE, EXIT_UNSUPPORTED = 1, 2, 3


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for n, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
        if n == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _row(result: ModelResult) -> list[str]:
    m = result.model
    if result.tlc_outcome:
        return [m.name, "regression", f"MISMATCH ({result.tlc_outcome})", "-", "-", "-", "-", "-"]
    if result.graph is not None:
        g = result.graph
        verdict = "conforms" if result.ok else "MISMATCH"
        return [
            m.name,
            "state graph",
            verdict,
            f"{g.behaviours:,}",
            f"{g.steps:,}",
            f"{g.states_covered:,}/{g.states:,}",
            f"{g.edges_covered:,}/{g.edges:,}",
            f"{g.steps_per_second:,.0f}",
        ]
    assert result.trace is not None
    t = result.trace
    mismatch = t.mismatch
    if result.follow:
        source = "counterexample"
        verdict = f"followed all {t.steps} steps" if result.ok else f"MISMATCH at step {t.steps + 1}"
    elif mismatch is None:
        source = "regression"
        verdict = f"MISMATCH (followed all {result.trace_states - 1} steps of the mutation)"
    else:
        source = "regression"
        why = ", ".join(sorted(mismatch.differing)) or "the cores refused the input"
        verdict = f"refused at step {mismatch.step}/{result.trace_states - 1} {mismatch.action} ({why})"
    rate = result.steps / t.seconds if t.seconds else 0.0
    return [m.name, source, verdict, "1", str(result.steps), "-", "-", f"{rate:,.0f}"]


def main(argv: list[str], prog: str) -> int:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Replay TLC behaviours of the specs' models against the implementation's pure cores "
        "(simulated network, disk and metadata store): every edge of each passing model's state graph; "
        "each ledger.tla mutation's counterexample, which the implementation must refuse; each metadata.tla "
        "violation (a configuration: blind writes, no fencing), which the store must follow. Exit 1 on any "
        "mismatch, 3 if a requested spec has no replay mapping yet. A state graph needs TLC to finish the model: "
        "for those too large to replay whole (ledger-deep: millions of states, under a VIEW whose graph is not "
        "replayable) use --simulate (random behaviours from TLC's simulation mode).",
    )
    parser.add_argument("--spec", choices=SPECS, action="append", help="spec to replay (repeatable; default: all)")
    parser.add_argument("--profile", choices=PROFILES, default="ci", help="which models (default: %(default)s)")
    parser.add_argument("--model", action="append", help="only this model of spec/models.toml (repeatable)")
    parser.add_argument(
        "--seed", type=int, default=0, help="order of the graph walk: 0 = TLC's order, other = shuffled (default: 0)"
    )
    parser.add_argument(
        "--traces",
        type=int,
        metavar="N",
        help="instead: trace validation, implementation -> spec: N seeded runs of the cores (seeds from --seed), "
        "each trace checked by TLC against ledger.tla (conformance/trace_validation.py)",
    )
    parser.add_argument(
        "--real-processes",
        type=int,
        metavar="N",
        help="instead: trace validation of N real-process runs (3 `pulsar-ref bookie --trace` processes, a writer "
        "and a recovery client process racing on one ledger each; seeds from --seed): each process logs its own "
        "events, the logs are merged in each bookie's handling order and each client's order, and TLC checks the "
        "merged trace against ledger.tla (conformance/process_traces.py); per run: accepted, or the first event "
        "the spec cannot match",
    )
    parser.add_argument(
        "--restart-every",
        type=int,
        default=0,
        metavar="K",
        help="with --real-processes: every K-th run is phased instead: the writer adds 1 entry, a bookie of the "
        "ensemble is SIGKILLed and restarted (about 20 s: its metadata session must expire first), the recovery "
        "runs, then the writer adds the rest (default 0: no restarts)",
    )
    parser.add_argument(
        "--cluster-run",
        action="store_true",
        help="instead: trace validation of a broker cluster run: `cluster up` with every bookie and broker tracing "
        "(real ZooKeeper; 3 bookies, 2 brokers, E=Qw=Qa=2, ledgers of 8 entries), `workload` for --duration "
        "seconds with a nemesis (killed bookies: ensemble changes; killed brokers, expired sessions: topics move, "
        "the new owner recovers the last ledger), `cluster down`; then each ledger's logs merged and checked by TLC "
        "(conformance/cluster_traces.py): accepted, rejected (first unmatched event) or not checkable (why)",
    )
    parser.add_argument("--duration", type=float, default=30.0, help="with --cluster-run: workload seconds (30)")
    parser.add_argument("--bookies", type=int, default=3, help="with --cluster-run: bookie processes (3)")
    parser.add_argument(
        "--quorums",
        default="2,2,2",
        metavar="E,QW,QA",
        help="with --cluster-run: the brokers' ledgers' quorums (2,2,2)",
    )
    parser.add_argument(
        "--nemesis",
        default="kill-bookie,kill-broker,expire-session",
        help="with --cluster-run: faults, comma-separated ('' = none; default %(default)s)",
    )
    parser.add_argument(
        "--keep", metavar="DIR", help="with --cluster-run: run in DIR and keep it (default: a temporary directory)"
    )
    parser.add_argument(
        "--check-cluster-traces",
        metavar="TRACE_DIR",
        help="instead: check the logs of a cluster started with `cluster up --trace-dir TRACE_DIR` (after `down`)",
    )
    parser.add_argument(
        "--simulate",
        type=int,
        metavar="N",
        help="instead of state graphs: N distinct random behaviours of each chosen passing model, from TLC's "
        "simulation mode with seed --seed, each replayed and followed to its end (conformance/simulation.py); for "
        "models too large for their whole graph, e.g. --profile deep --model ledger-deep --simulate 500",
    )
    parser.add_argument(
        "--depth", type=int, default=40, help="with --simulate: the longest behaviour, in steps (default: %(default)s)"
    )
    runs = parser.add_mutually_exclusive_group()
    runs.add_argument(
        "--mutants",
        action="store_true",
        help="instead: only the mutation score (each mutant of conformance/mutants.py against the checks it "
        "names, each check also run once without mutants)",
    )
    runs.add_argument(
        "--no-mutants", action="store_true", help="skip the mutation score (run by default with the ci profile)"
    )
    args = parser.parse_args(argv)
    if args.traces is not None:
        return _traces(args.traces, args.seed)
    if args.real_processes is not None:
        return _real_processes(args.real_processes, args.seed, args.restart_every)
    if args.cluster_run or args.check_cluster_traces:
        return _cluster_traces(args)
    try:
        manifest = load_manifest()
    except ManifestError as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if args.mutants and (args.model or args.profile != "ci"):
        print(
            f"{prog}: --mutants runs the catalogue's checks (ci models); --model and --profile do not apply",
            file=sys.stderr,
        )
        return EXIT_USAGE
    if args.mutants:
        return _mutants({m.name: m for m in manifest}, {}, {}, args.seed, [f"{s}.tla" for s in (args.spec or SPECS)])
    specs = [f"{s}.tla" for s in (args.spec or SPECS)]
    models = [m for m in manifest if m.spec in specs and m.profile == args.profile]
    if args.model:
        unknown = sorted(set(args.model) - {m.name for m in manifest})
        if unknown:
            print(f"{prog}: no model {', '.join(unknown)} in spec/models.toml", file=sys.stderr)
            return EXIT_USAGE
        models = [m for m in manifest if m.name in args.model]
        specs = sorted({m.spec for m in models})
    unsupported = [s for s in specs if not supported(s)]
    for spec in unsupported:
        skipped = [m.name for m in models if m.spec == spec]
        print(
            f"{spec}: NOT SUPPORTED (no replay mapping in conformance/ yet); not replayed: {', '.join(skipped) or '-'}"
        )
    todo = [m for m in models if supported(m.spec)]
    if args.simulate is not None:
        return _simulations(todo, args.simulate, args.seed, args.depth, prog)
    simulate_only = [m.name for m in todo if not m.replay]  # too large to replay whole
    if simulate_only and args.model:
        print(f"{prog}: {', '.join(simulate_only)} cannot be replayed whole; add --simulate N", file=sys.stderr)
        return EXIT_USAGE
    for name in simulate_only:
        print(f"{name}: not replayed whole (spec/models.toml: replay = false); use --model {name} --simulate N")
    todo = [m for m in todo if m.replay]
    results: list[ModelResult] = []
    kept: dict[str, Behaviours] = {}
    started = time.monotonic()
    for i, model in enumerate(todo, start=1):
        result = _run(model, i, len(todo), args.seed, kept)
        if result is None:
            return EXIT_USAGE
        results.append(result)
    elapsed = time.monotonic() - started
    if results:
        rows = [["model", "source", "result", "behaviours", "steps", "states", "edges", "steps/s"]]
        rows += [_row(r) for r in results]
        print()
        print(_table(rows))
    graphs = [r.graph for r in results if r.graph is not None]
    traces = [r for r in results if r.trace is not None]
    regressions = [r for r in traces if not r.follow]
    steps = sum(r.steps for r in results)
    replay_seconds = sum(g.seconds for g in graphs) + sum(r.trace.seconds for r in traces if r.trace)
    print()
    print(
        f"behaviours replayed: {sum(g.behaviours for g in graphs) + len(traces):,}; steps: {steps:,}; "
        f"distinct spec states covered: {sum(g.states_covered for g in graphs):,}/{sum(g.states for g in graphs):,}; "
        f"edges covered: {sum(g.edges_covered for g in graphs):,}/{sum(g.edges for g in graphs):,}; "
        f"regression traces refused: {sum(1 for r in regressions if r.ok)}/{len(regressions)}; "
        f"counterexamples followed: {sum(1 for r in traces if r.follow and r.ok)}/{len(traces) - len(regressions)}; "
        f"{steps / replay_seconds if replay_seconds else 0:,.0f} steps/s "
        f"(replay only; {elapsed:.1f}s in all, with TLC)"
    )
    traces_code = 0
    if not args.model and args.profile == "ci" and "ledger.tla" in specs:
        # Trace validation's share of the default run (more with --traces N): implementation -> spec.
        print(f"\ntrace validation: {DEFAULT_TRACES} seeded runs of the cores, checked by TLC ...", flush=True)
        traces_code = _traces(DEFAULT_TRACES, args.seed)
    mutants_code = 0
    if args.no_mutants or args.model or args.profile != "ci":
        print("mutants killed: not run (--no-mutants, --model or a profile other than ci; see --mutants)")
    else:
        baseline = {r.model.name: r.ok for r in results}
        replayed = [s for s in specs if supported(s)]
        mutants_code = _mutants({m.name: m for m in manifest}, kept, baseline, args.seed, replayed)
    failed = [r for r in results if not r.ok]
    for r in failed:
        mismatch = r.graph.mismatch if r.graph is not None else r.trace.mismatch if r.trace and r.follow else None
        if mismatch is not None:
            print(f"\n{mismatch}", file=sys.stderr)
        elif r.trace is not None and r.trace.mismatch is None:
            print(
                f"\n{r.model.name}: the implementation followed the mutation's counterexample to the end",
                file=sys.stderr,
            )
    if failed:
        print(f"\nMISMATCH in {len(failed)} of {len(results)} models: {', '.join(r.model.name for r in failed)}")
        return EXIT_MISMATCH
    if traces_code or mutants_code:
        return traces_code or mutants_code
    if unsupported:
        print(f"\nno mismatch; not supported yet: {', '.join(unsupported)}")
        return EXIT_UNSUPPORTED
    print(f"\nall {len(results)} models conform")
    return 0


DEFAULT_TRACES = 30  # trace-validated runs in a default (ci) run, over trace_validation.CONFIGS


def _traces(count: int, seed: int) -> int:
    """`--traces N`: every trace must be accepted (exit 1 names the first unmatched event of each)."""
    try:
        report = validate_traces(count, seed=seed)
    except TLCError as exc:
        print(f"TLC could not check the traces: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(summary(report))
    return EXIT_MISMATCH if report.rejected else 0


def _real_processes(count: int, seed: int, restart_every: int) -> int:
    """`--real-processes N`: exit 1 if a run is rejected or its logs cannot be merged."""
    from conformance import process_traces
    from conformance.process_runs import ProcessRun

    if count < 1 or restart_every < 0:
        print("--real-processes needs at least 1 run, --restart-every 0 or more", file=sys.stderr)
        return EXIT_USAGE
    started = time.monotonic()

    def progress(run: ProcessRun) -> None:
        killed = "".join(f"; {b} SIGKILLed and restarted" for b in run.restarts)
        print(f"run {run.config.name} seed {run.seed}: {run.writer_output}{killed}; {run.recovery_output}", flush=True)

    try:
        verdicts = process_traces.validate_process_runs(count, seed=seed, on_run=progress, restart_every=restart_every)
    except TLCError as exc:
        print(f"TLC could not check the traces: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(process_traces.summary(verdicts, time.monotonic() - started))
    return 0 if all(v.accepted for v in verdicts) else EXIT_MISMATCH


def _cluster_traces(args: argparse.Namespace) -> int:
    """`--cluster-run` / `--check-cluster-traces DIR`: exit 1 if a ledger is rejected."""
    import shutil
    import tempfile
    from pathlib import Path

    from conformance import cluster_traces

    def say(line: str) -> None:
        print(line, flush=True)

    def show(v: cluster_traces.LedgerVerdict) -> None:
        say(f"  {v.describe()}")

    tmp: str | None = None
    try:
        if args.check_cluster_traces:
            trace_dir = Path(args.check_cluster_traces)
        else:
            directory = Path(args.keep) if args.keep else Path(tmp := tempfile.mkdtemp(prefix="cluster-traces-"))
            say(
                f"cluster run in {directory}: {args.bookies} bookies, quorums {args.quorums}, "
                f"{args.duration:.0f} s of workload, nemesis {args.nemesis or 'none'}"
            )
            try:
                e, qw, qa = (int(x) for x in args.quorums.split(","))
            except ValueError:
                print(f"--quorums needs E,QW,QA (three integers), not {args.quorums!r}", file=sys.stderr)
                return EXIT_USAGE
            if not args.bookies >= e >= qw >= qa >= 1:
                print("--cluster-run needs bookies >= E >= QW >= QA >= 1", file=sys.stderr)
                return EXIT_USAGE
            run = cluster_traces.run_cluster(
                directory,
                duration_s=args.duration,
                seed=args.seed,
                bookies=args.bookies,
                quorums=(e, qw, qa),
                nemesis=args.nemesis,
                progress=say,
            )
            s = run.summary
            say(f"workload: ok {s.ok}, fail {s.fail}, info {s.info}, {s.faults} faults injected ({run.seconds:.0f} s)")
            trace_dir = run.trace_dir
        say(f"checking the ledgers of {trace_dir} ...")
        verdicts, seconds = cluster_traces.check_dir(trace_dir, on_verdict=show)
    except TLCError as exc:
        print(f"TLC could not check the traces: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
    say(cluster_traces.summary(verdicts, seconds))
    return EXIT_MISMATCH if any(v.rejected for v in verdicts) else 0


def _simulations(models: list[Model], count: int, seed: int, depth: int, prog: str) -> int:
    """`--simulate N`: TLC's random behaviours of each passing model, replayed; 1 if one is not followed."""
    if count < 1 or depth < 1:
        print(f"{prog}: --simulate and --depth need a positive number", file=sys.stderr)
        return EXIT_USAGE
    passing = [m for m in models if m.expect is Outcome.PASS]
    rows = [["model", "behaviours", "walks read", "steps", "followed", "TLC s", "replay s", "steps/s"]]
    mismatches = []
    replayed_in_all = 0
    for i, model in enumerate(passing, start=1):
        print(f"[{i}/{len(passing)}] {model.name}: TLC -simulate -seed {seed} (up to {depth} steps) ...", flush=True)
        try:
            sim = simulation.simulate(model, count=count, seed=seed, depth=depth)
        except TLCError as exc:
            print(f"TLC could not simulate {model.name}: {exc}", file=sys.stderr)
            return EXIT_USAGE
        print(f"      {len(sim.behaviours):,} distinct behaviours of {sim.walks:,} walks; replaying ...", flush=True)
        replayed = simulation.replay_simulation(
            mapping_for(model), sim, on_progress=lambda n, total: print(f"      {n:,}/{total:,}", flush=True)
        )
        mismatches += [r.mismatch for r in replayed.mismatches if r.mismatch is not None]
        replayed_in_all += len(replayed.replays)
        followed = len(replayed.replays) - len(replayed.mismatches)
        rate = replayed.steps / replayed.seconds if replayed.seconds else 0.0
        rows.append(
            [model.name, f"{len(sim.behaviours):,}", f"{sim.walks:,}", f"{replayed.steps:,}"]
            + [
                f"{followed:,}/{len(replayed.replays):,}",
                f"{sim.seconds:.1f}",
                f"{replayed.seconds:.1f}",
                f"{rate:,.0f}",
            ]
        )
    print()
    print(_table(rows))
    for mismatch in mismatches[:3]:
        print(f"\n{mismatch}", file=sys.stderr)
    if mismatches:
        print(f"\n{len(mismatches)} behaviours not followed", file=sys.stderr)
        return EXIT_MISMATCH
    print(f"\nall {replayed_in_all:,} behaviours followed")
    return 0


def _mutants(
    models: dict[str, Model], kept: dict[str, Behaviours], baseline: dict[str, bool], seed: int, specs: list[str]
) -> int:
    """The mutation score over the catalogue's mutants with checks of `specs` (only those are tried); 1 if one
    survives."""
    chosen = [m for m in mutation.CATALOGUE if m.specs & set(specs)]
    if not chosen:
        print("mutants killed: 0/0 (no mutant of these specs)")
        return 0

    def behaviours(name: str) -> Behaviours:
        if name not in kept:
            kept[name] = behaviours_of(models[name])
        return kept[name]

    print(f"\nmutation score: {len(chosen)} mutants (conformance/mutants.py) ...", flush=True)

    def show(v: mutation.Verdict) -> None:
        if v.killed:
            print(f"  {v.mutant.name}: killed by {v.killed_by}: {v.how} ({v.seconds:.1f}s)", flush=True)
        else:
            print(f"  {v.mutant.name}: SURVIVED {v.error or ''}".rstrip(), flush=True)
            for line in v.tried:
                print(f"      {line}", flush=True)

    checks = mutation.Checks(behaviours, seed=seed, baseline=baseline)
    try:
        verdicts = mutation.run_mutants(checks, chosen, on_verdict=show, specs=specs)
    except TLCError as exc:
        print(f"TLC could not run a mutant's check: {exc}", file=sys.stderr)
        return EXIT_USAGE
    print(mutation.score(verdicts))
    survivors = [v for v in verdicts if not v.killed]
    return EXIT_MISMATCH if survivors else 0


def _run(model: Model, index: int, total: int, seed: int, kept: dict[str, Behaviours]) -> ModelResult | None:
    kind = "state graph" if model.expect is Outcome.PASS else f"counterexample ({model.violates})"
    print(f"[{index}/{total}] {model.name}: TLC {kind} of {model.spec} with {model.config} ...", flush=True)

    def on_graph(states: int, edges: int) -> None:
        print(f"      graph: {states:,} distinct states, {edges:,} edges; replaying ...", flush=True)

    def on_progress(g: GraphReplay) -> None:
        if g.steps % 5000 == 0:
            print(
                f"      {g.edges_covered:,}/{g.edges:,} edges, {g.states_covered:,}/{g.states:,} states, "
                f"{g.steps_per_second:,.0f} steps/s",
                flush=True,
            )

    try:
        result = replay_model(model, seed=seed, on_graph=on_graph, on_progress=on_progress, keep=kept)
    except TLCError as exc:
        print(f"TLC could not run {model.name}: {exc}", file=sys.stderr)
        return None
    print(f"      {_row(result)[2]}", flush=True)
    if result.trace is not None and not result.follow:
        for number, action, variables in result.trace.consequences:
            print(f"      then at step {number} {action}: {', '.join(sorted(variables))} differ too", flush=True)
    return result
