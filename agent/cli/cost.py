"""`gpuwatch cost` and `gpuwatch import focus`: the cost engine's answers on the command line."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from agent.cli import cost_pods, cost_teams, cost_tenants, focus_import
from agent.cli.columns import aligned
from agent.cost.breakeven import Workload
from agent.reporting import json_text
from alerts.duration import DurationError, parse_duration
from foundation.printable import printable

if TYPE_CHECKING:
    from agent.config.settings import Config
    from agent.cost.billing import Reconciliation
    from agent.cost.measured import Measured
    from agent.cost.pods_read import PodCosts
    from agent.cost.summarize import Line, Summary
    from agent.reporting.model import Energy, Work
    from agent.reporting.queries import Gauges


def add_parsers(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cost = sub.add_parser("cost", help="cost per million useful tokens, idle cost, reconciliation")
    cost.add_argument("--config", metavar="PATH", help="TOML file (default as for `run`)")
    cost.add_argument("--window", default="30d", help='how far back, e.g. "1h", "7d" (default 30d)')
    cost.add_argument("--json", action="store_true", help="one JSON object")
    imp = sub.add_parser("import", help="import billing exports")
    kinds = imp.add_subparsers(dest="import_kind", required=True, metavar="KIND")
    focus = kinds.add_parser("focus", help="FOCUS cost and usage exports (CSV or CSV.gz)")
    focus_import.add_arguments(focus)


def run_cost(args: argparse.Namespace, config: Config, now: datetime) -> int:
    if args.json:
        print(json_text.dumps(cost_document(config, args.window, now), indent=2))
        return 0
    from agent.cli import cost_work

    found = read_window(config, args.window, now)
    summary, split = found.summary, config.cost.shared_gpu_split
    lines = _table(summary, found.recon, args.window, config.zone, split)
    lines += cost_work.lines(found.work, found.energy)
    lines += cost_teams.lines(summary, config.labels, config.cost.useful_tokens, found.pods)
    lines += cost_tenants.lines(config, summary)
    lines += cost_pods.lines(found.pods, config.labels)
    # Model and host names come from scraped labels: no control character reaches the tty.
    print(printable("\n".join(lines), keep="\n"))
    return 0


@dataclass(frozen=True, slots=True)
class CostWindow:
    """What the window cost and produced, as read once for the table or the JSON."""

    summary: Summary
    recon: Reconciliation
    work: Work
    energy: Energy
    by_model: dict[str, Energy]
    measured: Gauges
    pods: PodCosts  # Kubernetes pods and namespaces (agent.cost.pods_read); empty off it


def read_window(config: Config, window: str, now: datetime) -> CostWindow:
    """The last ``window`` ("30d") before ``now``; DurationError naming --window when bad."""
    # Imported here: SQLAlchemy and the report's queries, which `gpuwatch --help` never needs.
    from agent.cli import cost_work
    from agent.cost.billing import reconcile
    from agent.cost.pods_read import read_pods
    from agent.cost.provisional import reading
    from agent.cost.summarize import summarize_on
    from agent.storage.db import open_database

    try:
        span = timedelta(seconds=parse_duration(window))
    except DurationError as exc:
        raise DurationError(f"--window: {exc}") from None
    start, end = now - span, now
    engine = open_database(config.database_url)
    try:
        # Everything stored, the minutes not yet rolled up included (agent.cost.provisional).
        with reading(engine, config, (), (start, end)) as (conn, coverage):
            summary = summarize_on(conn, *coverage.window, useful=config.cost.useful_tokens)
            work, energy, by_model, measured = cost_work.read(conn, *coverage.window, config)
            pods = read_pods(conn, *coverage.window, summary.tokens, config.cost.useful_tokens)
        recon = reconcile(engine, summary.fleet.cost_usd, start, end)
    finally:
        engine.dispose()
    return CostWindow(summary, recon, work, energy, by_model, measured, pods)


def cost_document(config: Config, window: str, now: datetime) -> dict[str, Any]:
    """`gpuwatch cost --json`'s object (the MCP server's `cost` tool answers the same)."""
    from agent.cli import cost_work

    found = read_window(config, window, now)
    summary, rule = found.summary, config.cost.useful_tokens
    document = _as_json(summary, found.recon, config.zone, config.cost.shared_gpu_split)
    document |= cost_work.as_json(found.work, found.energy)
    for model in document["models"]:
        if model["name"] in found.by_model:
            model.update(cost_work.model_json(found.by_model[model["name"]]))
        model["slo"] = cost_work.slo_json(
            model["name"], model["cost_usd"], found.measured, config.slos
        )
    document |= cost_tenants.as_json(config, summary)  # [[gateways]]: who pays (tenants)
    document |= cost_pods.as_json(found.pods, config.labels)  # Kubernetes: pods, namespaces
    return document | cost_teams.as_json(summary, config.labels, rule, found.pods)


def _minute(ts: datetime) -> datetime:
    return ts.replace(second=0, microsecond=0)


def _per_million(line: Line) -> str:
    value = line.usd_per_million_tokens
    return "n/a" if value is None else f"${value:,.4f}"


def _table(
    s: Summary, r: Reconciliation, window: str, zone: tzinfo = UTC, split_rule: str = "memory"
) -> list[str]:
    hours = s.gpu_seconds / 3600
    start, end = s.start.astimezone(zone), s.end.astimezone(zone)
    rows = [["", "cost USD", "useful tokens", "USD / M useful", "total tokens", "abandoned"]]
    unknown = []
    for label, group in (("fleet", [s.fleet]), ("model", s.models), ("host", s.hosts)):
        for line in group:
            name = line.name if label == "fleet" else f"{label} {line.name}"
            cost = "n/a" if line.cost_unknown else f"{line.cost_usd:,.2f}"
            useful, total = (
                (f"{line.useful_tokens:,.0f}", f"{line.total_tokens:,.0f}")
                if line.tokens_counted
                else ("not counted", "not counted")  # no token source (Ollama): unknown, not 0
            )
            rows.append([name, cost, useful, _per_million(line), total, _abandoned(line)])
            if line.cost_unknown:
                unknown.append(f"  {name}: {line.cost_unknown}")
    lines = [
        f"gpuwatch cost, last {window} ({start:%Y-%m-%d %H:%M} to {end:%Y-%m-%d %H:%M} {zone})",
        "",
        # Names whole, columns as wide as their cells: nothing cut, every row in line.
        *aligned(rows, right=range(1, len(rows[0]))),
    ]
    lines += ["", "useful tokens counted from: " + _bases(s.models)]
    lines += ["cost unknown (no price or no GPU time):", *unknown] if unknown else []
    busy = s.busy_seconds / 3600
    lines += [
        "",
        f"GPU time   {hours:,.1f} h: busy {busy:,.1f} h, idle but loaded "
        f"{s.idle_loaded_seconds / 3600:,.1f} h, unallocated {s.unallocated_seconds / 3600:,.1f} h",
        f"idle cost  ${s.idle_cost_usd:,.2f}",
        *_shared(s, split_rule),
        _billed(r),
    ]
    return lines


def _shared(s: Summary, rule: str) -> list[str]:
    """How the GPUs several targets used were split (agent.cost.split_basis), if any was."""
    from agent.cost.split_basis import shared_note

    bases = {(g.host, g.gpu_uuid): g.shared for g in s.gpus if g.shared is not None}
    names = {(g.host, g.gpu_uuid): f"{g.host} GPU {g.gpu_index}" for g in s.gpus}
    note = shared_note(bases, names, rule)
    return [note] if note else []


def _billed(r: Reconciliation) -> str:
    """Billed against metered; with no billing records, says so (not "$0.00 billed, -100 %")."""
    if not r.by_source:
        return (
            f"billed     no billing records for this window (metered ${r.metered_usd:,.2f}: "
            "rate card x GPU time)"
        )
    return (
        f"billed     ${r.billed_usd:,.2f} by providers against metered ${r.metered_usd:,.2f}: "
        f"difference ${r.difference_usd:,.2f}" + _ratio(r.difference_ratio)
    )


def _abandoned(line: Line) -> str:
    """Output tokens generated for requests that never completed; "n/a" where the engine does
    not count completed requests apart (abandoned work is then unknown, not zero)."""
    value = line.tokens.abandoned
    return "n/a" if value is None else f"{value:,.0f}"


def _bases(models: tuple[Line, ...]) -> str:
    """Which rule counted each model's useful tokens (agent.cost.summarize.Tokens.basis)."""
    named = [f"{m.name} {m.tokens.basis}" for m in models if m.tokens.basis]
    return ", ".join(named) if named else "no tokens stored"


