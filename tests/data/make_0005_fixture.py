"""Make the database fixture of revision 0005 and the report figures it gives.

Run once, with the code of revision 0005 (before migration 0006 changed the rollup tables):

    .venv/bin/python -m tests.data.make_0005_fixture

It replays three hours and ten minutes of one host's daemon (22:00 UTC on 30 November 2026 to
01:10 on 1 December: two hour boundaries and a UTC day boundary) the way the daemon stores
them, at 30 s ticks, into a fresh SQLite database, with the real minute rollup and its cost
meter run every five minutes as the daemon would:

    GPU-0 and GPU-1 (3.60 USD an hour, exactly 0.001 USD a second); "llama" uses GPU-0,
    "qwen" uses both. Both serve vLLM-like counters (tokens, finished requests) and TTFT/E2E
    histograms; qwen exposes ``_created`` series. At 23:20 qwen restarts (down for two ticks,
    counters from zero, new ``_created``) and comes back with one more TTFT bucket (a new
    engine version, a new bucket layout). llama's first "length" request appears at 23:40, a
    label child born after a good scrape that lacked it.

Then it writes:

- ``schema_0005_rows.json``: every row of every table (alembic's excepted), per table its
  columns and rows; datetimes as ISO strings, Decimals as strings;
- ``schema_0005_reports.json``: the JSON report (``--format json``) of three periods (a whole
  UTC day, a window with partial hours at both ends in Asia/Kathmandu, December in
  Asia/Kolkata) and the cost summaries of those windows, as :func:`figures` computes them.

tests/migrations/test_upgrade_keeps_reports.py loads the rows into a database at 0005, upgrades
it to the head and asks :func:`figures` again: every figure must be the same.
"""

from __future__ import annotations

import dataclasses
import json
import math
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, MetaData, select

from agent.collect.runner import CollectorRun, Round
from agent.config.rates import Rate
from agent.config.settings import BudgetConfig, Config
from agent.cost.metering import metered_rollup
from agent.cost.ratecard import RateCard
from agent.cost.summarize import summarize
from agent.reporting.build import build_report
from agent.reporting.model import Period
from agent.reporting.period import month_period
from agent.reporting.render.json_format import to_document
from agent.storage.store import Store
from collectors.base import Sample

HERE = Path(__file__).resolve().parent
ROWS = HERE / "schema_0005_rows.json"
REPORTS = HERE / "schema_0005_reports.json"

HOST = "a"
FIRST_TICK = datetime(2026, 11, 30, 22, 0, tzinfo=UTC)
LAST_TICK = datetime(2026, 12, 1, 1, 10, tzinfo=UTC)
NOW = datetime(2026, 12, 1, 2, 0, tzinfo=UTC)  # when the reports are made
TICK = timedelta(seconds=30)
RESTART = datetime(2026, 11, 30, 23, 20, tzinfo=UTC)  # qwen's first tick after its restart
DOWN = (RESTART - 2 * TICK, RESTART - TICK)  # qwen does not answer these two ticks
BORN = datetime(2026, 11, 30, 23, 40, tzinfo=UTC)  # llama's first "length" finish
CARD = RateCard((Rate(usd_per_hour=Decimal("3.60")),))
GiB = float(1 << 30)
TTFT_LE = ("0.1", "0.25", "0.5", "1.0", "+Inf")
TTFT_LE_NEW = ("0.05", "0.1", "0.25", "0.5", "1.0", "+Inf")  # qwen after its upgrade
E2E_LE = ("1.0", "2.5", "5.0", "+Inf")
GPUS = {"GPU-0": ("0", {"llama": 20.0, "qwen": 30.0}), "GPU-1": ("1", {"qwen": 60.0})}
QWEN_CREATED = (1_764_500_000.0, 1_764_543_590.0)  # before and after the restart


# -- the scenario -----------------------------------------------------------------------------


def _s(metric: str, value: float, labels: dict[str, str], at: datetime) -> Sample:
    return Sample(metric=metric, value=value, labels=labels, ts=at)


def ticks() -> Iterator[datetime]:
    at = FIRST_TICK
    while at <= LAST_TICK:
        yield at
        at += TICK


def _n(at: datetime) -> int:
    """Ticks since the first: the clock every reading below is a function of."""
    return int((at - FIRST_TICK) / TICK)


