"""bench/report_fleet.py's template: ONE host (8 GPUs, its serving targets and models, latency
histograms and GPU memory) filled with bench/cost.py's machinery into SQLite and rolled up by
the host's real rollup job (``metered_rollup``, as bench/cost.py's fill does), so the template
holds whatever tables and rows today's rollup writes. The fill takes minutes: the file is kept
and reused while the schema revision, the code that writes it (a digest of migrations/,
agent/storage/, agent/cost/ and bench/cost.py's fleet) and the fill's parameters are the same (a
JSON sidecar next to it records them); otherwise it is filled again.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from pathlib import Path

from agent.storage.db import open_database, upgrade_database
from bench.cost_fill import fill_rollups, load
from bench.cost_fleet import GPUS_PER_HOST, T0, TAIL, Fleet, build_fleet, rate_card
from migrations.runner import head_revision

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True, slots=True)
class TemplateSpec:
    """What the template was filled with; a different spec (or schema) means a new fill."""

    days: int  # of ticks from T0 (bench/cost_fleet.py), the month plus a margin each side
    models: int  # serving targets on the host, one model each
    step_seconds: float  # between raw ticks (a report reads minute and hour rollups only)
    revision: str  # the schema's head revision when it was filled
    code: str  # a digest of the code that writes it (see :func:`code_digest`)

    def fleet(self) -> Fleet:
        return build_fleet(
            self.days, GPUS_PER_HOST, self.models, self.step_seconds, histograms=True
        )

    @property
    def now(self) -> datetime:
        """When the fill's rollup ran: just after the last tick."""
        return T0 + timedelta(days=self.days) + TAIL


# What decides the template's rows: the schema and its migrations, the rollup and the cost
# ledger's metering, and bench/cost.py's fleet. Migrations edited in place keep their revision,
# so the revision alone would not notice.
WRITERS = ("migrations", "agent/storage", "agent/cost", "bench/cost_fill.py", "bench/cost_fleet.py")


def code_digest() -> str:
    digest = hashlib.sha256()
    for name in WRITERS:
        root = REPO / name
        for path in sorted(root.rglob("*.py")) if root.is_dir() else [root]:
            digest.update(str(path.relative_to(REPO)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def sidecar(path: Path) -> Path:
    return path.with_name(path.name + ".json")


def ensure_template(path: Path, days: int, models: int, step: float) -> TemplateSpec:
    """The template at ``path``, filled now unless a fill with the same spec is there."""
    spec = TemplateSpec(days, models, step, head_revision(), code_digest())
    meta = sidecar(path)
    if path.exists() and meta.exists() and json.loads(meta.read_text()) == asdict(spec):
        print(f"template: reusing {path} ({spec})")
        return spec
    for stale in (path, meta):
        stale.unlink(missing_ok=True)
    fill_template(path, spec)
    meta.write_text(json.dumps(asdict(spec)))
    return spec


def fill_template(path: Path, spec: TemplateSpec) -> None:
    url = f"sqlite:///{path}"
    upgrade_database(url)
    engine = open_database(url)
    fleet = spec.fleet()
    print(
        f"template: filling {path}: 1 host, {len(fleet.gpus)} GPUs, {len(fleet.targets)} "
        f"targets, {spec.days} days of ticks every {spec.step_seconds:g} s"
    )
    t = time.perf_counter()
    rows = load(engine, fleet)
    print(f"template: {rows:,} raw samples loaded in {time.perf_counter() - t:.1f} s")
    fill_s, runs = fill_rollups(engine, fleet, rate_card(fleet, spec.days), spec.now, spec.days)
    print(f"template: rolled up by {runs} Rollup.run calls in {fill_s:.1f} s")
    engine.dispose()
