"""The import rules: `protocol` and `store` are leaves and never import `broker`; the engine
imports no transport; the transports never import the node that composes them; and no module
of the project takes part in an import cycle (docs/architecture.md)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("package", ["protocol", "store"])
def test_leaf_packages_do_not_import_broker_or_trio(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"{package} has no modules"
    offenders = {
        str(path.relative_to(ROOT)): sorted(imported_modules(path) & {"broker", "trio"})
        for path in files
    }
    assert {name: bad for name, bad in offenders.items() if bad} == {}


def test_the_client_package_uses_protocol_but_never_the_broker_or_its_store() -> None:
    # trioq (issue 31) is what users install beside their code: it shares the protocol layer
    # (framing, command names) with the broker, but must run without it. Checked on every
    # module it reaches, its own and protocol's.
    reached = reachable_from(sorted((ROOT / "trioq").rglob("*.py")))
    assert any(name.startswith("protocol") for name in reached)
    bad = sorted(
        name for name in reached if name.split(".")[0] in {"broker", "store", "trio"}
    )
    assert bad == []


# -- the engine's layer (issue 12) ------------------------------------------------------------

ENGINE = ROOT / "broker" / "engine"
TRANSPORT_OR_HTTP = ("httpx", "httpcore", "h11", "trio_websocket")  # and broker.server


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def absolute_imports(path: Path) -> set[str]:
    """Every module `path` imports, relative imports resolved (`from . import x` counts as
    the package's module `x` when that is a module, else the package)."""
    package = module_name(path).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            for alias in node.names:
                candidate = f"{module}.{alias.name}"
                names.add(candidate if source_of(candidate) is not None else module)
    return names


def source_of(module: str) -> Path | None:
    """The file of a project module (None for anything outside the project)."""
    base = ROOT.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def reachable_from(start: list[Path]) -> set[str]:
    """Every module the files import, following the project's own modules transitively."""
    seen: set[str] = set()
    todo = [name for path in start for name in absolute_imports(path)]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        path = source_of(name)
        if path is not None:
            todo.extend(absolute_imports(path))
    return seen


def test_the_engine_imports_no_transport_or_http_code() -> None:
    reached = reachable_from(sorted(ENGINE.rglob("*.py")))
    bad = sorted(
        name
        for name in reached
        if any(name == f or name.startswith(f + ".") for f in TRANSPORT_OR_HTTP)
    )
    assert bad == []


def test_the_engine_does_not_import_the_broker_around_it() -> None:
    # Only the engine itself and the small shared helpers below it (clock, events).
    allowed = {"broker.engine", "broker.clock", "broker.events"}
    outside = {
        name
        for path in ENGINE.rglob("*.py")
        for name in absolute_imports(path)
        if name.startswith("broker.") and not name.startswith("broker.engine")
    }
    assert outside <= allowed, sorted(outside - allowed)


# The engine's sub-packages, top down: each imports only those after it (docs/architecture.md).
ENGINE_ORDER = ("runtime", "components", "rules", "state")
# EngineState applies the timer rules when it moves a job, and restore arms them (the one
# exception).
RULES_STATE_RUNS = {"deadlines", "dlq", "housekeeping"}
STATE_RUNNING_RULES = {"broker.engine.state.engine_state", "broker.engine.state.restore"}


def engine_part(module: str) -> str | None:
    """The sub-package of an engine module (None for the engine's top-level modules)."""
    parts = module.split(".")
    return parts[2] if len(parts) > 3 and parts[:2] == ["broker", "engine"] else None


def test_engine_sub_packages_import_only_those_below_them() -> None:
    upward = []
    for path in sorted(ENGINE.rglob("*.py")):
        importer = module_name(path)
        part = engine_part(importer)
        if part is None:
            continue
        for name in absolute_imports(path):
            target = engine_part(name)
            if target is None or target == part:
                continue
            allowed = ENGINE_ORDER.index(target) > ENGINE_ORDER.index(part) or (
                importer in STATE_RUNNING_RULES and name.split(".")[3] in RULES_STATE_RUNS
            )
            if not allowed:
                upward.append(f"{importer} -> {name}")
    assert upward == []


def test_no_import_cycles_among_engine_modules() -> None:
    graph = {
        module_name(path): {
            name for name in absolute_imports(path) if name.startswith("broker.engine.")
        }
        for path in ENGINE.rglob("*.py")
    }
    cycles = []
    for start in graph:
        stack = [(start, [start])]
        while stack:
            node, trail = stack.pop()
            for nxt in graph.get(node, ()):
                if nxt == start:
                    cycles.append(" -> ".join([*trail, nxt]))
                elif nxt not in trail:
                    stack.append((nxt, [*trail, nxt]))
    assert cycles == []


# -- the layout (issue 32) --------------------------------------------------------------------

CHECKED_PACKAGES = ("broker", "protocol", "store", "benchmarks", "trioq")


def import_graph(packages: tuple[str, ...]) -> dict[str, set[str]]:
    """Each module of the packages -> the project modules it imports anywhere in its text: at
    the top, inside functions, or under `if TYPE_CHECKING:` (a type-only import still ties the
    two modules together for a reader and for mypy)."""
    return {
        module_name(path): {
            name for name in absolute_imports(path) if source_of(name) is not None
        } - {module_name(path)}
        for package in packages
        for path in sorted((ROOT / package).rglob("*.py"))
    }


def strongly_connected(graph: dict[str, set[str]]) -> list[list[str]]:
    """The graph's strongly connected components of more than one module (each an import
    cycle), each sorted; a module importing itself is not one."""
    reach: dict[str, set[str]] = {}
    for start in graph:
        seen: set[str] = set()
        todo = list(graph[start])
        while todo:
            name = todo.pop()
            if name not in seen:
                seen.add(name)
                todo.extend(graph.get(name, ()))
        reach[start] = seen
    components = {
        frozenset({start} | {other for other in reach[start] if start in reach.get(other, ())})
        for start in graph
        if start in reach[start]
    }
    return sorted(sorted(component) for component in components)


def test_the_cycle_finder_finds_a_cycle_through_three_modules() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"a"}}
    assert strongly_connected(graph) == [["a", "b", "c"]]


def test_no_module_takes_part_in_an_import_cycle() -> None:
    graph = import_graph(CHECKED_PACKAGES)
    assert {"broker.node.app", "broker.server.tcp", "benchmarks.loadgen", "trioq._client"} <= set(
        graph
    )
    assert strongly_connected(graph) == []


@pytest.mark.parametrize(
    ("layer", "above"),
    [
        ("broker.server", "broker.node"),
        ("broker.mcp", "broker.node"),
        ("broker.services", "broker.node"),
        ("broker.services", "broker.server"),
    ],
)
def test_a_layer_never_reaches_the_layers_above_it(layer: str, above: str) -> None:
    # The transports (and the MCP server and the services beside them) are composed by the
    # node; none of them may reach it, even through another module.
    files = sorted(ROOT.joinpath(*layer.split(".")).rglob("*.py"))
    assert files, f"{layer} has no modules"
    reached = reachable_from(files)
    assert sorted(name for name in reached if name == above or name.startswith(above + ".")) == []
