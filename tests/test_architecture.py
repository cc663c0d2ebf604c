"""The import rules of docs/architecture.md, read from the source with `ast`: who may import whom, and
that the pure cores (and the pure modules they are made of) do no I/O and import no shell. A broken
rule fails with the importing file, its line, what it imports and the rule."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# (package, what it must not import): metadata <- bookie <- broker <- proxy; impl/ never imports the
# checkers or the CLI; the audit imports nothing of what it audits.
PACKAGE_RULES: list[tuple[str, tuple[str, ...]]] = [
    ("impl", ("conformance", "spark", "pulsar_ref", "tests", "bench")),
    ("spark", ("impl", "conformance", "pulsar_ref", "tests")),
    ("impl.metadata", ("impl.bookie", "impl.broker", "impl.proxy", "impl.cluster", "impl.workload", "impl.web")),
    ("impl.bookie", ("impl.broker", "impl.proxy", "impl.cluster", "impl.workload")),
    ("impl.broker", ("impl.proxy", "impl.cluster", "impl.workload")),
    # The proxy reads the broker registry and names topics through impl/metadata, as the brokers do, and speaks
    # the protocol: it never imports the broker it fronts.
    ("impl.proxy", ("impl.broker", "impl.cluster", "impl.workload", "impl.client")),
    # Pulsar's wire protocol is shared by the broker, the proxy and the client, and imports none of them.
    ("impl.protocol", ("impl.bookie", "impl.broker", "impl.client", "impl.proxy", "impl.cluster", "impl.workload")),
    # The project's Pulsar client speaks the protocol only: it never reaches into a broker or a proxy.
    ("impl.client", ("impl.bookie", "impl.broker", "impl.proxy", "impl.cluster", "impl.workload")),
    ("impl.security", ("impl.metadata", "impl.bookie", "impl.broker", "impl.proxy", "impl.cluster", "impl.workload")),
]

# The pure modules: the protocol cores and the message types, codecs and errors they are made of.
PURE = frozenset(
    [
        "impl.metadata.store",
        "impl.metadata.ledger",
        "impl.metadata.transitions",
        "impl.metadata.layout",
        "impl.bookie.core",
        "impl.bookie.protocol",
        "impl.bookie.entry_format",
        "impl.bookie.client.writer",
        "impl.bookie.client.recovery",
        "impl.bookie.client.read_lac",
        "impl.bookie.client.distribution",
        "impl.bookie.client.errors",
        "impl.bookie.client.ledger_update",
        "impl.broker.managed_ledger_core",
        "impl.broker.cursor_core",
        "impl.broker.ownership_core",
        "impl.broker.replication.replicator",
        "impl.broker.managed_ledger_errors",
        "impl.broker.ledger_list",
        "impl.broker.dispatcher",
        "impl.broker.non_persistent_dispatcher",
        "impl.protocol.entry_codec",
        "impl.metadata.naming",
        "impl.protocol.frames",
        "impl.varint",
        "impl.values",
        "impl.broker.connection",
        "impl.protocol.bitset",
        "impl.protocol.pulsar_api_pb2",
        "impl.protocol.message_id",
        "impl.protocol.murmur3",
        "impl.protocol.session",
        "impl.client.connection",
        "impl.proxy.connection",
        "impl.web.http",
        "impl.security.authorization",
        "impl.broker.web.access",
        "impl.broker.schema.model",
        "impl.broker.schema.compatibility",
    ]
)
# What a pure module may not import: threads, clocks, randomness, sockets, processes, files, RPC, stores.
IO_MODULES = frozenset(
    [
        "threading",
        "time",
        "random",
        "socket",
        "selectors",
        "asyncio",
        "subprocess",
        "concurrent",
        "os",
        "shutil",
        "tempfile",
        "sqlite3",
        "grpc",
        "kazoo",
        "psutil",
        "h11",
        "prometheus_client",
        "pyspark",
    ]
)


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def is_module(name: str) -> bool:
    base = ROOT / name.replace(".", "/")
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def imports(source: str) -> Iterator[tuple[int, str]]:
    """(line, module) of every import that runs (those under `if TYPE_CHECKING:` do not); `from p import m`
    names the module p.m when m is one."""
    tree = ast.parse(source)
    skipped: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            skipped |= {id(n) for child in node.body for n in ast.walk(child)}
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                yield node.lineno, full if is_module(full) else node.module


def within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def violations(module: str, source: str) -> list[str]:
    found = []
    for line, imported in imports(source):
        where = f"{module.replace('.', '/')}.py:{line} imports {imported}"
        for package, banned in PACKAGE_RULES:
            if within(module, package):
                found += [f"{where}: {package} must not import {b}" for b in banned if within(imported, b)]
        if module in PURE:
            if imported.split(".")[0] in IO_MODULES:
                found.append(f"{where}: {module} is a pure module and does no I/O")
            elif within(imported, "impl") and imported not in PURE and imported != "impl":
                found.append(f"{where}: {module} is a pure module and imports only pure modules")
    return found


def sources() -> Iterator[tuple[str, str]]:
    for top in ("impl", "spark"):
        for path in sorted((ROOT / top).rglob("*.py")):
            yield module_name(path), path.read_text()


def test_every_module_keeps_the_import_rules() -> None:
    broken = [v for module, source in sources() for v in violations(module, source)]
    assert not broken, "\n".join(broken)


def test_every_pure_module_exists() -> None:
    assert not [m for m in PURE if not is_module(m)]


@pytest.mark.parametrize(
    ("module", "source", "rule"),
    [
        ("impl.broker.dispatcher", "from impl.broker.managed_ledger import Position", "imports only pure modules"),
        ("impl.bookie.core", "import threading", "does no I/O"),
        ("impl.proxy.connection", "from time import monotonic", "does no I/O"),
        ("impl.metadata.layout", "from impl.bookie import protocol", "must not import impl.bookie"),
        # A core has no process-wide tracing hook to call: its tracer is handed to it (impl/trace.py).
        ("impl.bookie.client.writer", "from impl.trace import Tracer", "imports only pure modules"),
        ("impl.bookie.client.recovery", "from impl import trace", "imports only pure modules"),
        ("impl.broker.service", "import spark.reference", "must not import spark"),
        ("impl.protocol.frames", "from impl.broker import naming", "must not import impl.broker"),
        ("impl.client.api", "from impl.broker.dispatcher import Message", "must not import impl.broker"),
        ("impl.proxy.listener", "from impl.client import Client", "must not import impl.client"),
        ("impl.proxy.directory", "from impl.broker.lookup import decide_lookup", "must not import impl.broker"),
        ("spark.audit", "from pulsar_ref.commands import audit", "must not import pulsar_ref"),
        ("spark.history", "from impl.workload.history import HistoryWriter", "must not import impl"),
    ],
)
def test_each_kind_of_violation_is_caught(module: str, source: str, rule: str) -> None:
    found = violations(module, source)
    assert any(rule in v for v in found), found


def test_type_checking_imports_do_not_count() -> None:
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from impl.metadata.ledger_store import X\n"
    assert violations("impl.bookie.client.ledger_update", source) == []


def test_a_core_may_name_the_tracer_type_for_type_checking_only() -> None:
    source = "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from impl.trace import Tracer\n"
    assert violations("impl.bookie.client.writer", source) == []


# ---- no import circles ---------------------------------------------------------------------------------------
# Every import counts here, also those inside functions and under `if TYPE_CHECKING:`: a circle is a pair of
# modules that each need the other to be read, whenever the import runs.
CIRCLE_TOPS = ("impl", "spark", "pulsar_ref", "conformance", "bench")


def project_modules() -> dict[str, tuple[bool, str]]:
    """module -> (is a package's __init__, source), for every project file but tests and generated code."""
    found = {}
    for top in CIRCLE_TOPS:
        for path in sorted((ROOT / top).rglob("*.py")):
            if "_pb2" not in path.name:
                found[module_name(path)] = (path.name == "__init__.py", path.read_text())
    return found


def import_graph(modules: dict[str, tuple[bool, str]]) -> dict[str, set[str]]:
    """module -> the project modules it imports. `from p import m` is an edge to p.m when m is a module and to p
    otherwise; relative imports are resolved against the importing module's package."""

    def known(name: str) -> str | None:  # the longest project module that `name` is or is inside of
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, (is_package, source) in modules.items():
        package = module if is_package else module.rpartition(".")[0]
        targets: list[str] = []
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                targets += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*parts, base] if base else parts)
                targets += [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
        graph[module] = {t for t in map(known, targets) if t is not None and t != module}
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            child = next(successors, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_circles() -> None:
    graph = import_graph(project_modules())
    found = circles(graph)
    assert not found, "import circles (each module imports, maybe inside a function, another of its line):\n" + (
        "\n".join(
            ", ".join(f"{m} -> {sorted(graph[m] & set(c))}" for m in c)
            for c in found  # who imports whom
        )
    )


@pytest.mark.parametrize(
    ("modules", "circle"),
    [
        # the spark/audit.py <-> spark/cli.py shape: one side imports the other only inside a function
        (
            {
                "spark.audit": (False, "def main():\n    from spark.cli import main\n"),
                "spark.cli": (False, "import spark.audit\n"),
            },
            ["spark.audit", "spark.cli"],
        ),
        # an import for type checking only still makes a circle
        (
            {
                "impl.a": (False, "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from impl.b import B\n"),
                "impl.b": (False, "from impl import c\n"),
                "impl.c": (False, "from .a import A\n"),
                "impl": (True, ""),
            },
            ["impl.a", "impl.b", "impl.c"],
        ),
    ],
)
def test_a_circle_is_caught(modules: dict[str, tuple[bool, str]], circle: list[str]) -> None:
    assert circles(import_graph(modules)) == [circle]


def test_a_line_of_imports_is_no_circle() -> None:
    modules = {"impl.a": (False, "import impl.b\n"), "impl.b": (False, "from impl.c import x\n"), "impl.c": (False, "")}
    assert circles(import_graph(modules)) == []


# ---- the parts' pictures in docs/architecture.md --------------------------------------------------------------
# Each part of docs/architecture.md's "The parts" has a picture generated from the import graph above and the
# rules of PACKAGE_RULES: what the part imports (-->), who imports it, and what it must never import (--x).
# Regenerate after a change of the layering: .venv/bin/python -m tests.test_architecture --write
PARTS: dict[str, str] = {  # part -> its package (the longest matching package wins)
    "metadata": "impl.metadata",
    "bookie": "impl.bookie",
    "protocol": "impl.protocol",
    "client": "impl.client",
    "broker": "impl.broker",
    "web": "impl.web",
    "proxy": "impl.proxy",
    "security": "impl.security",
    "cluster": "impl.cluster",
    "workload": "impl.workload",
    "shared": "impl",  # impl/*.py: the small shared shells (loop server, heap, trace, shutdown)
    "conformance": "conformance",
    "spark": "spark",
    "cli": "pulsar_ref",
}
ARCHITECTURE_MD = ROOT / "docs" / "architecture.md"


def part_of(module: str) -> str | None:
    best = max((p for p, pkg in PARTS.items() if within(module, pkg)), key=lambda p: len(PARTS[p]), default=None)
    return best


def part_edges(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    edges = set()
    for module, targets in graph.items():
        for target in targets:
            a, b = part_of(module), part_of(target)
            if a and b and a != b:
                edges.add((a, b))
    return edges


def banned(part: str) -> list[str]:
    """The parts PACKAGE_RULES forbids `part` to import (only rules about whole parts)."""
    names = {pkg: p for p, pkg in PARTS.items()} | {"impl": "impl"}  # `impl` alone: every part of the cluster
    out: list[str] = []
    for package, forbidden in PACKAGE_RULES:
        if package == PARTS[part] or (package == "impl" and PARTS[part].startswith("impl.")):
            out += [names[f] for f in forbidden if f in names and names[f] not in out]
    return out


def picture(part: str, edges: set[tuple[str, str]]) -> str:
    uses = sorted(b for a, b in edges if a == part)
    used_by = sorted(a for a, b in edges if b == part)
    lines = ["```mermaid", "flowchart LR"]
    if uses:
        lines.append(f"  {part} --> {' & '.join(uses)}")
    if used_by:
        lines.append(f"  {' & '.join(used_by)} --> {part}")
    if banned(part):
        lines.append(f"  {part} --x {' & '.join(banned(part))}")
    if len(lines) == 2:
        lines.append(f"  {part}")
    return "\n".join([*lines, "```"])


def pictures_in(text: str, edges: set[tuple[str, str]]) -> str:
    """`text` with each part's picture (the mermaid block after `<!-- picture: part -->`) redrawn."""
    import re

    def redraw(m: re.Match[str]) -> str:
        return f"<!-- picture: {m.group(1)} -->\n{picture(m.group(1), edges)}"

    return re.sub(r"<!-- picture: (\w+) -->\n```mermaid\n.*?^```$", redraw, text, flags=re.S | re.M)


def test_each_part_has_its_current_picture_and_page() -> None:
    import re

    text = ARCHITECTURE_MD.read_text()
    drawn = re.findall(r"<!-- picture: (\w+) -->", text)
    assert sorted(drawn) == sorted(PARTS), f"parts without a picture: {set(PARTS) - set(drawn)}"
    current = pictures_in(text, part_edges(import_graph(project_modules())))
    assert text == current, "the parts' pictures are stale: .venv/bin/python -m tests.test_architecture --write"
    # each part's heading links to its page(s), which exist
    for part in PARTS:
        heading = re.search(rf"^### .*\(part: {part}\).*$", text, flags=re.M)
        assert heading, f"no heading for the part {part}"
        links = re.findall(r"\]\(([^)#]+)", heading.group(0))
        assert links, f"the part {part} links to no page"
        for link in links:
            assert (ARCHITECTURE_MD.parent / link).resolve().exists(), f"{part}: {link} does not exist"


def test_a_stale_picture_is_caught() -> None:
    edges = {("broker", "metadata")}
    block = "<!-- picture: broker -->\n```mermaid\nflowchart LR\n  broker --> bookie\n```\nafter"
    redrawn = pictures_in(block, edges)
    assert "broker --> metadata" in redrawn and "broker --> bookie" not in redrawn and redrawn.endswith("```\nafter")


if __name__ == "__main__":
    import sys

    if sys.argv[1:] == ["--write"]:
        edges = part_edges(import_graph(project_modules()))
        ARCHITECTURE_MD.write_text(pictures_in(ARCHITECTURE_MD.read_text(), edges))


def test_the_admin_client_does_not_load_the_broker() -> None:
    """`pulsar-ref admin` and the workload import the admin API's client from impl.broker.web; importing
    that package once loaded every route and with them the whole broker, about 0.5 s of every command."""
    probe = "import sys, impl.broker.web.admin_client\nprint(sorted(m for m in sys.modules if m.startswith('impl.')))"
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT)
    assert "impl.broker.web.admin_client" in loaded.stdout
    assert "impl.broker.service" not in loaded.stdout, loaded.stdout
