"""The layering of DESIGN.md, enforced: collectors and migrations import nothing internal,
alerts imports only collectors' types, and nothing imports agent."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("agent", "collectors", "alerts", "migrations")
ALLOWED = {
    "collectors": {"collectors"},
    "migrations": {"migrations"},
    "alerts": {"alerts", "collectors"},
    "agent": set(PACKAGES),
}


def _internal_imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        else:
            continue
        found.update(n.split(".")[0] for n in names if n.split(".")[0] in PACKAGES)
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_package_imports_only_what_its_layer_allows(package: str) -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(bad)
        for path in sorted((ROOT / package).rglob("*.py"))
        if (bad := _internal_imports(path) - ALLOWED[package])
    }
    assert offenders == {}


@pytest.mark.parametrize("package", PACKAGES)
def test_the_imported_package_is_this_repository_s(package: str) -> None:
    # Generic top-level names (agent, alerts, migrations) could be shadowed by another install.
    module = __import__(package)
    assert Path(module.__file__ or "").resolve().parent == ROOT / package
