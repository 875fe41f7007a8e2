"""The map in ARCHITECTURE.md is true: layers call downward only, no module imports another's private names,
no import cycles, and every module is on the map. Imports are read from the source (``ast``), lazy ones inside
functions included, so a deferred import cannot hide an upward arrow or a cycle."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).parents[1] / "src" / "coharden"
MAP = Path(__file__).parents[1] / "ARCHITECTURE.md"

#: the layers of ARCHITECTURE.md, top down: a room (a package or a top-level module of ``coharden``) imports
#: only rooms of lower layers (and its own modules)
LAYERS: list[set[str]] = [
    {"__main__"},
    {"cli"},
    {"study", "evaluation", "loop", "check"},
    {"mpe", "overfit", "suite", "agent"},
    {"mutation", "environment", "critic", "instances"},
    {"execution"},
    {"patches", "datasets"},
    {"config"},
    {"schema"},
    {"llm", "analysis", "jsonl"},
    {"errors", "pysource", "yamlfile", "escaping", "data"},
]
LAYER = {room: depth for depth, rooms in enumerate(LAYERS) for room in rooms}


def _modules() -> dict[str, Path]:
    found = {}
    for path in SRC.rglob("*.py"):
        parts = ("coharden", *path.relative_to(SRC).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _owner(name: str) -> str | None:
    """The module of coharden that ``name`` (a module or a name inside one) lives in."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")


def _imports(module: str, *, typing: bool = False) -> list[tuple[str, str]]:
    """(imported module, imported name or '') for every import of ``module``, at any depth of its code;
    ``typing``: the imports under ``if TYPE_CHECKING:`` too (annotations only)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[str, str]] = []
    tree = ast.parse(path.read_text())
    typing_only = {id(n) for block in ast.walk(tree) if isinstance(block, ast.If) and _is_type_checking(block.test)
                   for stmt in block.body for n in ast.walk(stmt)}
    for node in ast.walk(tree):
        if id(node) in typing_only and not typing:  # annotations only: no arrow at run time
            continue
        if isinstance(node, ast.Import):
            found += [(owner, "") for alias in node.names if (owner := _owner(alias.name))]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([base] if base else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                if full in MODULES:
                    found.append((full, ""))
                elif owner := _owner(base):
                    found.append((owner, alias.name))
    return [(target, name) for target, name in found if target.startswith("coharden") and target != module]


GRAPH = {module: _imports(module) for module in MODULES}


def _room(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "coharden"


#: the fast path (ARCHITECTURE.md, ``execution/``): the fork server, collect once, warm imports and the second lane
FAST = "coharden.execution.fast"
#: its one door: the module of ``RunSite``, which starts, primes, restarts and gives up the server
DOOR = "coharden.execution.run_site"


def test_the_fast_path_is_reached_only_through_run_site() -> None:
    """Nothing outside ``execution/fast/`` imports its modules but RunSite's module (``execution/run_site.py``), not
    even for an annotation: the plain path (sandbox, runner, verdicts) names what it is handed of the fast path
    (the server's type, the warm plan, the second lane) from the door, so a change to the fast path is read and
    checked in the package and its door alone."""
    outside = sorted(f"{module} -> {target}" for module in MODULES
                     if module != DOOR and module != FAST and not module.startswith(FAST + ".")
                     for target, _ in _imports(module, typing=True)
                     if target == FAST or target.startswith(FAST + "."))
    assert not outside, "imports of the fast path that do not go through run_site.py:\n" + "\n".join(outside)
    assert any(target.startswith(FAST + ".") for target, _ in GRAPH[DOOR])  # the door is where the path goes


def test_every_room_has_a_layer() -> None:
    rooms = {_room(m) for m in MODULES} - {"coharden"}
    assert rooms <= set(LAYER), f"rooms missing from LAYERS (and the map): {sorted(rooms - set(LAYER))}"


def test_layers_call_downward_only() -> None:
    upward = sorted({f"{module} -> {target}" for module, imports in GRAPH.items() for target, _ in imports
                     if _room(module) != "coharden" and _room(target) != "coharden"
                     and _room(module) != _room(target) and LAYER[_room(target)] <= LAYER[_room(module)]})
    assert not upward, "imports that do not go down a layer:\n" + "\n".join(upward)


def test_no_private_name_is_imported_from_another_module() -> None:
    private = sorted(f"{module} imports {name} from {target}" for module, imports in GRAPH.items()
                     for target, name in imports if name.startswith("_") and not name.startswith("__"))
    assert not private, "\n".join(private)


def test_no_import_cycles() -> None:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for target, _ in GRAPH[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in MODULES:
        if module not in index:
            visit(module)
    assert not cycles, f"import cycles: {cycles}"


@pytest.mark.parametrize("room", sorted(LAYER))
def test_every_room_is_on_the_map(room: str) -> None:
    text = MAP.read_text()
    name = f"`{room}/`" if (SRC / room).is_dir() else f"`{room}.py`"
    assert name in text, f"ARCHITECTURE.md does not name {name}"


def test_every_module_is_on_the_map() -> None:
    text = MAP.read_text()
    missing = sorted(str(path.relative_to(SRC)) for module, path in MODULES.items()
                     if path.name != "__init__.py" and path.name not in text)
    assert not missing, "modules ARCHITECTURE.md does not name:\n" + "\n".join(missing)


#: the modules above ``execution/`` that start a process, each with why it is not a test process run through
#: ``execution/sandbox.py``: what they run is coharden's own probe or the user's own command, never test code
HOST_PROCESSES = {
    "coharden.environment.build": "probes a candidate interpreter and a built environment (version, site "
                                  "directory, pytest importable); asks the Docker engine if it runs",
    "coharden.environment.overlay": "asks a built environment's interpreter for its site directory",
    "coharden.overfit.reward": "asks the test interpreter whether coverage.py imports",
    "coharden.check.interpreter": "asks the test interpreter for its sys.path and installed packages' metadata "
                                  "(the key of a stored check report; where it imports the checked project from)",
    "coharden.study.bytecode": "compiles the checkout's own modules to bytecode with the test interpreter",
    "coharden.cli.envspec": "`env system-setup --run`: the spec's root system steps, run by the user's choice",
    "coharden.cli.env": "`env run -- CMD`: the user's own command beside the mock services",
}
_SPAWNERS = {("subprocess", f) for f in ("run", "Popen", "call", "check_call", "check_output")} | {
    ("os", f) for f in ("system", "fork", "forkpty", "posix_spawn", "posix_spawnp", "execv", "execve",
                        "execvp", "execvpe", "spawnv", "spawnve")}


def _starts_processes(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and (node.func.value.id, node.func.attr) in _SPAWNERS):
            return True
    return False


def test_only_the_execution_layer_and_the_listed_host_commands_start_processes() -> None:
    """ARCHITECTURE.md: test processes start in ``execution/`` only; the few host commands above it are listed
    here with their reason, and the list is exact (a module that stops starting processes leaves it)."""
    spawning = {m for m, p in MODULES.items() if not m.startswith("coharden.execution") and _starts_processes(p)}
    assert spawning == set(HOST_PROCESSES)
    assert all(m in MODULES for m in HOST_PROCESSES)