def _gpu_samples(at: datetime) -> tuple[list[Sample], list[Sample]]:
    n = _n(at)
    nvml, derived = [], []
    for uuid, (index, targets) in GPUS.items():
        labels = {"host": HOST, "gpu_uuid": uuid, "gpu_index": index}
        util = 0.25 + 0.5 * ((n * (3 if index == "0" else 7)) % 10) / 10
        nvml += [
            _s("gpuwatch_gpu_info", 1.0, {**labels, "gpu_name": "NVIDIA H100 80GB HBM3"}, at),
            _s("gpuwatch_gpu_utilization_ratio", util, labels, at),
            _s("gpuwatch_gpu_memory_used_bytes", (40 + n % 13) * GiB, labels, at),
            _s("gpuwatch_gpu_memory_total_bytes", 80 * GiB, labels, at),
            _s("gpuwatch_gpu_energy_joules_total", 1e6 + 9_000.0 * n, labels, at),
        ]
        derived += [
            _s("gpuwatch_target_gpu_memory_bytes", m * GiB, {**labels, "target": t}, at)
            for t, m in targets.items()
        ]
    return nvml, derived


def _histogram(
    name: str, labels: dict[str, str], bounds: tuple[str, ...], n: int, at: datetime
) -> list[Sample]:
    """Cumulative bucket counts after ``n`` ticks of traffic, and ``_count`` / ``_sum``."""
    out, running = [], 0.0
    for i, le in enumerate(bounds):
        running += float(n * (len(bounds) - i) + (n * n) % (i + 3))
        out.append(_s(f"{name}_bucket", running, {**labels, "le": le}, at))
    out.append(_s(f"{name}_count", running, labels, at))
    out.append(_s(f"{name}_sum", running * 0.37, labels, at))
    return out


def _engine_samples(target: str, at: datetime) -> list[Sample]:
    labels = {"host": HOST, "target": target, "engine": "vllm", "model": f"{target}-8b"}
    restarted = target == "qwen" and at >= RESTART
    n = _n(at) - _n(RESTART) + 1 if restarted else _n(at)
    scale = 3 if target == "qwen" else 1
    out = [
        _s("gpuwatch_engine_generation_tokens_total", 1_000.0 * n * scale, labels, at),
        _s("gpuwatch_engine_prompt_tokens_total", 4_000.0 * n * scale, labels, at),
        _s("gpuwatch_engine_requests_finished_total", 7.0 * n, {**labels, "reason": "stop"},
               at),
    ]  # fmt: skip
    if target == "llama" and at >= BORN:
        length = {**labels, "reason": "length"}
        out.append(_s("gpuwatch_engine_requests_finished_total", float(_n(at) - _n(BORN) + 1),
                          length, at))  # fmt: skip
    ttft = TTFT_LE_NEW if restarted else TTFT_LE
    out += _histogram("gpuwatch_engine_ttft_seconds", labels, ttft, n, at)
    out += _histogram("gpuwatch_engine_e2e_latency_seconds", labels, E2E_LE, n, at)
    if target == "qwen":
        created = QWEN_CREATED[1] if restarted else QWEN_CREATED[0]
        for name in ("generation_tokens", "prompt_tokens", "ttft_seconds", "e2e_latency_seconds"):
            out.append(_s(f"gpuwatch_engine_{name}_created", created, labels, at))
        stop = {**labels, "reason": "stop"}
        out.append(_s("gpuwatch_engine_requests_finished_created", created, stop, at))
    return out


def round_at(at: datetime) -> Round:
    nvml, derived = _gpu_samples(at)
    runs = [CollectorRun("nvml", at, True, 0.01, tuple(nvml))]
    for target in ("llama", "qwen"):
        down = target == "qwen" and at in DOWN
        up = {"host": HOST, "target": target}
        derived.append(_s("gpuwatch_target_up", 0.0 if down else 1.0, up, at))
        if down:
            runs.append(CollectorRun(f"target/{target}", at, False, 0.5, (),
                                     "connection refused", target))  # fmt: skip
            continue
        samples = tuple(_engine_samples(target, at))
        runs.append(CollectorRun(f"target/{target}", at, True, 0.02, samples, target=target))
    return Round(at, tuple(runs), tuple(derived))


def fill(engine: Engine) -> None:
    """The rounds stored and rolled up as the daemon does: the minute job every five minutes."""
    store = Store(engine, HOST)
    job = metered_rollup(engine, HOST, CARD, interval_seconds=TICK.total_seconds())
    for at in ticks():
        store.write_round(round_at(at))
        if at.minute % 5 == 0 and at.second == 0:
            job.run(at)
    while job.run(NOW).minutes:
        pass


# -- the figures ------------------------------------------------------------------------------

CONFIG = Config(host=HOST, database_url="sqlite://", timezone="UTC",
                budget=BudgetConfig(Decimal(500)))  # fmt: skip
