"""The mutation campaign over spec/ (issue 47, item 5): one-rule changes to a spec, each checked by TLC.

A catalogue (spec/mutations.toml) lists mutants: a spec, a model config of spec/, and one textual
change of one rule (an exact `old` text, found once in the spec, and its `new` text), with the reason
the change is a plausible bug. Each mutant is applied to a copy of spec/'s modules in a temporary
directory and model-checked; TLC's first violated invariant or property is what killed it. A mutant
no property catches survives: the catalogue says why that is harmless, or the spec gains a property
that kills it. `pulsar-ref spec mutate` runs the campaign and compares with what the catalogue expects.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from conformance.tlc import PROFILES, SPEC_DIR, Outcome, TLCError, config_properties, run_tlc

KILLED = "killed"
SURVIVED = "survived"
ERROR = "error"


class CatalogueError(Exception):
    """The mutation catalogue is malformed: says which entry and field, and what is wrong."""


@dataclass(frozen=True)
class Mutant:
    id: str  # unique
    spec: str  # module file in spec/, e.g. "ledger.tla"
    config: str  # .cfg in spec/: the model TLC checks the mutant on
    old: str  # exact text, found exactly once in the spec
    new: str  # its replacement
    reason: str  # the bug the change stands for
    profile: str  # ci: in the fast subset; deep: only with --profile deep
    expect: str  # killed | survived
    survives: str = ""  # for expect = survived: why that is harmless (or what property now kills it)

    def mutated_text(self, original: str) -> str:
        return original.replace(self.old, self.new, 1)


@dataclass
class MutantResult:
    mutant: Mutant
    status: str  # killed | survived | error
    killed_by: str  # the property TLC reported violated ('' unless killed)
    distinct_states: int
    seconds: float
    error: str = ""

    @property
    def expected(self) -> bool:
        return self.status == self.mutant.expect


def load_catalogue(path: Path | None = None, spec_dir: Path | None = None) -> list[Mutant]:
    """Read and validate the catalogue; every `old` text must occur exactly once in its spec."""
    import tomllib

    path = path or SPEC_DIR / "mutations.toml"
    spec_dir = spec_dir or path.parent
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise CatalogueError(f"cannot read the mutation catalogue {path}: {exc}") from exc
    mutants: list[Mutant] = []
    ids: set[str] = set()
    texts: dict[str, str] = {}
    for i, entry in enumerate(data.get("mutant", []), start=1):
        where = f"{path}: mutant #{i} ({entry.get('id', '?')})"
        unknown = sorted(set(entry) - {"id", "spec", "config", "old", "new", "reason", "profile", "expect", "survives"})
        if unknown:
            raise CatalogueError(f"{where}: unknown field {', '.join(unknown)}")
        missing = [k for k in ("id", "spec", "config", "old", "reason") if not entry.get(k)]
        if "new" not in entry:
            missing.append("new")
        if missing:
            raise CatalogueError(f"{where}: missing {', '.join(missing)}")
        if entry["id"] in ids:
            raise CatalogueError(f"{where}: duplicate id")
        ids.add(entry["id"])
        profile = entry.get("profile", "deep")
        if profile not in PROFILES:
            raise CatalogueError(f"{where}: profile must be one of {', '.join(PROFILES)}")
        expect = entry.get("expect", KILLED)
        if expect not in (KILLED, SURVIVED):
            raise CatalogueError(f"{where}: expect must be '{KILLED}' or '{SURVIVED}'")
        if expect == SURVIVED and not entry.get("survives"):
            raise CatalogueError(f"{where}: expect = 'survived' needs survives = '<why it is harmless>'")
        if entry["old"] == entry["new"]:
            raise CatalogueError(f"{where}: old and new are the same text: not a mutation")
        spec_file = spec_dir / entry["spec"]
        if not (spec_dir / entry["config"]).is_file():
            raise CatalogueError(f"{where}: no model config {entry['config']} in {spec_dir}")
        if entry["spec"] not in texts:
            try:
                texts[entry["spec"]] = spec_file.read_text()
            except OSError as exc:
                raise CatalogueError(f"{where}: cannot read the spec {spec_file}: {exc}") from exc
        count = texts[entry["spec"]].count(entry["old"])
        if count != 1:
            what = "is not in" if count == 0 else f"occurs {count} times in"
            raise CatalogueError(
                f"{where}: the old text {entry['old']!r} {what} {entry['spec']} "
                "(it must occur exactly once: the spec changed, or the text needs more context)"
            )
        mutants.append(
            Mutant(
                id=entry["id"],
                spec=entry["spec"],
                config=entry["config"],
                old=entry["old"],
                new=entry["new"],
                reason=entry["reason"],
                profile=profile,
                expect=expect,
                survives=entry.get("survives", ""),
            )
        )
    return mutants


def killer(violated: str, config: Path) -> str:
    """The property that killed a mutant. TLC 2.15 names a violated invariant or action property but
    not a temporal one: then the config's temporal properties are the candidates."""
    if violated != "temporal properties":
        return violated
    props = sorted(config_properties(config, ("PROPERTY", "PROPERTIES")))
    return props[0] if len(props) == 1 else f"temporal: one of {', '.join(props)}"


