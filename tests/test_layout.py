"""The layout shows the flow (issue 28): jacbench's packages import each other without a cycle,
function-level imports included, and each package says in its docstring what it is for."""

from __future__ import annotations

import ast
import importlib
from collections import defaultdict
from pathlib import Path

import jacbench

SRC = Path(jacbench.__file__).parent
PACKAGES = [
    "core",
    "benchmark",
    "timing",
    "strategies",
    "run",
    "record",
    "report",
    "models",
    "experiments",
]


def _package(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module


def package_graph() -> dict[str, set[str]]:
    """Which jacbench package imports which, every import statement counted (also those
    inside functions and under TYPE_CHECKING)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for path in SRC.rglob("*.py"):
        rel = path.relative_to(SRC.parent).with_suffix("")
        module = ".".join(rel.parts[:-1] if rel.parts[-1] == "__init__" else rel.parts)
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("jacbench"):
                names = [node.module]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names if a.name.startswith("jacbench.")]
            for name in names:
                if _package(name) != _package(module) and name != "jacbench":
                    graph[_package(module)].add(_package(name))
    return graph


def test_packages_import_each_other_without_a_cycle():
    graph = package_graph()
    assert graph["jacbench.core"] == set()  # the contract depends on nothing above it

    def visit(name: str, stack: tuple[str, ...]) -> None:
        assert name not in stack, f"import cycle: {' -> '.join((*stack, name))}"
        for dep in graph.get(name, ()):
            visit(dep, (*stack, name))

    for name in list(graph):
        visit(name, ())


def test_every_package_says_what_it_is_for():
    for name in PACKAGES:
        doc = importlib.import_module(f"jacbench.{name}").__doc__
        assert doc and doc.strip(), f"jacbench.{name} has no docstring"


def module_graph() -> dict[str, set[str]]:
    """Which module imports which, jacbench's and its Hydra plugins' (every import statement,
    also inside functions); a package's own ``__init__`` re-exports are not edges back."""
    graph: dict[str, set[str]] = defaultdict(set)
    modules = {}
    for root in (SRC, SRC.parent / "hydra_plugins"):
        for path in root.rglob("*.py"):
            rel = path.relative_to(SRC.parent).with_suffix("")
            parts = rel.parts[:-1] if rel.parts[-1] == "__init__" else rel.parts
            modules[".".join(parts)] = path
    for module, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            elif isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            for name in names:
                if name in modules and name != module and not module.startswith(name + "."):
                    graph[module].add(name)
    return graph


def test_modules_import_each_other_without_a_cycle():
    """Issue 28 found config -> hydra_plugins...resuming_joblib -> recorded -> resume ->
    config through function-level imports."""
    graph = module_graph()
    done: set[str] = set()

    def visit(name: str, stack: tuple[str, ...]) -> None:
        assert name not in stack, f"import cycle: {' -> '.join((*stack, name))}"
        if name in done:
            return
        for dep in sorted(graph.get(name, ())):
            visit(dep, (*stack, name))
        done.add(name)

    for name in sorted(graph):
        visit(name, ())


# The packages from the bottom up: each may import those on lower levels only (issue 45 found
# core importing the top package, and run/config importing the launcher plugin that imports
# jacbench.run back). The entry points (jacbench, api, sync, __main__, check, testing) stand
# on top; Hydra's plugins sit above everything and nothing of jacbench imports them.
LEVELS = {
    "jacbench.core": 0,
    "jacbench.benchmark": 1,
    "jacbench.timing": 1,
    "jacbench.record": 1,
    "jacbench.strategies": 2,
    "jacbench.models": 2,
    "jacbench.report": 2,
    "jacbench.run": 3,
    "jacbench.experiments": 3,
}


def test_no_package_imports_one_above_it_and_none_imports_the_hydra_plugins():
    graph = package_graph()
    upward = [
        f"{low} -> {high}"
        for low, deps in graph.items()
        for high in deps
        if low in LEVELS and high in LEVELS and LEVELS[high] >= LEVELS[low]
    ]
    assert not upward, f"imports from a lower level up: {upward}"
    into_plugins = [
        f"{module} -> {dep}"
        for module, deps in module_graph().items()
        for dep in deps
        if module.startswith("jacbench") and dep.startswith("hydra_plugins")
    ]
    assert not into_plugins, into_plugins
