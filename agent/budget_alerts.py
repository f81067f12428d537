"""The fleet's budget alerts: thresholds, forecast, burn-rate jumps and cost per million tokens.

Budget rules are fleet-level: :func:`gather_budget` reads the whole database (every host of a
shared PostgreSQL, or the one box of an SQLite store), once a minute, into :class:`BudgetInputs`;
the conditions over it are pure, like :mod:`agent.alert_conditions`. None of them returns None
("unknown"): their figures come from the store in one read, so there is no blind collector to
tell apart; when the read itself fails, the caller skips the round and leaves these rules out
of the evaluated set, so their alerts stay as they were. Money stays Decimal until it becomes
a Condition's float value.

Months are calendar months in the configured time zone (``timezone``): a budget resets when
the users' month does, not at midnight UTC. A threshold alert carries its month as a label, so
each level fires once per month and the next month's crossing is a new alert (anchors 4.4:
once per threshold per period, reset on the period boundary).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from decimal import Decimal

from sqlalchemy import Engine, func, select

from agent.alert_conditions import run_rules
from agent.billing import billed
from agent.config import Config
from agent.cost import Line, summarize
from alerts.model import AlertKey, Condition
from alerts.rules import DEFAULT_RULES, RuleSpec, format_duration
from migrations.schema import gpu_usage

HOUR = 3600
BURN_WINDOW = timedelta(hours=24)  # the pace a forecast extrapolates: a day evens out day/night
JUMP_BASELINE = timedelta(days=7)  # a week of hours: weekday and weekend both in the median
# The hour rollup of the last hour lands a few minutes into the next; until it does, the hour
# before is judged again, so a jump alert does not resolve and re-pend at every hour's start.
JUMP_FRESH = timedelta(hours=2)
FLEET = "fleet"
CENT = Decimal("0.01")


@dataclass(frozen=True, slots=True)
class BudgetInputs:
    """One evaluation's view of the fleet's spend. Times are UTC-aware; money is USD."""

    now: datetime
    budget_usd: Decimal | None  # budget.monthly_usd; None (or 0): no budget configured
    metered_usd: Decimal  # month to date: rate card x metered uptime, every host
    billed_usd: Decimal | None = None  # month to date as providers billed it; None: no records
    zone: tzinfo = UTC  # the configured time zone: whose calendar month, whose dates
    burn_usd: Decimal = Decimal(0)  # metered spend over the burn window
    burn_seconds: float = 0.0  # the metered stretch it covers: the history a forecast stands on
    hourly_usd: tuple[tuple[datetime, Decimal], ...] = ()  # complete hours, oldest first
    models: tuple[Line, ...] = ()  # per model over ``model_window_seconds``
    model_window_seconds: float = 86400.0

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


BudgetRuleFn = Callable[[RuleSpec, BudgetInputs], list[Condition] | None]


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
    month_start, _ = month_bounds(now, config.zone)
    useful = config.cost.useful_tokens
    metered = summarize(engine, month_start, end, useful=useful).fleet.cost_usd
    span = _metered_span(engine, max(month_start, end - BURN_WINDOW), end)
    burn = Decimal(0)
    if span is not None:
        burn = summarize(engine, span[0], end, useful=useful).fleet.cost_usd
    window = _seconds(rules, "CostPerMtokHigh", "window")
    models = summarize(engine, end - timedelta(seconds=window), end, useful=useful).models
    return BudgetInputs(
        now=now,
        budget_usd=config.budget.monthly_usd,
        metered_usd=metered,
        billed_usd=_billed_usd(engine, month_start, now),
        zone=config.zone,
        burn_usd=burn,
        burn_seconds=0.0 if span is None else (span[1] - span[0]).total_seconds(),
        hourly_usd=_hourly(engine, now),
        models=models,
        model_window_seconds=window,
    )


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


def _metered_span(
    engine: Engine, start: datetime, end: datetime
) -> tuple[datetime, datetime] | None:
    """The stretch of [start, end) the fleet's priced metering covers: from its first row
    (later than ``start`` for a new install: a forecast must not spread a few hours' spend over
    a day nobody watched) to the end of its last (the rollup runs minutes behind the clock).
    None: nothing priced was metered in the window."""
    t = gpu_usage.c
    query = (
        select(t.resolution, func.min(t.start), func.max(t.start))
        .where(t.start >= start, t.start < end, t.cost_usd.is_not(None))
        .group_by(t.resolution)
    )
    with engine.connect() as conn:
        rows = conn.execute(query).all()
    if not rows:
        return None
    # Minute rows place the ends to the minute; hour rows alone (a short minute retention) to
    # the hour, which can only shorten the history the forecast waits for.
    first = min(low for _, low, _ in rows)
    last = max(high + timedelta(seconds=resolution) for resolution, _, high in rows)
    return max(start, first), min(end, last)


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


# -- the rules (pure) -------------------------------------------------------------------------


def budget_conditions(
    rules: Mapping[str, RuleSpec], inputs: BudgetInputs
) -> tuple[list[Condition], frozenset[str]]:
    """The budget conditions true now, and the names of the rules that were evaluated."""
    return run_rules(BUDGET_RULES, rules, inputs)


def _threshold(spec: RuleSpec, name: str) -> float | None:
    value = spec.thresholds.get(name)
    return None if value is None else float(value)


def _usd(amount: Decimal) -> str:
    return f"${amount:,.2f}"


def _level(fraction: float) -> str:
    # "50%", "80%", "100%"; a user's 0.575 stays "57.5%" instead of colliding with 0.58.
    return f"{round(fraction * 100, 4):g}%"


def budget_threshold(spec: RuleSpec, inputs: BudgetInputs) -> list[Condition]:
    """One alert per level reached this month; the levels at or above the critical one page
    as critical (the lifecycle takes a condition's "severity" annotation)."""
    budget = inputs.budget
    # No budget: evaluated and clear, not "unknown": a budget removed from the config must
    # resolve its alerts, where None would keep them firing forever.
    if budget is None:
        return []
    # Judged in cents, as the message shows it: "$750.00 of $1,500.00" is 50 %, whatever
    # sub-cent remainder the database's sums carry (SQLite adds NUMERIC as floats).
    spent = inputs.spent_usd.quantize(CENT)
    ratio = spent / budget
    critical = _threshold(spec, "critical_fraction")
    names = ("first_fraction", "second_fraction", "critical_fraction")
    levels = {_level(f): f for f in (_threshold(spec, n) for n in names) if f is not None}
    out = []
    for level, fraction in sorted(levels.items(), key=lambda item: item[1]):
        if ratio < Decimal(repr(fraction)):
            continue
        labels = {"scope": FLEET, "month": inputs.month, "level": level}
        annotations = {"spent_usd": f"{spent:.2f}", "budget_usd": f"{budget:.2f}",
                       "source": inputs.source}  # fmt: skip
        if critical is not None and fraction >= critical:
            annotations["severity"] = "critical"
        annotations["summary"] = (
            f"{spec.render_summary(labels, float(ratio))}: {_usd(spent)} of the"
            f" {_usd(budget)} budget for {inputs.month} ({ratio:.1%}, {inputs.source} spend)"
        )
        out.append(Condition(AlertKey.of(spec.name, labels), float(ratio), annotations))
    return out


def projected_over_budget(spec: RuleSpec, inputs: BudgetInputs) -> list[Condition]:
    """Month-to-date spend plus the last day's metered pace until the month ends, over budget.

    Quiet with less history than ``min_history_seconds`` (the first hours of a month or of a
    new install): one busy hour extrapolated over a month is noise, not a forecast.
    """
    budget = inputs.budget
    min_history = _threshold(spec, "min_history_seconds") or 0.0
    if budget is None or inputs.burn_seconds <= 0 or inputs.burn_seconds < min_history:
        return []
    per_second = inputs.pace_usd_per_second
    assert per_second is not None  # burn_seconds > 0
    spent, forecast = inputs.spent_usd, inputs.forecast_usd
    if forecast <= budget:
        return []
    labels = {"scope": FLEET, "month": inputs.month}
    ratio = forecast / budget
    if spent >= budget:
        when = f"the budget is already spent ({_usd(spent)}, {inputs.source})"
    else:
        runs_out = inputs.now + timedelta(seconds=float((budget - spent) / per_second))
        when = f"at this pace the budget runs out on {runs_out.astimezone(inputs.zone):%Y-%m-%d}"
    annotations = {
        "forecast_usd": f"{forecast:.2f}",
        "budget_usd": f"{budget:.2f}",
        "usd_per_hour": f"{per_second * HOUR:.2f}",
        "summary": f"{spec.render_summary(labels, float(ratio))}: {_usd(forecast)} forecast for"
        f" {inputs.month} against {_usd(budget)} at {_usd(per_second * HOUR)}/h; {when}",
    }
    return [Condition(AlertKey.of(spec.name, labels), float(ratio), annotations)]


def burn_rate_jump(spec: RuleSpec, inputs: BudgetInputs) -> list[Condition]:
    """The last complete hour cost more than ``factor`` x the median hour of the week before.

    The median, not the mean: the spike being judged, or last night's idle hours, must not
    move the baseline much. Without ``min_history_hours`` hours to compare with, quiet.
    """
    factor = _threshold(spec, "factor")
    min_hours = _threshold(spec, "min_history_hours") or 0.0
    if factor is None or not inputs.hourly_usd:
        return []
    last_start, last_usd = inputs.hourly_usd[-1]
    hour = inputs.now.replace(minute=0, second=0, microsecond=0)
    if last_start < hour - JUMP_FRESH:
        return []  # nothing metered lately: whatever jumped is over
    baseline = _baseline(inputs.hourly_usd[:-1], last_start)
    if not baseline or len(baseline) < min_hours:
        return []
    median = statistics.median(baseline)
    if median <= 0:
        return []  # no usual level to be a multiple of
    ratio = last_usd / median
    if ratio <= Decimal(repr(factor)):
        return []
    labels = {"scope": FLEET}
    local = last_start.astimezone(inputs.zone)
    annotations = {
        "hour_usd": f"{last_usd:.2f}",
        "baseline_usd_per_hour": f"{median:.2f}",
        "summary": f"{spec.render_summary(labels, float(ratio))}: {_usd(last_usd)} spent in the"
        f" hour from {local:%Y-%m-%d %H:%M} against a median {_usd(median)} an hour over the"
        f" {len(baseline)} hours before",
    }
    return [Condition(AlertKey.of(spec.name, labels), float(ratio), annotations)]


def _baseline(hours: Sequence[tuple[datetime, Decimal]], last: datetime) -> list[Decimal]:
    return [usd for start, usd in hours if last - JUMP_BASELINE <= start < last]


def cost_per_mtok_high(spec: RuleSpec, inputs: BudgetInputs) -> list[Condition]:
    """Per model, cost per million useful tokens above the ceiling or the competing API price.

    Models with fewer than ``min_tokens`` useful tokens in the window are skipped: a model
    that served a handful of requests on a reserved GPU costs thousands per million tokens,
    which is idle cost (GpuIdle's business), not a price to compare with an API.
    """
    ceiling = _threshold(spec, "ceiling_usd")
    api = _threshold(spec, "api_usd_per_million")
    min_tokens = _threshold(spec, "min_tokens") or 0.0
    if ceiling is None and api is None:
        return []
    out = []
    for line in inputs.models:
        per = line.usd_per_million_tokens
        if per is None or line.useful_tokens < min_tokens:
            continue
        reasons = []
        if api is not None and per > Decimal(repr(api)):
            reasons.append(
                f"an API would be cheaper: {_usd(per)} vs {_usd(Decimal(repr(api)))}"
                " per million tokens"
            )
        if ceiling is not None and per > Decimal(repr(ceiling)):
            reasons.append(f"above the {_usd(Decimal(repr(ceiling)))} ceiling")
        if not reasons:
            continue
        labels = {"scope": FLEET, "model": line.name}
        annotations = {
            "cost_usd": f"{line.cost_usd:.2f}",
            "useful_tokens": f"{line.useful_tokens:.0f}",
            "summary": f"{spec.render_summary(labels, float(per))} per million useful tokens"
            f" over the last {format_duration(inputs.model_window_seconds)};"
            f" {'; '.join(reasons)}",
        }
        out.append(Condition(AlertKey.of(spec.name, labels), float(per), annotations))
    return out


BUDGET_RULES: Mapping[str, BudgetRuleFn] = {
    "BudgetThreshold": budget_threshold,
    "ProjectedOverBudget": projected_over_budget,
    "BurnRateJump": burn_rate_jump,
    "CostPerMtokHigh": cost_per_mtok_high,
}