def run_mutant(
    mutant: Mutant,
    spec_dir: Path | None = None,
    *,
    workers: int = 1,
    on_progress: Callable[[str], None] | None = None,
) -> MutantResult:
    """Apply the mutant to a copy of spec/'s modules (the others unchanged: a spec may extend or
    instance them) and run TLC on its model."""
    spec_dir = spec_dir or SPEC_DIR
    with tempfile.TemporaryDirectory(prefix="mutant-") as tmp:
        work = Path(tmp)
        for module in spec_dir.glob("*.tla"):
            shutil.copy(module, work / module.name)
        shutil.copy(spec_dir / mutant.config, work / mutant.config)
        target = work / mutant.spec
        original = target.read_text()
        mutated = mutant.mutated_text(original)
        if mutated == original:  # load_catalogue checked it; a catalogue built by hand may not be
            raise CatalogueError(f"mutant {mutant.id}: the old text is not in {mutant.spec}")
        target.write_text(mutated)
        try:
            result = run_tlc(
                target, work / mutant.config, workers=workers, on_progress=on_progress, short=mutant.profile == "ci"
            )
        except TLCError as exc:
            return MutantResult(mutant, ERROR, "", 0, 0.0, f"{exc.kind.value}: {exc.message}")
    if result.outcome is Outcome.VIOLATION:
        return MutantResult(
            mutant, KILLED, killer(result.violated, spec_dir / mutant.config), result.distinct_states, result.seconds
        )
    if result.outcome is Outcome.DEADLOCK:  # -deadlock is on: not expected, but it is a catch
        return MutantResult(mutant, KILLED, "deadlock", result.distinct_states, result.seconds)
    return MutantResult(mutant, SURVIVED, "", result.distinct_states, result.seconds)


# ---- The table, in spec/mutations.md between these markers ---------------------------------

TABLE_BEGIN = "<!-- mutate:table:begin (generated by `pulsar-ref spec mutate --profile deep --write`) -->"
TABLE_END = "<!-- mutate:table:end -->"


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def markdown_table(results: list[MutantResult]) -> str:
    killed = sum(r.status == KILLED for r in results)
    survived = sum(r.status == SURVIVED for r in results)
    errors = len(results) - killed - survived
    lines = [
        f"{len(results)} mutants: {killed} killed, {survived} survived"
        + (f", {errors} errors" if errors else "")
        + f" (TLC time {sum(r.seconds for r in results):.0f} s, 1 worker).",
        "",
        "| mutant | spec | model | the change stands for | result | killed by / why it survives | states | time |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        m = r.mutant
        if r.status == KILLED:
            why = f"`{r.killed_by}`"
        elif r.status == SURVIVED:
            why = _cell(m.survives) or "**unexplained**"
        else:
            why = _cell(r.error)
        lines.append(
            f"| `{m.id}` | {m.spec.removesuffix('.tla')} | `{m.config}` | {_cell(m.reason)} | {r.status} | {why} "
            f"| {r.distinct_states:,} | {r.seconds:.1f}s |"
        )
    return "\n".join(lines)


def write_table(page: Path, results: list[MutantResult]) -> None:
    """Replace the generated table in `page` (between the markers) with these results."""
    text = page.read_text()
    start, end = text.find(TABLE_BEGIN), text.find(TABLE_END)
    if start < 0 or end < start:
        raise CatalogueError(f"{page} has no table markers ({TABLE_BEGIN} ... {TABLE_END})")
    page.write_text(text[: start + len(TABLE_BEGIN)] + "\n" + markdown_table(results) + "\n" + text[end:])
