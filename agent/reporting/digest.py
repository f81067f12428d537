"""The weekly digest as a Slack Block Kit message, from the report's values (pure, no I/O).

One message, top to bottom: a header with the week's dates in the report's timezone; the
week's spend and its change from the week before, cost per million useful tokens,
utilization, idle dollars and (when a budget is set) the month so far; cost per million tokens
per model with a sparkline of its days; p99 TTFT and end-to-end latency per model; objectives
and serving efficiency per model (agent.reporting.digest_serving) where known; the GPUs
that burnt the most money idle; the alerts that fired; and the first of the report's
recommendations, with its numbers.

Slack's Block Kit limits hold whatever the data (``block_kit_problems`` checks them): every
list is one section that shows what fits (at most ``MAX_LINES`` lines) and counts the rest in
"… and N more"; data strings (model, host, GPU and rule names, the recommendation) are
escaped for mrkdwn as in ``alerts.mrkdwn`` and cut without splitting an entity, so a model
named "<!channel>" is shown, not obeyed. Money is rounded to the cent only here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import date, timedelta
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from agent.cost.breakeven import usd
from agent.reporting.basis import spend_kind
from agent.reporting.digest_serving import TITLE as SERVING_TITLE
from agent.reporting.digest_serving import serving_lines
from agent.reporting.digest_text import (
    NAME_LIMIT,
    percent,
    percent_change,
    seconds,
    sparkline,
    tokens,
)
from agent.reporting.digest_text import fit as _fit
from agent.reporting.model import ModelRow, Period, Recommendation, Report
from agent.reporting.pod_digest import TITLE as NAMESPACES_TITLE
from agent.reporting.pod_digest import namespace_lines
from agent.reporting.tenant_digest import TITLE as TENANTS_TITLE
from agent.reporting.tenant_digest import tenant_lines
from alerts.duration import format_duration
from alerts.mrkdwn import BLOCK_LIMIT, SECTION_LIMIT, TEXT_LIMIT, cut_escaped

HEADER_LIMIT = 150  # a header block's plain_text
FIELD_LIMIT = 2000  # each of a section's fields
FIELDS_PER_SECTION = 10
MAX_LINES = 15  # per list: a digest is read at a glance; `gpuwatch report` has the rest


def digest_payload(report: Report, previous: Report | None) -> dict[str, Any]:
    """The message to post: ``text`` (the notification's fallback) and ``blocks``.

    ``previous`` is the report of the week before, for the change in spend; None shows none.
    """
    blocks = [
        _header(report.period),
        _context(report),
        _summary(report, previous),
        {"type": "divider"},
        _list_section(
            "Cost per 1M tokens by model (vs the week before)", _model_lines(report), "models"
        ),
        *(
            [
                _list_section(
                    "By team (cost · per 1M tokens · idle · budget)", team_lines(report), "teams"
                )
            ]
            if report.teams
            else []
        ),  # fmt: skip
        *(
            [_list_section(NAMESPACES_TITLE, lines, "namespaces")]
            if (lines := namespace_lines(report))
            else []
        ),
        *(
            [_list_section(TENANTS_TITLE, lines, "tenants")]
            if (lines := tenant_lines(report))
            else []
        ),
        _list_section("Latency p99 (TTFT · end to end)", _latency_lines(report), "models"),
        *(
            [_list_section("Objectives (requests within them)", lines, "models")]
            if (lines := _objective_lines(report))
            else []
        ),
        *(
            [_list_section(SERVING_TITLE, lines, "models")]
            if (lines := serving_lines(report, _by_cost(report.models)))
            else []
        ),
        *(
            [_list_section("Real work and energy by model", lines, "models")]
            if (lines := _efficiency_lines(report))
            else []
        ),
        _list_section("Top idle waste", _waste_lines(report), "GPUs"),
        _list_section("Alerts", _alert_lines(report), "rules"),
        _section(_recommendation(report.recommendations)),
    ]
    return {"text": _fallback(report, previous), "blocks": blocks}


def block_kit_problems(payload: Mapping[str, Any]) -> list[str]:
    """Where ``payload`` breaks Slack's documented limits (empty when it fits)."""
    blocks = payload.get("blocks", [])
    problems = [f"{len(blocks)} blocks (limit {BLOCK_LIMIT})"] if len(blocks) > BLOCK_LIMIT else []
    if len(payload.get("text", "")) > TEXT_LIMIT:
        problems.append(f"text over {TEXT_LIMIT} characters")
    for index, block in enumerate(blocks):
        problems += [f"block {index}: {p}" for p in _block_problems(block)]
    total = sum(len(t) for b in blocks for t in _texts(b))
    if total > TEXT_LIMIT:
        problems.append(f"{total} characters of text in blocks (limit {TEXT_LIMIT})")
    return problems


def _block_problems(block: Mapping[str, Any]) -> list[str]:
    problems = []
    if block["type"] == "header" and len(block["text"]["text"]) > HEADER_LIMIT:
        problems.append(f"header over {HEADER_LIMIT} characters")
    if block["type"] == "section":
        if "text" in block and len(block["text"]["text"]) > SECTION_LIMIT:
            problems.append(f"section text over {SECTION_LIMIT} characters")
        fields = block.get("fields", [])
        if len(fields) > FIELDS_PER_SECTION:
            problems.append(f"{len(fields)} fields (limit {FIELDS_PER_SECTION})")
        if any(len(f["text"]) > FIELD_LIMIT for f in fields):
            problems.append(f"a field over {FIELD_LIMIT} characters")
    return problems


def _texts(block: Mapping[str, Any]) -> Iterable[str]:
    if "text" in block:
        yield block["text"]["text"]
    for item in (*block.get("fields", ()), *block.get("elements", ())):
        yield item["text"]


# -- the blocks ----------------------------------------------------------------------------


def _header(period: Period) -> dict[str, Any]:
    # plain_text shows characters as they are: nothing to escape, only the length to keep.
    text = f"GPU weekly digest: {week_dates(period)}"
    return {"type": "header", "text": {"type": "plain_text", "text": text[:HEADER_LIMIT]}}


def week_dates(period: Period) -> str:
    """The period's days in its timezone: "23–29 Nov 2026", "28 Sep – 4 Oct 2026",
    "28 Dec 2026 – 3 Jan 2027" (the end is exclusive, so the last day is the one before)."""
    first, last = _first_and_last_day(period)
    if (first.year, first.month) == (last.year, last.month):
        return f"{first.day}–{last.day} {last:%b %Y}"
    if first.year == last.year:
        return f"{first.day} {first:%b} – {last.day} {last:%b %Y}"
    return f"{first.day} {first:%b %Y} – {last.day} {last:%b %Y}"


def _first_and_last_day(period: Period) -> tuple[date, date]:
    zone = ZoneInfo(period.timezone)
    first = period.start.astimezone(zone).date()
    end = period.end.astimezone(zone).date()
    return first, max(first, end - timedelta(days=1))


def _context(report: Report) -> dict[str, Any]:
    period = report.period
    scope = "all hosts"
    if report.hosts_filter:
        scope = "hosts " + ", ".join(report.hosts_filter)
    text = (
        f"Week {period.label}, Monday to Monday in {period.timezone} · {scope} · useful tokens: "
        f"{report.useful_tokens_rule} · `gpuwatch report` has the details"
    )
    return {"type": "context", "elements": [{"type": "mrkdwn", "text": _fit(text, FIELD_LIMIT)}]}


def _summary(report: Report, previous: Report | None) -> dict[str, Any]:
    totals = report.totals
    before = previous.totals.spend_usd if previous is not None else None
    change = percent_change(totals.spend_usd, before)
    spend = usd(totals.spend_usd)
    if change is not None and before is not None:
        spend += f"\n{change} vs {usd(before)} the week before"
    per_m_before = totals.previous_cost_per_million_tokens_usd
    if per_m_before is None and previous is not None:
        per_m_before = previous.totals.cost_per_million_tokens_usd
    fields = [
        f"*Spend ({spend_kind(totals)})*\n{spend}",
        f"*Per 1M useful tokens (metered)*\n"
        f"{_per_million(totals.cost_per_million_tokens_usd, per_m_before)}",
        f"*Utilization*\n{_utilization(report)}",
        f"*Idle*\n{_idle(report)}",
        f"*Useful tokens*\n{tokens(totals.useful_tokens)} ({tokens(totals.requests)} requests)",
        f"*Real work (SM activity)*\n{_real_work(report)}",
        f"*Energy*\n{_energy(report)}",
    ]
    if report.budget.monthly_usd is not None:
        fields.append(f"*Budget {report.budget.month}*\n{_budget(report)}")
    return {
        "type": "section",
        "fields": [{"type": "mrkdwn", "text": cut_escaped(f, FIELD_LIMIT)} for f in fields],
    }


def _per_million(value: Decimal | None, before: Decimal | None) -> str:
    if value is None:
        return "n/a (no tokens)"
    change = percent_change(value, before)
    return usd(value) + (f" ({change})" if change else "")


def _utilization(report: Report) -> str:
    totals = report.totals
    if totals.utilization_ratio is None:
        return "unknown (no GPU data)"  # absent data is unknown, not idle
    return (
        f"{percent(totals.utilization_ratio)} busy "
        f"({totals.busy_gpu_hours:,.1f} of {totals.gpu_hours:,.1f} GPU-hours)"
    )


def _real_work(report: Report) -> str:
    """SM activity where GPM or dcgm-exporter gave it, beside the flag's idle dollars."""
    work = report.totals.work
    if work.sm_active_gpu_hours is None or not work.sm_observed_gpu_hours:
        return "unknown (no GPM or dcgm-exporter profiling): busy is NVML's flag"
    ratio = work.sm_active_gpu_hours / work.sm_observed_gpu_hours
    idle = "" if work.sm_idle_cost_usd is None else f", {usd(work.sm_idle_cost_usd)} SM-idle"
    flag = "" if work.flag_idle_cost_usd is None else f" (flag: {usd(work.flag_idle_cost_usd)})"
    return (
        f"{percent(ratio)} SM-active over {work.sm_observed_gpu_hours:,.1f} profiled "
        f"GPU-hours{idle}{flag}"
    )


def _energy(report: Report) -> str:
    energy = report.totals.energy
    if energy.facility_kwh is None:
        return "unknown (no energy counter or power reading)"
    parts = [f"{energy.facility_kwh:,.1f} kWh"]
    if energy.joules_per_useful_token is not None:
        parts.append(f"{energy.joules_per_useful_token:,.2f} J per useful token")
    if energy.co2_grams_per_million_tokens is not None:
        parts.append(f"{energy.co2_grams_per_million_tokens:,.0f} g CO2 per 1M tokens")
    return " · ".join(parts)


def _objective_lines(report: Report) -> list[str]:
    """Per model with an objective: its attainment (or bounds), met or not, missed dollars."""
    lines = []
    for row in _by_cost(report.models):
        slo = row.slo
        if slo is None:
            continue
        if slo.attainment is not None:
            got = percent(slo.attainment)
        elif slo.lower is not None and slo.upper is not None:
            got = f"{percent(slo.lower)}-{percent(slo.upper)}"
        else:
            got = "unknown (no requests measured)"
        verdict = {True: "met", False: "missed", None: "cannot tell"}[slo.met]
        basis = ", from spans" if slo.basis == "spans" else ""
        missed = "" if slo.missed_cost_usd is None else f" · {usd(slo.missed_cost_usd)} on missed"
        good = slo.good_token_cost_per_million_usd
        within = "" if good is None else f" · {usd(good)} per 1M tokens within"
        lines.append(
            f"*{_fit(row.model, NAME_LIMIT)}*: {got} within {slo.thresholds} "
            f"(objective {percent(slo.objective)}: {verdict}{basis}){within}{missed}"
        )
    return lines


def _efficiency_lines(report: Report) -> list[str]:
    """Per model with an estimate or energy: MFU (and its gap in dollars), J per token."""
    lines = []
    for row in _by_cost(report.models):
        e, energy = row.efficiency, row.energy
        if e.mfu_ratio is None and energy.joules_per_useful_token is None:
            continue
        parts = [f"MFU {percent(e.mfu_ratio)}" if e.mfu_ratio is not None else "MFU n/a"]
        if e.mfu_gap_usd is not None and e.mfu_gap_usd > 0:
            parts.append(f"{usd(e.mfu_gap_usd)} below the MFU target")
        if energy.joules_per_useful_token is not None:
            parts.append(f"{energy.joules_per_useful_token:,.2f} J/token")
        if energy.co2_grams_per_million_tokens is not None:
            parts.append(f"{energy.co2_grams_per_million_tokens:,.0f} g CO2/1M")
        lines.append(f"*{_fit(row.model, NAME_LIMIT)}*: " + " · ".join(parts))
    return lines


def _idle(report: Report) -> str:
    idle, spend = report.totals.idle_cost_usd, report.totals.spend_usd
    share = f" ({percent(float(idle / spend))} of spend)" if spend > 0 else ""
    return f"{usd(idle)} paid for GPUs not serving{share}"


def _budget(report: Report) -> str:
    budget = report.budget
    assert budget.monthly_usd is not None
    used = f" ({percent(budget.used_ratio)})" if budget.used_ratio is not None else ""
    return (
        f"{usd(budget.spent_usd)} of {usd(budget.monthly_usd)}{used}, "
        f"month-end forecast {usd(budget.forecast_usd)}"
        + (f" {budget.forecast_basis}" if budget.forecast_basis else "")
    )


def _model_lines(report: Report) -> list[str]:
    days = _days(report.period)
    series: dict[str, dict[date, Decimal | None]] = {}
    for point in report.model_days:
        series.setdefault(point.model, {})[point.day] = point.cost_per_million_tokens_usd
    lines = []
    for row in _by_cost(report.models):
        spark = sparkline([series.get(row.model, {}).get(day) for day in days])
        per_m = _per_million(
            row.cost_per_million_tokens_usd, row.previous_cost_per_million_tokens_usd
        )
        cost = "cost unknown" if row.cost_unknown_reason else usd(row.cost_usd)
        lines.append(
            f"`{spark}` *{_fit(row.model, NAME_LIMIT)}*: {per_m} · {cost}{_abandoned(row)}"
        )
    return lines


def team_lines(report: Report, only: str | None = None) -> list[str]:
    """Per team (``only``: that one), its cost, cost per million useful tokens, idle dollars
    and, where it has a ``[[budget.teams]]`` budget, the month so far and the forecast."""
    budgets = {b.team: b for b in report.team_budgets}
    lines = []
    for row in report.teams:
        if only is not None and row.name != only:
            continue
        unknown = row.cost_unknown_reason is not None
        per_m = row.cost_per_million_tokens_usd
        line = (
            f"*{_fit(row.name, NAME_LIMIT)}*: {'cost unknown' if unknown else usd(row.cost_usd)}"
            f" · {'n/a' if per_m is None else usd(per_m)} per 1M"
            f" · {'idle unknown' if unknown else usd(row.idle_cost_usd) + ' idle'}"
        )
        budget = budgets.get(row.name)
        if budget is not None and budget.monthly_usd is not None:
            used = f" ({percent(budget.used_ratio)})" if budget.used_ratio is not None else ""
            line += (
                f" · {budget.month}: {usd(budget.spent_usd)} of {usd(budget.monthly_usd)}{used},"
                f" forecast {usd(budget.forecast_usd)}"
            )
        lines.append(line)
    return lines


def _abandoned(row: ModelRow) -> str:
    """What clients abandoned mid-stream, where the engine counts it and there was some."""
    if not row.abandoned_tokens:
        # Engines that count aborted requests but not their tokens (Dynamo, Triton, LMDeploy).
        aborted = row.abandoned_requests
        return f" · abandoned {aborted:,.0f} requests" if aborted else ""
    cost = "" if row.abandoned_cost_usd is None else f", {usd(row.abandoned_cost_usd)}"
    return f" · abandoned {row.abandoned_tokens:,.0f} tokens{cost}"


def _latency_lines(report: Report) -> list[str]:
    return [
        f"*{_fit(row.model, NAME_LIMIT)}*: {seconds(row.ttft.p99_seconds)} · "
        f"{seconds(row.e2e.p99_seconds)}"
        for row in _by_cost(report.models)
        if row.ttft.p99_seconds is not None or row.e2e.p99_seconds is not None
    ]


def _by_cost(models: Sequence[ModelRow]) -> list[ModelRow]:
    # The costliest first: those are the ones a week's decisions are about.
    return sorted(models, key=lambda row: (-row.cost_usd, row.model))


def _waste_lines(report: Report) -> list[str]:
    lines = []
    for gpu in report.top_waste:
        name = f" {_fit(gpu.gpu_name, NAME_LIMIT)}" if gpu.gpu_name else ""
        busy = percent(gpu.utilization_ratio) if gpu.utilization_ratio is not None else "unknown"
        lines.append(
            f"*{_fit(gpu.host, NAME_LIMIT)}* GPU {_fit(gpu.gpu_index, NAME_LIMIT)}{name}: "
            f"{usd(gpu.idle_cost_usd)} idle of {usd(gpu.cost_usd)}, {busy} busy"
        )
    return lines


def _alert_lines(report: Report) -> list[str]:
    rows = sorted(report.alerts, key=lambda a: (-a.firing_seconds, a.rule))
    return [
        f"*{_fit(a.rule, NAME_LIMIT)}*: fired {a.count}×, "
        f"{format_duration(round(a.firing_seconds / 60) * 60)} firing in all"
        for a in rows
    ]


def _recommendation(recommendations: Sequence[Recommendation]) -> str:
    if not recommendations:
        return "*Recommendation*\nNothing to change this week."
    first = recommendations[0]
    saving = ""
    if first.saving_usd_per_month is not None:
        saving = f"\nSaves about {usd(first.saving_usd_per_month)} a month."
    title = _fit(first.title, 200)
    room = SECTION_LIMIT - len("*Recommendation: *\n") - len(title) - len(saving)
    return f"*Recommendation: {title}*\n{_fit(first.detail, room)}{saving}"


def _list_section(title: str, lines: Sequence[str], noun: str) -> dict[str, Any]:
    """``title`` and as many ``lines`` as fit one section; the rest counted on a last line."""
    if not lines:
        return _section(f"*{title}*\nNone this week.")
    head = f"*{title}*"
    # Room for the count line at its longest, so adding it can never overflow.
    room = SECTION_LIMIT - len(head) - len(_more(len(lines), noun)) - 1
    shown: list[str] = []
    used = 0
    for line in lines[:MAX_LINES]:
        if used + 1 + len(line) > room:
            break
        shown.append(line)
        used += 1 + len(line)
    rest = len(lines) - len(shown)
    return _section("\n".join([head, *shown, *([_more(rest, noun)] if rest else [])]))


def _more(count: int, noun: str) -> str:
    return f"… and {count} more {noun}"


def _section(text: str) -> dict[str, Any]:
    return {"type": "section", "text": {"type": "mrkdwn", "text": cut_escaped(text, SECTION_LIMIT)}}


def _fallback(report: Report, previous: Report | None) -> str:
    """The notification text (and what clients without blocks show): the figures, no names."""
    totals = report.totals
    before = previous.totals.spend_usd if previous is not None else None
    change = percent_change(totals.spend_usd, before)
    per_m = totals.cost_per_million_tokens_usd
    utilization = totals.utilization_ratio
    parts = [
        f"spend {usd(totals.spend_usd)}" + (f" ({change} vs the week before)" if change else ""),
        f"{usd(per_m) if per_m is not None else 'n/a'} per 1M useful tokens",
        f"utilization {percent(utilization) if utilization is not None else 'unknown'}",
        f"{usd(totals.idle_cost_usd)} idle",
    ]
    return f"GPU weekly digest {week_dates(report.period)}: " + ", ".join(parts)


# -- helpers -------------------------------------------------------------------------------


def _days(period: Period) -> list[date]:
    first, last = _first_and_last_day(period)
    return [first + timedelta(days=n) for n in range((last - first).days + 1)]
