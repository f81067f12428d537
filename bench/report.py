"""Benchmark: `gpuwatch report --month` for a 64-GPU, 8-model fleet over 30 days, on SQLite and
PostgreSQL, next to the cost engine's own month answer measured in the same run.

    python bench/cost.py --step-seconds 60 --histograms --no-diagnostics \\
        --database-url sqlite:////tmp/benchreport.db          # once: load and fill (long)
    python bench/report.py --database-url sqlite:////tmp/benchreport.db \\
        [--postgres-url postgresql+psycopg://...] [--rounds 5]

The fleet is bench/cost.py's (8 hosts x 8 GPUs, 8 models, restarts, an instance price, a price
change, an owned host) with latency histograms (TTFT and end-to-end, 9 buckets each) and GPU
memory, loaded as raw samples and rolled up by the real ``Rollup`` job of each host. The raw
samples are 60 s apart, not the daemon's 10 s: a report reads only the minute and hour rollups,
and those have one row per series and minute (or hour) at any raw resolution of a minute or
finer, so the tables the report reads are the size a 10 s daemon makes; 10 s raw samples would
only lengthen the fill (about two hours on the 2-core development machine). On top, this script
stores a month of alert history (300 alerts over the rules) and daily billing records per host,
so every section of the report has data.

PostgreSQL: the filled tables (everything but the raw samples, which a report never reads) are
copied into the given database, then timed the same way.

Measured per database: the baseline, ``agent.cost.summarize.summarize`` over the month (the one
query behind the cost figures), then ``build_report`` for the month (every section, the previous
month's trend and the daily chart series), then each rendering. Target: the report under 2 s.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sqlalchemy import Engine, Table, delete, func, insert, select  # noqa: E402

from agent.config.settings import BudgetConfig, Config  # noqa: E402
from agent.cost.summarize import summarize  # noqa: E402
from agent.reporting.build import build_report  # noqa: E402
from agent.reporting.period import month_period  # noqa: E402
from agent.reporting.render.dispatch import render  # noqa: E402
from agent.storage.db import open_database, upgrade_database  # noqa: E402
from bench.cost import T0, build_fleet, rate_card  # noqa: E402
from bench.timing import ms, timed  # noqa: E402
from migrations.schema import alert_history, cost_records, metadata  # noqa: E402

DAYS, GPUS, MODELS = 30, 64, 8
TARGET_S = 2.0
MONTH = "2026-11"
NOW = T0 + timedelta(days=DAYS, minutes=10)
# Tables a report may read; the raw samples and collector runs stay behind.
COPIED = (
    "series", "rollups", "histogram_layouts", "histogram_rollups", "gpu_usage",
    "gpu_allocations", "rollup_state", "cost_records", "billing_resources", "alert_history",
)  # fmt: skip
RULES = ("GpuIdle", "LatencyP99Spike", "QueueGrowing", "TargetDown", "KvCacheSaturated")


def seed_extras(engine: Engine, hosts: Sequence[str]) -> None:
    """A month of alert history and daily billed records (replacing earlier seeds)."""
    rng = random.Random(7)
    alerts = []
    for n in range(300):
        fired = T0 + timedelta(minutes=rng.randrange(DAYS * 1440))
        rule = RULES[n % len(RULES)]
        labels = {"host": rng.choice(hosts), "target": f"t{n % 8}", "model": f"m{n % 8}"}
        alerts.append({
            "scope": labels["host"], "rule": rule, "labels": json.dumps(labels, sort_keys=True),
            "severity": "warning", "fired_at": fired,
            "resolved_at": fired + timedelta(minutes=rng.randrange(5, 240)),
            "summary": f"{rule} on {labels['host']}",
        })  # fmt: skip
    bills = []
    for day in range(DAYS):
        start = T0 + timedelta(days=day)
        for host in hosts:
            bills.append({
                "source": "runpod", "record_id": f"{host}-{day}", "kind": "billed",
                "resource": host, "period_start": start, "period_end": start + timedelta(days=1),
                "amount": Decimal("480.00"), "currency": "USD", "description": "pod",
                "imported_at": NOW,
            })  # fmt: skip
    with engine.begin() as conn:
        conn.execute(delete(alert_history))
        conn.execute(delete(cost_records).where(cost_records.c.source == "runpod"))
        conn.execute(insert(alert_history), alerts)
        conn.execute(insert(cost_records), bills)


def copy_to(source: Engine, url: str) -> Engine:
    """The report's tables, copied into a freshly upgraded PostgreSQL."""
    upgrade_database(url)
    target = open_database(url)
    tables = [metadata.tables[name] for name in COPIED]
    with target.begin() as conn:
        for table in reversed(tables):
            conn.execute(delete(table))
    for table in tables:
        _copy_table(source, target, table)
    return target


def _copy_table(source: Engine, target: Engine, table: Table) -> None:
    t = time.perf_counter()
    count = 0
    with source.connect() as src, target.begin() as dst:
        result = src.execution_options(yield_per=50_000).execute(select(table))
        for chunk in result.mappings().partitions():
            dst.execute(insert(table), [dict(r) for r in chunk])
            count += len(chunk)
    print(f"  copied {table.name}: {count:,} rows in {time.perf_counter() - t:.1f} s")


def measure(engine: Engine, kind: str, config: Config, rounds: int) -> float:
    period = month_period(MONTH, NOW, config.timezone)
    base = timed(lambda _: summarize(engine, period.start, period.end), rounds)
    report_times: list[float] = []
    report = None
    for _ in range(rounds):
        t = time.perf_counter()
        report = build_report(engine, config, period, now=NOW)
        report_times.append(time.perf_counter() - t)
    assert report is not None
    print(f"{kind}: baseline, summarize over the month        {ms(base)}")
    print(f"{kind}: build_report --month {MONTH}              {ms(report_times)}")
    for fmt in ("table", "json", "csv", "markdown", "html"):
        once: Callable[[int], object] = lambda _, f=fmt: render(report, f)  # noqa: E731
        print(f"{kind}:   render {fmt:<9}                         {ms(timed(once, rounds))}")
    median = statistics.median(report_times)
    print(
        f"{kind}: report = {median / statistics.median(base):.1f} x the baseline; "
        f"target {TARGET_S:g} s -> {median:.3f} s, {'OK' if median < TARGET_S else 'OVER TARGET'}"
    )
    return median


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--database-url", required=True, help="SQLite filled by bench/cost.py")
    parser.add_argument("--postgres-url", help="also time it on this PostgreSQL (emptied)")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    engine = open_database(args.database_url)
    with engine.connect() as conn:
        rollup_rows = conn.execute(select(func.count()).select_from(metadata.tables["rollups"]))
        if not rollup_rows.scalar():
            print("the database holds no rollups: fill it with bench/cost.py first (see --help)")
            return 2
    fleet = build_fleet(DAYS, GPUS, MODELS, 60.0, histograms=True)
    seed_extras(engine, fleet.hosts)
    config = Config(
        host=fleet.hosts[0],
        database_url=args.database_url,
        rates=rate_card(fleet, DAYS).rates,
        budget=BudgetConfig(monthly_usd=Decimal(120000)),
    )
    print(f"fleet: {len(fleet.hosts)} hosts, {len(fleet.gpus)} GPUs, {MODELS} models, {DAYS} days")
    failed = measure(engine, "SQLite", config, args.rounds) >= TARGET_S
    if args.postgres_url:
        print("PostgreSQL: copying the report's tables")
        pg = copy_to(engine, args.postgres_url)
        failed |= measure(pg, "PostgreSQL", config, args.rounds) >= TARGET_S
        pg.dispose()
    engine.dispose()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
