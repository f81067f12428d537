"""The layering of DESIGN.md, enforced.

Top level: foundation (the ground every package stands on: the error type, printable text,
URL redaction, the retry policy) imports nothing internal; collectors and migrations import only
foundation; alerts imports foundation and collectors; nothing imports agent. Inside agent,
every subpackage is a room with one concern, and data flows one way through them (collect,
store, compute cost, alert, report, run, command): a room imports only rooms before it in
``ROOMS``. A new room must be placed in that order here, so the
folder list keeps reading as the architecture (docs/architecture.md says what each one holds).
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("agent", "foundation", "collectors", "alerts", "migrations")
ALLOWED = {
    "foundation": {"foundation"},
    "collectors": {"foundation", "collectors"},
    "migrations": {"foundation", "migrations"},
    "alerts": {"foundation", "alerts", "collectors"},
    "agent": set(PACKAGES),
}
# agent's rooms, in the direction data flows: each may import the rooms before it, never after.
ROOMS = (
    "config",  # the TOML file and the environment, read and checked
    "collect",  # one collection round: collectors run in isolation
    "storage",  # the database, the store, rollups, series arithmetic
    "cost",  # rate card, ledger, allocation, summaries, billing, budget, breakeven
    "alerting",  # alert inputs, conditions, evaluation and delivery, the alert store
    "reporting",  # report periods, model, figures, renderers, the digest
    "daemon",  # the long-running process: wiring, schedule, leader, sd_notify, /metrics
    "sim",  # simulated engines and GPUs (the fake NVML) for tests, benchmarks and the demo
    "demo",  # `gpuwatch demo`: a simulated fleet's month through the real parts, and live
    "cli",  # the gpuwatch command
)
# What agent/ may hold beside its rooms.
AGENT_TOP_LEVEL = {"__init__.py"}
MAX_LINES = 500  # "about 500": a module longer than this has more than one job


def imported_modules(path: Path) -> set[str]:
    """Every absolute module name ``path`` imports (``from a.b import c`` also gives a.b.c,
    since c may be a module)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{a.name}" for a in node.names)
    return found


def room_of(module: str) -> str | None:
    """The room of an agent module ("agent.cost.ledger" -> "cost"); None outside agent's rooms."""
    parts = module.split(".")
    return parts[1] if len(parts) > 2 and parts[0] == "agent" else None


def room_back_edges(files: Iterable[tuple[str, Path]]) -> dict[str, list[str]]:
    """(module, path) pairs -> {module: [what it imports against the flow]}."""
    offenders: dict[str, list[str]] = {}
    for module, path in files:
        own = room_of(module)
        if own is None:
            continue
        bad = sorted(
            target
            for target in imported_modules(path)
            if (room := room_of(target)) in ROOMS
            and room != own
            and ROOMS.index(room) > ROOMS.index(own)
        )
        if bad:
            offenders[module] = bad
    return offenders


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _agent_files(root: Path) -> list[tuple[str, Path]]:
    return [(_module_name(p, root), p) for p in sorted((root / "agent").rglob("*.py"))]


def _top_level(name: str) -> str:
    return name.split(".")[0]


@pytest.mark.parametrize("package", PACKAGES)
def test_package_imports_only_what_its_layer_allows(package: str) -> None:
    offenders = {
        str(path.relative_to(ROOT)): sorted(bad)
        for path in sorted((ROOT / package).rglob("*.py"))
        if (
            bad := {_top_level(m) for m in imported_modules(path)}
            & set(PACKAGES) - ALLOWED[package]
        )
    }
    assert offenders == {}


def test_every_room_of_agent_is_named_in_the_flow() -> None:
    rooms = {p.name for p in (ROOT / "agent").iterdir() if (p / "__init__.py").exists()}
    assert rooms == set(ROOMS), "place a new room in ROOMS (and docs/architecture.md)"


def test_agent_holds_only_rooms_at_its_top() -> None:
    loose = {p.name for p in (ROOT / "agent").glob("*.py")} - AGENT_TOP_LEVEL
    assert loose == set(), "a module belongs in the room of its concern"


def test_rooms_import_only_rooms_before_them_in_the_flow() -> None:
    assert room_back_edges(_agent_files(ROOT)) == {}


def test_a_back_edge_is_caught(tmp_path: Path) -> None:
    # The checker itself: a storage module reaching up into cost must be named, in every form.
    storage = tmp_path / "agent" / "storage"
    storage.mkdir(parents=True)
    (storage / "rollup.py").write_text(
        "from agent.cost.ledger import meter\nimport agent.alerting.store\n"
        "from agent.cost import ratecard\nfrom agent.config.settings import Config\n"
    )
    (storage / "store.py").write_text("from agent.storage.rollup import bucket_of\n")
    assert room_back_edges(_agent_files(tmp_path)) == {
        "agent.storage.rollup": [
            "agent.alerting.store",
            "agent.cost.ledger",
            "agent.cost.ledger.meter",
            "agent.cost.ratecard",
        ]
    }


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_is_over_about_500_lines(package: str) -> None:
    long = {
        str(path.relative_to(ROOT)): n
        for path in sorted((ROOT / package).rglob("*.py"))
        if (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


@pytest.mark.parametrize("package", PACKAGES)
def test_the_imported_package_is_this_repository_s(package: str) -> None:
    # Generic top-level names (agent, alerts, migrations) could be shadowed by another install.
    module = __import__(package)
    assert Path(module.__file__ or "").resolve().parent == ROOT / package
