"""Day rows: UTC days merged from hour rows, read by every month-long question instead of the
day's 24 hour rows (a month of a 1,024-GPU fleet is hundreds of thousands of hour rows per table).

On the simulated month of tests/agent/report_month.py (two hosts, a month of hourly rounds, the
real rollup job), on SQLite and PostgreSQL: each day row is the exact merge of its hours; a
window's answer is the same whether day rows exist or not, at every edge a window can have; a
report in UTC reads them (a changed day row changes it); a report in a zone with an offset
gives the same figures either way; a database from before day rows catches up a month per
rollup run and its reports do not move.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import fields, is_dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from sqlalchemy import Engine, delete, func, select, update

from agent.config.settings import BudgetConfig, Config
from agent.cost.metering import metered_rollup
from agent.cost.signals import host_samples
from agent.cost.split import Split
from agent.cost.summarize import summarize
from agent.reporting.build import build_report
from agent.reporting.period import month_period
from agent.reporting.render.dispatch import render
from agent.storage.buckets import unpack
from agent.storage.db import open_database
from agent.storage.rollup import DAY, HOUR, MAX_DAYS
from migrations.schema import (
    gpu_allocations,
    gpu_usage,
    histogram_layouts,
    histogram_rollups,
    rollup_state,
    rollups,
    series,
)
from tests.agent import report_month as M
from tests.agent.conftest import MonthTemplates

AFTER = datetime(2026, 11, 1, 1, 30, tzinfo=UTC)
LEDGER = (gpu_usage, gpu_allocations)
ROLLED = (rollups, histogram_rollups)


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def month(request: pytest.FixtureRequest, month_templates: MonthTemplates) -> Iterator[Engine]:
    """The simulated month in a database of its own (module-scoped: every test here only reads
    it), a copy of the one tests/agent/conftest.py fills once per backend."""
    for url in month_templates.copy(request.param):
        engine = open_database(url)
        try:
            yield engine
        finally:
            engine.dispose()


def config(zone: str) -> Config:
    return Config(host="a", database_url="sqlite://", timezone=zone,
                  budget=BudgetConfig(Decimal(10000)))  # fmt: skip


def report_json(engine: Engine, zone: str) -> str:
    period = month_period("2026-10", AFTER, zone)
    return render(build_report(engine, config(zone), period, now=AFTER), "json")


def day_rows(engine: Engine) -> int:
    with engine.connect() as conn:
        return sum(
            conn.execute(select(func.count()).where(t.c.resolution == DAY)).scalar_one()
            for t in (*ROLLED, *LEDGER)
        )


def forget_days(engine: Engine) -> None:
    """The database as it was before day rows: no day rows, no day watermark."""
    with engine.begin() as conn:
        for table in (*ROLLED, *LEDGER):
            conn.execute(delete(table).where(table.c.resolution == DAY))
        conn.execute(delete(rollup_state).where(rollup_state.c.job == "day"))


def catch_up(engine: Engine) -> list[int]:
    """Day rows per rollup run until each host is caught up (as the daemon's minute job)."""
    runs = []
    for host in M.RATES:
        job = metered_rollup(engine, host, M.CARD, interval_seconds=3600)
        while days := job.run(AFTER).days:
            runs.append(days)
    return runs


# -- what a day row holds -------------------------------------------------------------------------


def test_each_day_row_is_the_exact_merge_of_its_hours(month: Engine) -> None:
    with month.connect() as conn:
        marks = dict(
            conn.execute(
                select(rollup_state.c.host, rollup_state.c.watermark).where(
                    rollup_state.c.job == "day"
                )
            ).all()
        )
        # Every UTC day the hour rollup completed, and no more: the last hour row is 00:00 on
        # November 1st, whose day is not complete.
        assert set(marks.values()) == {datetime(2026, 11, 1, tzinfo=UTC)}
        for table, key in ((gpu_usage, ("host", "gpu_uuid")), (gpu_allocations,
                           ("host", "gpu_uuid", "target"))):  # fmt: skip
            sums = ("observed_seconds", "busy_seconds", "cost_usd", "idle_cost_usd")
            sums = tuple(c for c in sums if c in table.c) or ("seconds", "busy_seconds", "cost_usd")
            assert _ledger_days(conn, table, key, sums) == _ledger_hours(conn, table, key, sums)
        assert _rollup_days(conn) == _rollup_hours(conn)
        assert _histogram_days(conn) == _histogram_hours(conn)


def _ledger_days(conn: Any, table: Any, key: tuple[str, ...], sums: tuple[str, ...]) -> dict:
    rows = conn.execute(select(table).where(table.c.resolution == DAY)).mappings()
    got = {(*(r[k] for k in key), r["start"]): tuple(r[s] for s in sums) for r in rows}
    assert got, "no day rows"
    return got


def _ledger_hours(conn: Any, table: Any, key: tuple[str, ...], sums: tuple[str, ...]) -> dict:
    query = select(table).where(
        table.c.resolution == HOUR, table.c.start < datetime(2026, 11, 1, tzinfo=UTC)
    )
    out: dict[tuple[Any, ...], list[Any]] = {}
    for r in conn.execute(query).mappings():
        acc = out.setdefault((*(r[k] for k in key), _day(r["start"])), [None] * len(sums))
        for i, s in enumerate(sums):
            acc[i] = r[s] if acc[i] is None else acc[i] if r[s] is None else acc[i] + r[s]
    return {k: tuple(v) for k, v in out.items()}


def _rollup_days(conn: Any) -> dict:
    rows = conn.execute(select(rollups).where(rollups.c.resolution == DAY)).mappings()
    return {(r["series_id"], r["start"]): (r["count"], r["sum"], r["min"], r["max"], r["last"],
            r["increase"]) for r in rows}  # fmt: skip


def _rollup_hours(conn: Any) -> dict:
    query = (
        select(rollups)
        .where(rollups.c.resolution == HOUR, rollups.c.start < datetime(2026, 11, 1, tzinfo=UTC))
        .order_by(rollups.c.series_id, rollups.c.start)
    )
    out: dict[tuple[int, datetime], list[Any]] = {}
    for r in conn.execute(query).mappings():
        key = (r["series_id"], _day(r["start"]))
        if key not in out:
            out[key] = [r["count"], r["sum"], r["min"], r["max"], r["last"], r["increase"]]
            continue
        acc = out[key]
        acc[0] += r["count"]
        acc[1] += r["sum"]
        acc[2], acc[3], acc[4] = min(acc[2], r["min"]), max(acc[3], r["max"]), r["last"]
        if r["increase"] is not None:
            acc[5] = r["increase"] if acc[5] is None else acc[5] + r["increase"]
    return {k: tuple(v) for k, v in out.items()}


def _histogram_days(conn: Any) -> dict:
    return _histograms(conn, histogram_rollups.c.resolution == DAY, lambda at: at)


def _histogram_hours(conn: Any) -> dict:
    before = histogram_rollups.c.start < datetime(2026, 11, 1, tzinfo=UTC)
    return _histograms(conn, (histogram_rollups.c.resolution == HOUR) & before, _day)


def _histograms(conn: Any, where: Any, day: Any) -> dict:
    h = histogram_rollups.c
    query = (
        select(h.series_id, h.start, histogram_layouts.c.bounds, h.increases)
        .join(histogram_layouts, histogram_layouts.c.id == h.layout_id)
        .where(where)
    )
    out: dict[tuple[int, datetime], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for sid, at, bounds, increases in conn.execute(query):
        for le, increase in unpack(bounds, increases):
            out[(sid, day(at))][le] += increase
    return {k: dict(v) for k, v in out.items()}


def _day(at: datetime) -> datetime:
    return at.replace(hour=0, minute=0, second=0, microsecond=0)


# -- what reads them ------------------------------------------------------------------------------

WINDOWS = (
    # (start, end): the whole month; odd minutes at both ends (head minutes, head hours, days,
    # tail hours, tail minutes); less than a day; one midnight inside; the rollups' newest edge.
    (M.OCT_START, M.OCT_END),
    (datetime(2026, 10, 3, 5, 17, tzinfo=UTC), datetime(2026, 10, 20, 13, 43, tzinfo=UTC)),
    (datetime(2026, 10, 9, 2, 30, tzinfo=UTC), datetime(2026, 10, 9, 21, 15, tzinfo=UTC)),
    (datetime(2026, 10, 9, 22, 0, tzinfo=UTC), datetime(2026, 10, 10, 3, 0, tzinfo=UTC)),
    (datetime(2026, 10, 30, 7, 1, tzinfo=UTC), AFTER),
)


def test_every_window_sums_the_same_with_and_without_day_rows(month: Engine) -> None:
    with month.connect() as conn:
        split = Split.read(conn, *WINDOWS[1])
    assert split.day_end("a") == datetime(2026, 10, 20, tzinfo=UTC)  # the day rows answer
    with_days = [summarize(month, start, end) for start, end in WINDOWS]
    hours_only = _without_days(month, lambda: [summarize(month, s, e) for s, e in WINDOWS])
    assert len(with_days) == len(hours_only)
    for got, want in zip(with_days, hours_only, strict=True):
        _same(got, want)


def _same(got: Any, want: Any) -> None:
    """Equal, numbers to 12 digits: SQLite keeps money as binary floats, and day rows add
    the same hours in another order (PostgreSQL's numeric is exact either way)."""
    if is_dataclass(got):
        assert type(got) is type(want)
        for f in fields(got):
            _same(getattr(got, f.name), getattr(want, f.name))
    elif isinstance(got, tuple):
        assert len(got) == len(want)
        for a, b in zip(got, want, strict=True):
            _same(a, b)
    elif isinstance(got, dict):  # the summary's per-target figures
        assert got.keys() == want.keys()
        for key in got:
            _same(got[key], want[key])
    elif isinstance(got, Decimal | float) and not isinstance(got, bool):
        assert math.isclose(got, want, rel_tol=1e-12, abs_tol=1e-9), (got, want)
    else:
        assert got == want


# UTC days; an offset whose day row keeps its first hours (Madrid: +2, +1 after the 25th); a
# negative one (New York: its last hours); one of half hours (Kolkata, +05:30).
ZONES = ("UTC", M.ZONE, "America/New_York", "Asia/Kolkata")


def test_reports_in_every_zone_give_the_same_figures_with_and_without_day_rows(
    month: Engine,
) -> None:
    with_days = [report_json(month, zone) for zone in ZONES]
    assert _without_days(month, lambda: [report_json(month, zone) for zone in ZONES]) == with_days


@pytest.mark.parametrize("zone", ["UTC", M.ZONE])
def test_a_changed_day_row_shows_in_the_report(month: Engine, zone: str) -> None:
    """The day rows are what answers, in UTC and in an offset zone alike."""
    before = report_json(month, zone)
    at = datetime(2026, 10, 12, tzinfo=UTC)
    doubled = (gpu_usage.c.resolution == DAY) & (gpu_usage.c.start == at)
    with month.begin() as conn:
        conn.execute(update(gpu_usage).where(doubled).values(cost_usd=gpu_usage.c.cost_usd * 2))
    try:
        assert report_json(month, zone) != before
    finally:
        with month.begin() as conn:
            conn.execute(update(gpu_usage).where(doubled).values(cost_usd=gpu_usage.c.cost_usd / 2))
    assert report_json(month, zone) == before


def test_a_database_from_before_day_rows_catches_up_a_month_a_run(month: Engine) -> None:
    utc, madrid = report_json(month, "UTC"), report_json(month, M.ZONE)
    forget_days(month)
    # 33 UTC days (September 29th to October 31st) per host: 31, then the other 2.
    assert catch_up(month) == [MAX_DAYS.days, 2, MAX_DAYS.days, 2]
    assert day_rows(month) > 0
    assert (report_json(month, "UTC"), report_json(month, M.ZONE)) == (utc, madrid)


def _without_days(engine: Engine, measure: Any) -> Any:
    """``measure()`` on the database without its day rows, which are then made again."""
    forget_days(engine)
    try:
        return measure()
    finally:
        catch_up(engine)
        assert day_rows(engine) > 0


def test_retention_keeps_a_day_row_until_its_whole_day_is_past_the_cutoff(month: Engine) -> None:
    def first_day(host: str) -> set[datetime]:
        with month.connect() as conn:
            return {
                conn.execute(
                    select(func.min(t.c.start)).where(t.c.host == host, t.c.resolution == DAY)
                ).scalar_one()
                for t in LEDGER
            }

    other = first_day("b")
    # The hours' cutoff is October 1st, 01:30: that day's row stays, answering for its hours.
    keep = AFTER - datetime(2026, 10, 1, 1, 30, tzinfo=UTC)
    metered_rollup(month, "a", M.CARD, interval_seconds=3600, hour_retention=keep).run(AFTER)
    try:
        assert first_day("a") == {datetime(2026, 10, 1, tzinfo=UTC)}
        assert first_day("b") == other  # another host's rows are its own rollup's to trim
    finally:
        _rebuild(month, "a")


def _rebuild(engine: Engine, host: str) -> None:
    """``host``'s hour and day rows made again from its minute rows (other tests read them)."""
    with engine.begin() as conn:
        own = select(series.c.id).where(series.c.host == host)
        for table in ROLLED:
            conn.execute(delete(table).where(table.c.series_id.in_(own), table.c.resolution > 60))
        for table in LEDGER:
            conn.execute(delete(table).where(table.c.host == host, table.c.resolution > 60))
        conn.execute(
            delete(rollup_state).where(
                rollup_state.c.host == host, rollup_state.c.job.in_(("hour", "day"))
            )
        )
    job = metered_rollup(engine, host, M.CARD, interval_seconds=3600)
    while job.run(AFTER).days:
        pass


def test_the_spend_counters_read_day_rows_and_do_not_move(month: Engine) -> None:
    def totals() -> dict[str, float]:
        samples = host_samples(month, config("UTC"), AFTER)
        return {s.metric: s.value for s in samples if s.metric.endswith("_usd_total")}

    with_days = totals()
    assert _without_days(month, totals) == pytest.approx(with_days, rel=1e-12)
    # The host's whole ledger (its hour rows end at 01:00 on November 1st).
    everything = summarize(month, M.FIRST_TICK - timedelta(days=1), AFTER, host="a")
    assert with_days["gpuwatch_spend_usd_total"] == pytest.approx(
        float(everything.fleet.cost_usd), rel=1e-12
    )


def test_a_text_report_read_without_days_prints_the_same(month: Engine) -> None:
    """`gpuwatch report` in table or markdown reads the window as one sum per GPU and target
    (the daily series are not printed there): the same text as the full report's."""
    period = month_period("2026-10", AFTER, M.ZONE)
    cfg = config(M.ZONE)
    full = build_report(month, cfg, period, now=AFTER)
    lean = build_report(month, cfg, period, now=AFTER, daily=False)
    assert lean.daily_spend == lean.model_days == lean.gpu_days == ()
    for fmt in ("table", "markdown"):
        assert render(lean, fmt) == render(full, fmt)
