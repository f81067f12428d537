"""The fleet's budget alerts: thresholds, forecast, burn-rate jumps and cost per million tokens.

Budget rules are fleet-level: :func:`agent.cost.budget.gather_budget` reads the whole database
(every host of a shared PostgreSQL, or the one box of an SQLite store), once a minute, into
:class:`~agent.cost.budget.BudgetInputs`; the conditions over it are pure, like
:mod:`agent.alerting.conditions`. None of them returns None ("unknown"): their figures come from the
store in one read, so there is no blind collector to tell apart; when the read itself fails, the
caller skips the round and leaves these rules out of the evaluated set, so their alerts stay as they
were. Money stays Decimal until it becomes a Condition's float value.

Months are calendar months in the configured time zone (``timezone``): a budget resets when
the users' month does, not at midnight UTC. A threshold alert carries its month as a label, so
each level fires once per month and the next month's crossing is a new alert (anchors 4.4:
once per threshold per period, reset on the period boundary).

Teams: the threshold and forecast rules also judge each ``[[budget.teams]]`` team's figures
(``BudgetInputs.teams``, :mod:`agent.cost.team_budget`) in the same evaluation, under labels
``scope="team"`` and ``team``, so a team's alert fires and resolves for that team alone.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from decimal import Decimal

from agent.alerting.conditions import run_rules
from agent.cost.budget import HOUR, JUMP_BASELINE, JUMP_FRESH, BudgetInputs
from alerts.duration import format_duration
from alerts.model import AlertKey, Condition
from alerts.rules import RuleSpec

FLEET = "fleet"
CENT = Decimal("0.01")

BudgetRuleFn = Callable[[RuleSpec, BudgetInputs], list[Condition] | None]


# -- the rules (pure) -------------------------------------------------------------------------


def _scope(inputs: BudgetInputs) -> dict[str, str]:
    """The fleet's alerts are scope "fleet"; a team's (``[[budget.teams]]``) carry its name."""
    if inputs.tenant:  # a gateway tenant's ([[budget.tenants]])
        return {"scope": "tenant", "tenant": inputs.tenant}
    return {"scope": "team", "team": inputs.team} if inputs.team else {"scope": FLEET}


def _with_teams(rule: BudgetRuleFn) -> BudgetRuleFn:
    """``rule`` over the fleet's figures, then over each budgeted team's: one evaluation, so a
    team's alert resolves like the fleet's when its condition no longer holds."""

    def run(spec: RuleSpec, inputs: BudgetInputs) -> list[Condition] | None:
        found = rule(spec, inputs)
        if found is None:
            return None
        scoped = (*inputs.teams, *inputs.tenants)
        return found + [c for one in scoped for c in rule(spec, one) or []]

    return run


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
        labels = {**_scope(inputs), "month": inputs.month, "level": level}
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
    labels = {**_scope(inputs), "month": inputs.month}
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
    "BudgetThreshold": _with_teams(budget_threshold),
    "ProjectedOverBudget": _with_teams(projected_over_budget),
    "BurnRateJump": burn_rate_jump,
    "CostPerMtokHigh": cost_per_mtok_high,
}
