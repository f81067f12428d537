"""The fleet's budget figures: month-to-date spend, billed against metered, the pace and the
month-end forecast, and the spend per hour.

Budget alerts (:mod:`agent.alerting.budget_rules`) and reports (:mod:`agent.reporting.build`)
both read these, so a forecast in a report and in an alert is one figure computed one way.
:func:`gather_budget` reads the whole database (every host of a shared PostgreSQL, or the one
box of an SQLite store) into :class:`BudgetInputs`; everything else here is pure. Money stays
Decimal.

Months are calendar months in the configured time zone (``timezone``): a budget resets when
the users' month does, not at midnight UTC.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta, tzinfo
from decimal import ROUND_HALF_UP, Decimal

from sqlalchemy import Engine, func, select

from agent.config.settings import Config
from agent.cost.billing import billed
from agent.cost.split import Split
from agent.cost.summarize import Line, metered_usd, summarize
from agent.cost.team_budget import team_spends
from agent.cost.tenant_budget import tenant_spends
from alerts.rules import DEFAULT_RULES, RuleSpec
from migrations.schema import gpu_usage

MINUTE, HOUR = 60, 3600
BURN_WINDOW = timedelta(hours=24)  # the pace a forecast extrapolates: a day evens out day/night
JUMP_BASELINE = timedelta(days=7)  # a week of hours: weekday and weekend both in the median
# The hour rollup of the last hour lands a few minutes into the next; until it does, the hour
# before is judged again, so a jump alert does not resolve and re-pend at every hour's start.
JUMP_FRESH = timedelta(hours=2)


@dataclass(frozen=True, slots=True)
class BudgetInputs:
    """One evaluation's view of the fleet's spend. Times are UTC-aware; money is USD."""

    now: datetime
    budget_usd: Decimal | None  # budget.monthly_usd; None (or 0): no budget configured
    metered_usd: Decimal  # month to date: rate card x metered uptime, every host
    billed_usd: Decimal | None = None  # month to date as providers billed it; None: no records
    zone: tzinfo = UTC  # the configured time zone: whose calendar month, whose dates
    burn_usd: Decimal = Decimal(0)  # metered spend over the burn window
    # The time the GPUs were observed in the burn window (the longest any GPU was metered in
    # it): the history a forecast stands on. Not the window's span: a daemon started at
    # 09:00:47 has metered 13 s of the 09:00 minute, not 60.
    burn_seconds: float = 0.0
    hourly_usd: tuple[tuple[datetime, Decimal], ...] = ()  # complete hours, oldest first
    models: tuple[Line, ...] = ()  # per model over ``model_window_seconds``
    model_window_seconds: float = 86400.0
    team: str | None = None  # set: these are that team's figures ([[budget.teams]])
    teams: tuple[BudgetInputs, ...] = ()  # each budgeted team's, beside the fleet's
    tenant: str | None = None  # set: that gateway tenant's figures ([[budget.tenants]])
    tenants: tuple[BudgetInputs, ...] = ()  # each budgeted tenant's

    @property
    def month_start(self) -> datetime:
        return month_bounds(self.now, self.zone)[0]

    @property
    def month_end(self) -> datetime:
        return month_bounds(self.now, self.zone)[1]

    @property
    def month(self) -> str:
        """The month as "YYYY-MM" in the configured zone (an alert label)."""
        return f"{self.now.astimezone(self.zone):%Y-%m}"

    @property
    def source(self) -> str:
        """Which month-to-date figure counts: "billed" when providers billed more than was
        metered (the bill includes what gpuwatch cannot see: storage, egress, unwatched boxes),
        else "metered" (the bill lags: providers post charges hours or a day late, or none)."""
        if self.billed_usd is not None and self.billed_usd > self.metered_usd:
            return "billed"
        return "metered"

    @property
    def spent_usd(self) -> Decimal:
        """Month-to-date spend, by ``source``."""
        if self.source == "billed" and self.billed_usd is not None:
            return self.billed_usd
        return self.metered_usd

    @property
    def pace_usd_per_second(self) -> Decimal | None:
        """The metered pace over the burn window; None without any metered history."""
        if self.burn_seconds <= 0:
            return None
        return self.burn_usd / Decimal(repr(self.burn_seconds))

    @property
    def basis(self) -> str:
        """What the forecast stands on, for people: "at $2.72/h observed over the last 0.2 h"
        (or "no metered time yet: the spend so far")."""
        pace = self.pace_usd_per_second
        if pace is None:
            return "no metered time yet: the spend so far"
        hours = Decimal(repr(self.burn_seconds / HOUR)).quantize(Decimal("0.1"), ROUND_HALF_UP)
        per_hour = (pace * HOUR).quantize(Decimal("0.01"), ROUND_HALF_UP)
        return f"at ${per_hour:,}/h observed over the last {hours:,} h"

    @property
    def forecast_usd(self) -> Decimal:
        """Month-end spend: spent so far plus the pace until the month ends."""
        pace = self.pace_usd_per_second
        if pace is None:
            return self.spent_usd
        left = max((self.month_end - self.now).total_seconds(), 0.0)
        return self.spent_usd + pace * Decimal(repr(left))

    @property
    def budget(self) -> Decimal | None:
        # A zero budget counts as none, as for gpuwatch_budget_used_ratio: a ratio to zero is
        # no information, and "monthly_usd = 0" is how a budget gets switched off in practice.
        return self.budget_usd if self.budget_usd else None


def month_bounds(now: datetime, zone: tzinfo) -> tuple[datetime, datetime]:
    """[start, end) of the calendar month of ``now`` in ``zone``, as UTC instants."""
    local = now.astimezone(zone)
    start = datetime(local.year, local.month, 1, tzinfo=zone)
    end = datetime(local.year + local.month // 12, local.month % 12 + 1, 1, tzinfo=zone)
    return start.astimezone(UTC), end.astimezone(UTC)


# -- gathering (the only part that queries) ---------------------------------------------------


def gather_budget(
    engine: Engine,
    config: Config,
    now: datetime,
    rules: Mapping[str, RuleSpec] = DEFAULT_RULES,
) -> BudgetInputs:
    """The fleet's spend as the budget rules read it at ``now`` (every host in the database).

    Windows end at ``now``'s minute, where the rollups are exact; the last minute or two may
    not be rolled up yet, which under-states a month's spend by cents, never over-states it.
    """
    end = now.replace(second=0, microsecond=0)
    window = _seconds(rules, "CostPerMtokHigh", "window")
    useful = config.cost.useful_tokens
    models = summarize(engine, end - timedelta(seconds=window), end, useful=useful).models
    return replace(
        gather_spend(engine, config, now),
        hourly_usd=_hourly(engine, now),
        models=models,
        model_window_seconds=window,
    )


def gather_spend(engine: Engine, config: Config, now: datetime) -> BudgetInputs:
    """What :func:`gather_budget` reads for the month to date and the forecast alone (a
    report's budget section), without the hourly spend and the models' window the alerts
    also judge. Sums of the ledger only: a month's tokens are not read, and its allocations
    only per target where ``[[budget.teams]]`` budgets need them (agent.cost.team_budget)."""
    end = now.replace(second=0, microsecond=0)
    month_start, _ = month_bounds(now, config.zone)
    burn_start = max(month_start, end - BURN_WINDOW)
    burn_usd, burn_seconds = _burn(engine, burn_start, end)
    fleet = BudgetInputs(
        now=now,
        budget_usd=config.budget.monthly_usd,
        metered_usd=metered_usd(engine, month_start, end),
        billed_usd=_billed_usd(engine, month_start, now),
        zone=config.zone,
        burn_usd=burn_usd,
        burn_seconds=burn_seconds,
    )
    teams = _teams(engine, config, fleet, burn_start)
    return replace(fleet, teams=teams, tenants=_tenants(engine, config, fleet, burn_start))


def _teams(
    engine: Engine, config: Config, fleet: BudgetInputs, burn_start: datetime
) -> tuple[BudgetInputs, ...]:
    """Each ``[[budget.teams]]`` team's figures: the fleet's, scoped to the team's cost."""
    end = fleet.now.replace(second=0, microsecond=0)
    has_burn = fleet.burn_seconds > 0
    spends = team_spends(engine, config, fleet.month_start, burn_start if has_burn else None, end)
    return tuple(
        replace(
            fleet,
            team=t.team,
            budget_usd=t.budget_usd,
            metered_usd=t.metered_usd,
            billed_usd=None,
            burn_usd=t.burn_usd,
            hourly_usd=(),
            models=(),
            teams=(),
        )
        for t in spends
    )


def _tenants(
    engine: Engine, config: Config, fleet: BudgetInputs, burn_start: datetime
) -> tuple[BudgetInputs, ...]:
    """Each ``[[budget.tenants]]`` tenant's figures: the fleet's, scoped to its real cost."""
    end = fleet.now.replace(second=0, microsecond=0)
    burn = burn_start if fleet.burn_seconds > 0 else None
    return tuple(
        replace(fleet, tenant=t.tenant, budget_usd=t.budget_usd, metered_usd=t.metered_usd,
                billed_usd=None, burn_usd=t.burn_usd, hourly_usd=(), models=(), teams=())
        for t in tenant_spends(engine, config, fleet.month_start, burn, end)
    )  # fmt: skip


def _seconds(rules: Mapping[str, RuleSpec], rule: str, name: str) -> float:
    """A window threshold of a rule, the default where the user's rules lack it."""
    key = f"{name}_seconds"
    value = (rules.get(rule) or DEFAULT_RULES[rule]).thresholds.get(key)
    return float(value if value is not None else DEFAULT_RULES[rule].thresholds[key] or 0.0)


def _billed_usd(engine: Engine, start: datetime, end: datetime) -> Decimal | None:
    """What providers billed in USD for charges that started this month; None without any
    record (no billing source, or nothing billed yet), which is not the same as $0 billed."""
    usd = [
        amount for (_, currency), amount in billed(engine, start, end).items() if currency == "USD"
    ]
    return sum(usd, Decimal(0)) if usd else None


def _burn(engine: Engine, start: datetime, end: datetime) -> tuple[Decimal, float]:
    """The fleet's priced metered cost over (start, end] and the time it was observed: the
    longest any GPU was metered (the fleet's GPUs are watched together, so that is the time
    the spend was seen; a new install's few minutes are a few minutes, not the whole day)."""
    t = gpu_usage.c
    with engine.connect() as conn:
        split = Split.read(conn, start, end)
        query = (
            select(func.sum(t.cost_usd), func.sum(t.observed_seconds))
            .where(split.rows(gpu_usage, t.host), t.cost_usd.is_not(None))
            .group_by(t.host, t.gpu_uuid)
        )
        rows = conn.execute(query).all()
    cost = sum((Decimal(0) + (usd or Decimal(0)) for usd, _ in rows), Decimal(0))
    return cost, max((float(seconds or 0.0) for _, seconds in rows), default=0.0)


def _hourly(engine: Engine, now: datetime) -> tuple[tuple[datetime, Decimal], ...]:
    """The fleet's metered spend per complete hour: the last week and the hour before it.

    Hours without priced rows are left out, not zero: no row means nothing was metered (a
    stopped fleet, or a host's hour rollup not yet run), which is unknown, not "free".
    """
    hour = now.replace(minute=0, second=0, microsecond=0)
    t = gpu_usage.c
    query = (
        select(t.start, func.sum(t.cost_usd))
        .where(t.resolution == HOUR, t.start >= hour - JUMP_BASELINE - timedelta(hours=1))
        .where(t.start < hour, t.cost_usd.is_not(None))
        .group_by(t.start)
        .order_by(t.start)
    )
    with engine.connect() as conn:
        return tuple((start, Decimal(str(total))) for start, total in conn.execute(query))
