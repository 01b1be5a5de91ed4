"""The package's layout (docs/api.md, "Module map"): its folders are floors, each importing
only its own and the ones below (the model on the ground, nothing under it); no import
cycles, including ones hidden by imports inside functions; the package, tests, benchmarks
and examples import only modules that exist (0.3's old paths are gone after 0.8.8)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def module_files(root: Path, package: str) -> dict[str, Path]:
    files = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = path.relative_to(root).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        files[name] = path
    return files


def imported_names(path: Path, name: str) -> set[str]:
    """Every module named by an import statement of the file, at any depth (inside
    functions, methods and `if` blocks too): ``a.b`` for ``import a.b``, and both ``a``
    and ``a.x`` for ``from a import x`` (x may be a module or a name in a)."""
    is_pkg = path.name == "__init__.py"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_pkg else name.split(".")[:-1]
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module
            found.add(module)
            found.update(f"{module}.{a.name}" for a in node.names)
    return found


def import_graph(root: Path, package: str, exclude=frozenset()) -> dict[str, set[str]]:
    """module -> the package's modules it imports (the longest existing prefix of
    each imported name), shims excluded."""
    files = {n: p for n, p in module_files(root, package).items() if n not in exclude}
    graph = {}
    for name, path in files.items():
        edges = set()
        for target in imported_names(path, name):
            while target and target not in files:
                target = target.rpartition(".")[0]
            if target and target != name:
                edges.add(target)
        graph[name] = edges
    return graph


# The floors of docs/api.md's module map: a module imports its own folder's modules and
# those of lower floors only. The top floor's folders use one another (the CLI runs
# experiments, fits and the testbed).
FLOORS = {"model": 0, "io": 1, "policies": 1, "run": 2, "experiments": 3, "optimisation": 3,
          "fitting": 3, "cli": 3, "testbed": 3, "testing": 3}
# Modules beside the floors that import nothing of the package, so that any floor reads them.
LEAVES = {"_version", "trajectory", "starter"}


def room(module: str) -> str:
    """The folder (or leaf module) of the package that `module` is in; "" for the package."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def floor_violations(graph: dict[str, set[str]], floors=FLOORS, leaves=LEAVES) -> list[str]:
    """Every import of the graph that goes to another folder not below the importer's
    floor: ``a -> b`` strings. A module outside the floors and leaves (the package's
    __init__, its import hooks) sits on the top, which imports any floor."""
    top = max(floors.values())
    bad = []
    for module, targets in sorted(graph.items()):
        here = room(module)
        level = floors.get(here, top)
        if level == top:
            continue
        for target in sorted(targets):
            there = room(target)
            if there != here and there not in leaves and floors.get(there, top) >= level:
                bad.append(f"{module} -> {target}")
    return bad


def test_each_floor_imports_only_its_own_and_lower_floors():
    graph = import_graph(ROOT, "gmm_volunteer")
    assert {room(m) for m in graph} >= set(FLOORS)  # every floor is there to be checked
    bad = floor_violations(graph)
    assert not bad, "imports up a floor or across one: " + "; ".join(bad)


def test_the_model_imports_nothing_of_another_floor():
    """docs/api.md: the model reads nothing of io, policies, the run layer, experiments,
    the CLI, fitting or the testbed; only the leaves beside the floors."""
    graph = import_graph(ROOT, "gmm_volunteer")
    model = {m: t for m, t in graph.items() if room(m) == "model"}
    assert len(model) > 20  # the walk found the model
    assert not [f"{m} -> {t}" for m, ts in model.items() for t in ts if room(t) not in {"model"} | LEAVES]


def test_an_import_up_a_floor_or_across_one_is_found():
    graph = {"pkg.model.a": {"pkg.model.b", "pkg._version"}, "pkg.model.b": {"pkg.run.c"},
             "pkg.io.d": {"pkg.policies.e", "pkg.model.a"}, "pkg.policies.e": {"pkg.model.b"},
             "pkg.run.c": {"pkg.io.d", "pkg.policies.e"}, "pkg.cli.f": {"pkg.testbed.g", "pkg.run.c"},
             "pkg.testbed.g": {"pkg.cli.f"}, "pkg": {"pkg.cli.f"}, "pkg.run.h": {"pkg"}}
    assert floor_violations(graph) == ["pkg.io.d -> pkg.policies.e", "pkg.model.b -> pkg.run.c",
                                       "pkg.run.h -> pkg"]


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of the graph as [a, b, ..., a], or None when it is acyclic."""
    state: dict[str, int] = {}  # 1 on the current path, 2 finished
    path: list[str] = []

    def visit(v):
        state[v] = 1
        path.append(v)
        for w in sorted(graph.get(v, ())):
            if state.get(w) == 1:
                return path[path.index(w):] + [w]
            if w not in state and (cycle := visit(w)):
                return cycle
        state[v] = 2
        path.pop()
        return None

    for v in sorted(graph):
        if v not in state and (cycle := visit(v)):
            return cycle
    return None


def test_the_package_has_no_import_cycle():
    graph = import_graph(ROOT, "gmm_volunteer")
    assert len(graph) > 80  # the walk found the package
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_a_cycle_through_an_import_inside_a_function_is_found(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg.sub import b\n")
    (pkg / "sub" / "b.py").write_text("def f():\n    from .. import c\n")
    (pkg / "c.py").write_text("class K:\n    def m(self):\n        import pkg.a\n")
    (pkg / "d.py").write_text("import pkg.a\n")
    graph = import_graph(tmp_path, "pkg")
    assert graph["pkg.sub.b"] == {"pkg", "pkg.c"}  # `from .. import c` runs pkg/__init__ too
    assert find_cycle(graph) == ["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"]
    (pkg / "c.py").write_text("")
    assert find_cycle(import_graph(tmp_path, "pkg")) is None


@pytest.mark.parametrize("folder", ["gmm_volunteer", "tests", "benchmarks", "examples"])
def test_code_imports_only_modules_of_the_package_that_exist(folder):
    """An import of a moved or removed path of the package (0.3's flat paths, the model's
    config and engine of 0.8.8) fails here rather than when its line runs."""
    package = module_files(ROOT, "gmm_volunteer")
    stale = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        if "__pycache__" in path.parts:  # generated fused runners of older versions
            continue
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        for target in imported_names(path, name):
            if target.partition(".")[0] != "gmm_volunteer" or target in package:
                continue
            parent, _, leaf = target.rpartition(".")
            if parent in package and (package[parent].name != "__init__.py"
                                      or hasattr(importlib.import_module(parent), leaf)):
                continue  # `from module import name`: a name the module has
            stale.append(f"{path.relative_to(ROOT)}: {target}")
    assert not stale, "imports of modules that do not exist: " + "; ".join(stale)
