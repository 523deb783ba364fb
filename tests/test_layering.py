"""The architecture, enforced: every import of statekit's packages follows the layer order

    statefmt <- readers <- writers <- flink <- {runtime, spark} <- cli

(a package may import itself and the packages to its left, never one to its right or beside
it), only ``spark/`` imports pyspark, and ``import statekit.readers`` / ``statekit.writers``
loads no pyspark. Failures name the offending file, line and import.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS: dict[str, int] = {"statefmt": 0, "readers": 1, "writers": 2, "flink": 3, "runtime": 4, "spark": 4, "cli": 5}
PYSPARK_ALLOWED = {"spark"}


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every module a file imports (absolute names), with its line, including lazy imports."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            found.extend((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)
    return found


def _package_files() -> list[tuple[str, Path]]:
    return [(package, path) for package in LAYERS for path in sorted((ROOT / package).rglob("*.py"))]


def test_every_package_folder_is_in_the_layer_map() -> None:
    installed = {p.parent.name for p in ROOT.glob("*/__init__.py")}
    assert installed - {"tests", "bench", "examples", "scripts", "docs"} == set(LAYERS)


def test_imports_follow_the_layer_order() -> None:
    wrong = []
    for package, path in _package_files():
        for line, module in _imports(path):
            parts = module.split(".")
            if parts[0] != "statekit" or len(parts) < 2 or parts[1] not in LAYERS:
                continue
            target = parts[1]
            if target != package and LAYERS[target] >= LAYERS[package]:
                wrong.append(f"{path.relative_to(ROOT)}:{line}: {package} imports {module} "
                             f"({target} is not to the left of {package})")
    assert not wrong, "imports against the layer order:\n" + "\n".join(sorted(set(wrong)))


def test_only_spark_imports_pyspark() -> None:
    wrong = [
        f"{path.relative_to(ROOT)}:{line}: imports {module}"
        for package, path in _package_files() if package not in PYSPARK_ALLOWED
        for line, module in _imports(path) if module.split(".")[0] == "pyspark"
    ]
    assert not wrong, "pyspark imported outside spark/:\n" + "\n".join(wrong)


def test_modules_of_a_package_form_no_cycle_between_packages() -> None:
    edges: dict[str, set[str]] = {p: set() for p in LAYERS}
    for package, path in _package_files():
        for _, module in _imports(path):
            parts = module.split(".")
            if parts[0] == "statekit" and len(parts) > 1 and parts[1] in LAYERS and parts[1] != package:
                edges[package].add(parts[1])

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(n == goal or (n not in seen and reaches(n, goal, seen | {n})) for n in edges[start])

    cycles = sorted(p for p in LAYERS if reaches(p, p, {p}))
    assert not cycles, f"package cycles through: {cycles}"


def test_readers_and_writers_load_no_pyspark() -> None:
    code = ("import sys, statekit.readers, statekit.writers, statekit.flink; "
            "import statekit.readers.savepoint_reader, statekit.readers.diff, statekit.writers.rescale; "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pyspark', 'py4j')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# The runtime's rooms, lowest first: a room imports only itself and the rooms before it; the
# modules at runtime/'s root (the public API) sit above every room. docs/ARCHITECTURE.md.
RUNTIME_ROOMS: list[str] = ["api", "connectors", "checkpoint", "exchange", "state", "operators", "task", "dataflow",
                            "taskmanager", "jobmaster", "control"]
RUNTIME_ROOT_MODULES_MAX = 6


def _runtime_room(module: str) -> str | None:
    """The room of a ``statekit.runtime...`` module name: a room, ``"<root>"`` or None (not the runtime)."""
    parts = module.split(".")
    if parts[:2] != ["statekit", "runtime"]:
        return None
    return parts[2] if len(parts) > 2 and parts[2] in RUNTIME_ROOMS else "<root>"


def _runtime_files() -> list[tuple[str, Path]]:
    runtime = ROOT / "runtime"
    return [(path.relative_to(runtime).parts[0] if len(path.relative_to(runtime).parts) > 1 else "<root>", path)
            for path in sorted(runtime.rglob("*.py"))]


def test_every_runtime_folder_is_a_room() -> None:
    folders = {p.name for p in (ROOT / "runtime").iterdir() if p.is_dir() and p.name != "__pycache__"}
    assert folders == set(RUNTIME_ROOMS)
    assert len(RUNTIME_ROOMS) >= 6


def test_runtime_root_keeps_few_modules() -> None:
    modules = [p.name for p in (ROOT / "runtime").glob("*.py") if p.name != "__init__.py"]
    assert len(modules) <= RUNTIME_ROOT_MODULES_MAX, modules


def test_runtime_rooms_import_downward_only() -> None:
    rank = {room: i for i, room in enumerate(RUNTIME_ROOMS)} | {"<root>": len(RUNTIME_ROOMS)}
    wrong = []
    for room, path in _runtime_files():
        for line, module in _imports(path):
            target = _runtime_room(module)
            if target is None or target == room:
                continue
            if module == "statekit.runtime" or rank[target] > rank[room]:
                wrong.append(f"{path.relative_to(ROOT)}:{line}: runtime/{room} imports {module} "
                             f"({target} is not below {room})")
    assert not wrong, "imports against the runtime's room order:\n" + "\n".join(sorted(set(wrong)))


def test_runtime_rooms_form_no_cycle() -> None:
    edges: dict[str, set[str]] = {room: set() for room in [*RUNTIME_ROOMS, "<root>"]}
    for room, path in _runtime_files():
        for _, module in _imports(path):
            target = _runtime_room(module)
            if target is not None and target != room and module != "statekit.runtime":
                edges[room].add(target)

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(n == goal or (n not in seen and reaches(n, goal, seen | {n})) for n in edges[start])

    cycles = sorted(room for room in edges if reaches(room, room, {room}))
    assert not cycles, f"runtime room cycles through: {cycles}"
