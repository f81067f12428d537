"""No import circles between gpuwatch's modules.

A circle makes the order modules load in matter: the first to be imported sees the other half
initialised, and a name moved between them breaks at import time in one order only. The graph
here is strict, so that no circle hides:

- every import counts, at module level or inside a function, and under ``if TYPE_CHECKING:``
  too (a circle of types is still two modules that cannot be understood apart);
- importing ``a.b.c`` depends on the packages ``a`` and ``a.b`` as well, since Python runs their
  ``__init__`` first: a package whose ``__init__`` imports its own submodules forms a circle with
  each submodule that imports a sibling, so a package's ``__init__`` stays free of its children
  (a registry or dispatch table is a module of its own).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

from tests.test_layering import PACKAGES, ROOT

Graph = dict[str, set[str]]


def modules_of(root: Path) -> dict[str, Path]:
    """Every module of the packages under ``root``: dotted name -> file."""
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imported_names(module: str, path: Path) -> Iterator[str]:
    """Each dotted name an import statement of ``module`` names, relative imports resolved; for
    ``from a import b`` both ``a.b`` (b may be a module) and ``a``."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)


def import_graph(modules: Mapping[str, Path]) -> Graph:
    """module -> the modules loading it runs first (what it imports and their packages)."""
    graph: Graph = {}
    for module, path in modules.items():
        needs: set[str] = set()
        for name in _imported_names(module, path):
            parts = name.split(".")
            prefixes = (".".join(parts[:i]) for i in range(1, len(parts) + 1))
            needs.update(p for p in prefixes if p in modules)
        needs.discard(module)
        graph[module] = needs
    return graph


def circles(graph: Graph) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in on_stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def test_no_module_takes_part_in_an_import_circle() -> None:
    assert circles(import_graph(modules_of(ROOT))) == []


def _write(root: Path, files: Mapping[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_a_circle_of_types_is_caught(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "agent/__init__.py": "",
            "agent/cost/__init__.py": "",
            "agent/cost/budget.py": "from agent.cost.team_budget import team_spends\n",
            "agent/cost/team_budget.py": (
                "from typing import TYPE_CHECKING\n"
                "if TYPE_CHECKING:\n    from agent.cost.budget import BudgetInputs\n"
            ),
        },
    )
    assert circles(import_graph(modules_of(tmp_path))) == [
        ["agent.cost.budget", "agent.cost.team_budget"]
    ]


def test_a_package_that_imports_its_children_is_caught(tmp_path: Path) -> None:
    # render/__init__ re-exports a renderer that imports a sibling: loading the renderer runs
    # the half-initialised package first.
    _write(
        tmp_path,
        {
            "agent/__init__.py": "",
            "agent/render/__init__.py": "from agent.render.table import render_table\n",
            "agent/render/table.py": "from .values import text\n",
            "agent/render/values.py": "def text(): ...\n",
            "alerts/__init__.py": "",
            "alerts/rules.py": "def check():\n    from alerts import silence\n",
            "alerts/silence.py": "import alerts.rules\n",
        },
    )
    assert circles(import_graph(modules_of(tmp_path))) == [
        ["agent.render", "agent.render.table"],
        ["alerts.rules", "alerts.silence"],
    ]


def test_a_one_way_chain_is_no_circle(tmp_path: Path) -> None:
    _write(
        tmp_path,
        {
            "agent/__init__.py": "",
            "agent/render/__init__.py": '"""Docstring only."""\n',
            "agent/render/dispatch.py": "from agent.render.table import render_table\n",
            "agent/render/table.py": "from agent.render import values\n",
            "agent/render/values.py": "",
        },
    )
    assert circles(import_graph(modules_of(tmp_path))) == []