PERIODS = {
    "day": Period(datetime(2026, 11, 30, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC),
                  "2026-11-30", "UTC"),
    # Partial hours at both ends, across the UTC day boundary, in a zone 5:45 ahead.
    "window": Period(datetime(2026, 11, 30, 22, 17, tzinfo=UTC),
                     datetime(2026, 12, 1, 0, 43, tzinfo=UTC), "window", "Asia/Kathmandu"),
    "month": month_period("2026-12", NOW, "Asia/Kolkata"),
}  # fmt: skip


def figures(engine: Engine) -> dict[str, Any]:
    """Every report figure the fixture is checked by, as plain JSON values."""
    out: dict[str, Any] = {}
    for name, period in PERIODS.items():
        # The rollups as stored (fresh=False): what reports read when these figures were made.
        report = build_report(engine, CONFIG, period, now=NOW, fresh=False)
        document = to_document(report)
        document.pop("data")  # what the window holds: a report field added after 0005
        for gpu in (*document["gpus"], *document["top_waste"]):
            gpu.pop("shared_split")  # how a shared GPU was split: a field added after 0005
        out[f"report/{name}"] = document
        for useful in ("output", "output+prompt"):
            summary = summarize(engine, period.start, period.end, useful=useful)
            out[f"summary/{name}/{useful}"] = _summary(summary)
        summary = summarize(engine, period.start, period.end, host=HOST)
        out[f"summary/{name}/host"] = _summary(summary)
    return out


def _summary(summary: Any) -> Any:
    document = plain(dataclasses.asdict(summary))
    for gpu in document["gpus"]:
        gpu.pop("shared")  # how a shared GPU was split: a field added after 0005
    return document


def plain(value: Any) -> Any:
    """``value`` as JSON: Decimals as strings (exact), datetimes as ISO strings."""
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, set | frozenset):
        return sorted(plain(v) for v in value)
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, float) and not math.isfinite(value):
        return repr(value)
    return value


# -- the rows -----------------------------------------------------------------------------------


def dump_rows(engine: Engine) -> dict[str, Any]:
    """Every table's columns and rows, in primary-key order (reflected: the database's own
    layout at this revision, whatever migrations.schema says later)."""
    reflected = MetaData()
    reflected.reflect(engine)
    out: dict[str, Any] = {}
    with engine.connect() as conn:
        for table in reflected.sorted_tables:
            if table.name == "alembic_version":
                continue
            key = list(table.primary_key.columns) or list(table.columns)
            rows = conn.execute(select(table).order_by(*key)).all()
            out[table.name] = {
                "columns": [c.name for c in table.columns],
                "rows": [[_value(v) for v in row] for row in rows],
            }
    return out


def _value(value: Any) -> Any:
    if isinstance(value, datetime):
        # SQLite hands back naive UTC instants: say so.
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).isoformat()
    if isinstance(value, set | frozenset):
        return sorted(plain(v) for v in value)
    if isinstance(value, Decimal):
        return str(value)
    return value


def main() -> None:
    from alembic import command

    from agent.storage.db import create_engine
    from migrations.runner import alembic_config

    with tempfile.TemporaryDirectory() as tmp:
        engine = create_engine(f"sqlite:///{tmp}/gpuwatch.db")
        with engine.begin() as conn:
            command.upgrade(alembic_config(conn), "0005")
        fill(engine)
        rows = dump_rows(engine)
        reports = figures(engine)
        engine.dispose()
    ROWS.write_text(json.dumps(rows, separators=(",", ":")) + "\n")
    REPORTS.write_text(json.dumps(reports, indent=1, sort_keys=True) + "\n")
    sizes = {name: len(t["rows"]) for name, t in rows.items()}
    print(f"{ROWS.name}: {ROWS.stat().st_size} bytes {sizes}")
    print(f"{REPORTS.name}: {REPORTS.stat().st_size} bytes")


if __name__ == "__main__":
    main()


def as_of_0005(got: Any, want: Any) -> Any:
    """``got`` with only the keys ``want`` has, at every depth: the figures that existed when
    the fixture was made (fields added since, such as abandoned tokens or team rows, are
    additions, not changes; every figure the fixture holds must still be there, unchanged)."""
    if isinstance(want, dict) and isinstance(got, dict):
        return {k: as_of_0005(v, want[k]) for k, v in got.items() if k in want}
    if isinstance(want, list) and isinstance(got, list) and len(want) == len(got):
        return [as_of_0005(g, w) for g, w in zip(got, want, strict=True)]
    return got


# Advice, not figures: a recommendation scales from the hours observed and
# withholds per-month savings below `[cost] min_observed` (24 h; the fixture holds 2 h), so its
# text changed by design, whatever the database.
ADVICE = "recommendations"


def without_advice(figures: dict[str, Any]) -> dict[str, Any]:
    return {
        name: {k: v for k, v in doc.items() if k != ADVICE} if name.startswith("report/") else doc
        for name, doc in figures.items()
    }
