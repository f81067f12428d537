"""Shared by the fleet tests: boxes with their own local databases filled the way a daemon
fills them (the simulated month of tests/agent/report_month.py, cut to a few days, one host
per box, rolled up by the real rollup job), a central PostgreSQL, and a forwarder between."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

from sqlalchemy import Engine, insert, select

from agent.config.settings import BudgetConfig, Config
from agent.cost.billing import save_records
from agent.cost.metering import metered_rollup
from agent.reporting.build import build_report
from agent.reporting.model import Period
from agent.reporting.render.dispatch import render
from agent.storage.db import open_database, upgrade_database
from agent.storage.store import Store, labels_json
from collectors.billing.base import CostKind, CostRecord
from migrations.schema import alert_history
from tests.agent import report_month as M

HOSTS = ("a", "b")
HOURS = 50  # two local days and a bit: a previous period, whole days, a partial tail
START = M.FIRST_TICK
END = START + timedelta(hours=HOURS)
AFTER = END + timedelta(minutes=5)


PERIOD = Period(START, START + timedelta(hours=48), "2026-09-30..2026-10-02", M.ZONE)
CONFIG = Config(host="a", database_url="sqlite://", timezone=M.ZONE,
                budget=BudgetConfig(Decimal(10000)))  # fmt: skip


def report_json(engine: Engine, hosts: tuple[str, ...] = ()) -> str:
    return render(build_report(engine, CONFIG, PERIOD, now=AFTER, hosts=hosts), "json")


def own(engine: Engine, host: str) -> dict[str, object]:
    """The parts of a host's report that are its own figures (the budget is the fleet's)."""
    doc = json.loads(report_json(engine, (host,)))
    return {k: doc[k] for k in ("totals", "models", "hosts", "gpus", "alerts")}


def sqlite_engine(folder: Path, name: str) -> Engine:
    url = f"sqlite:///{folder / name}.db"
    upgrade_database(url)
    return open_database(url)


def fill(
    engine: Engine,
    hosts: tuple[str, ...],
    until: datetime = END,
    every: timedelta = timedelta(hours=6),
    after_rollup: Callable[[datetime], None] | None = None,
) -> None:
    """Hourly rounds of ``hosts`` from START to ``until``, rolled up every ``every`` (and
    ``after_rollup`` called after each run: where the daemon forwards)."""
    stores = {h: Store(engine, h) for h in hosts}
    jobs = {h: metered_rollup(engine, h, M.CARD, interval_seconds=3600) for h in hosts}
    counters: M.Counters = defaultdict(float)
    tick = START
    while tick <= until:
        for host, store in stores.items():
            store.write_round(M._round(host, tick, counters))
        if (tick - START) % every == timedelta(0) or tick == until:
            for job in jobs.values():
                job.run(tick)
            if after_rollup is not None:
                after_rollup(tick)
        tick += timedelta(hours=1)
    for job in jobs.values():
        while job.run(until + timedelta(minutes=5)).minutes:
            pass
    if after_rollup is not None:
        after_rollup(until + timedelta(minutes=5))


def bill(source: str, day: str, amount: str) -> CostRecord:
    start = M.at(f"{day}T00:00")
    return CostRecord(source, f"{source}-{day}", "pod-1", start, start + timedelta(days=1),
                      Decimal(amount), "USD", CostKind.BILLED)  # fmt: skip


BILLS = [bill("runpod", "2026-09-30", "70"), bill("lambda", "2026-10-01", "40.5")]


def store_alerts(engine: Engine, scopes: tuple[str, ...]) -> None:
    rows = [
        {"scope": scope, "rule": rule, "labels": labels_json(labels), "severity": "warning",
         "fired_at": fired, "resolved_at": resolved, "summary": summary}
        for scope, rule, labels, fired, resolved, summary in M.ALERTS
        if scope in scopes
    ]  # fmt: skip
    if rows:
        with engine.begin() as conn:
            conn.execute(insert(alert_history), rows)


def store_bills(engine: Engine) -> None:
    with engine.begin() as conn:
        save_records(conn, BILLS, AFTER)


def history(engine: Engine) -> list[tuple[object, ...]]:
    t = alert_history.c
    query = select(t.scope, t.rule, t.labels, t.fired_at, t.resolved_at, t.summary)
    with engine.connect() as conn:
        return sorted(tuple(r) for r in conn.execute(query))