def _ratio(value: Decimal | None) -> str:
    return "" if value is None else f" ({value * 100:+.1f} %)"


def _as_json(
    s: Summary, r: Reconciliation, zone: tzinfo = UTC, split_rule: str = "memory"
) -> dict[str, Any]:
    def line(x: Line) -> dict[str, Any]:
        per, abandoned_usd = x.usd_per_million_tokens, x.abandoned_cost_usd
        return {
            "name": x.name,
            "cost_usd": None if x.cost_unknown else str(round(x.cost_usd, 6)),
            "cost_unknown_reason": x.cost_unknown,
            # No token source at all (Ollama exports no token counters): unknown, never 0.
            "useful_tokens": x.useful_tokens if x.tokens_counted else None,
            "useful_tokens_source": x.tokens.basis or None,
            "output_tokens": x.output_tokens if x.tokens_counted else None,
            "total_tokens": x.total_tokens if x.tokens_counted else None,
            "generated_tokens": x.tokens.generated,
            "abandoned_tokens": x.tokens.abandoned,
            "abandoned_requests": x.tokens.aborted,  # finished with reason "abort"
            "abandoned_cost_usd": None if abandoned_usd is None else str(round(abandoned_usd, 6)),
            "requests_completed": x.tokens.requests,
            "cost_per_million_tokens_usd": None if per is None else str(round(per, 6)),
        }

    return {
        "period": {"start": s.start.astimezone(zone).isoformat(),
                   "end": s.end.astimezone(zone).isoformat()},
        "fleet": line(s.fleet),
        "models": [line(m) for m in s.models],
        "hosts": [line(h) for h in s.hosts],
        "gpu_hours": s.gpu_seconds / 3600,
        "busy_gpu_hours": s.busy_seconds / 3600,
        "idle_loaded_gpu_hours": s.idle_loaded_seconds / 3600,
        "unallocated_gpu_hours": s.unallocated_seconds / 3600,
        "idle_cost_usd": str(round(s.idle_cost_usd, 6)),
        "shared_gpus": [
            {"host": g.host, "gpu_uuid": g.gpu_uuid, "gpu_index": g.gpu_index,
             "split_basis": "equal" if split_rule == "equal" else g.shared.basis,
             "sm_utilization_ticks": g.shared.sm_ticks, "memory_ticks": g.shared.memory_ticks}
            for g in s.gpus if g.shared is not None
        ],
        # No billing records: billed is unknown (null), not $0 (README, "gpuwatch cost").
        "reconciliation": {"metered_usd": str(round(r.metered_usd, 6)),
                           "billed_usd": str(round(r.billed_usd, 6)) if r.by_source else None,
                           "difference_usd": (str(round(r.difference_usd, 6))
                                              if r.by_source else None),
                           "billed_by_source": {k: str(v) for k, v in r.by_source.items()}},
    }  # fmt: skip


def measured_workload(config: Config, window: str, now: datetime | None = None) -> Workload:
    """What `gpuwatch breakeven` uses without figures: requests, GPU time and tokens per day
    of observed time (agent.cost.measured)."""
    return measure_window(config, window, now or datetime.now(UTC)).workload


def measure_window(config: Config, window: str, now: datetime) -> Measured:
    from agent.cost.measured import measure

    return measure(config, parse_duration(window), now, window)
