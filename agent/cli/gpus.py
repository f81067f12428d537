"""`gpuwatch gpus`: what each GPU cost and did over the last window (default the last hour).

    gpuwatch gpus [--window DURATION] [--json] [--config PATH]

The figures are the report's GPUs section (docs/report-schema.md, "GPUs") for the window
ending at this minute, built by the report's own code, so `gpus`, `report` and the MCP server's
`gpus` tool cannot disagree: metered cost and idle cost, observed and busy hours, utilization,
SM activity where profiling covered it, VRAM peak and total, energy and CO2.
"""

from __future__ import annotations

import argparse
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from agent.cli.columns import aligned
from agent.reporting import json_text
from alerts.duration import DurationError, parse_duration
from foundation.errors import GpuwatchError

if TYPE_CHECKING:
    from agent.config.settings import Config
    from agent.reporting.model import Period

DEFAULT_WINDOW = "1h"


class GpusArgumentError(GpuwatchError):
    """An argument of `gpuwatch gpus` that cannot be used; the message names it."""


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    gpus = sub.add_parser(
        "gpus",
        help="what each GPU cost and did over the last hour (or --window)",
        description="Each GPU's metered cost, idle cost, utilization, SM activity, VRAM and "
        "energy over the window ending at this minute: the report's GPUs section.",
    )
    gpus.add_argument("--config", metavar="PATH", help="TOML file (default as for `run`)")
    gpus.add_argument(
        "--window", default=DEFAULT_WINDOW, help='how far back, e.g. "15m", "1d" (default 1h)'
    )
    gpus.add_argument("--json", action="store_true", help="one JSON object")


def run(args: argparse.Namespace, config: Config, now: datetime) -> int:
    document = gpus_document(config, args.window, now)
    if args.json:
        print(json_text.dumps(document, indent=2))
        return 0
    print("\n".join(_table(document)))
    return 0


def gpus_document(config: Config, window: str, now: datetime) -> dict[str, Any]:
    """`gpuwatch gpus --json`'s object (the MCP server's `gpus` tool answers the same):
    ``period``, ``data`` (up to when it is complete), ``gpus`` and their ``mig_instances``,
    as in the report's JSON."""
    # Imported here: SQLAlchemy and the report's queries, which `gpuwatch --help` never needs.
    from agent.reporting.build import build_report
    from agent.reporting.render.json_format import to_document
    from agent.storage.db import open_database

    period = window_period(window, now, config.timezone)
    engine = open_database(config.database_url)
    try:
        report = build_report(engine, config, period, now=now, daily=False)
    finally:
        engine.dispose()
    whole = to_document(report)
    return {key: whole[key] for key in ("period", "data", "gpus", "mig_instances")}


def window_period(window: str, now: datetime, zone: str) -> Period:
    """The last ``window`` up to ``now`` floored to the minute: the edge up to which the minute
    rollups are exact, as a report "to date" ends (agent.reporting.period)."""
    from agent.reporting.model import Period
    from agent.reporting.period import zone_of

    try:
        seconds = parse_duration(window)
    except DurationError as exc:
        raise GpusArgumentError(f"--window: {exc}") from None
    if seconds < 60:
        raise GpusArgumentError(f"--window: at least a minute (1m), got {window!r}")
    zone_of(zone)  # an unknown zone is named before any query
    end = now.replace(second=0, microsecond=0)
    return Period(end - timedelta(seconds=seconds), end, f"last {window}", zone)


def _table(document: dict[str, Any]) -> list[str]:
    period = document["period"]
    head = f"gpuwatch gpus, {period['label']} ({period['start']} to {period['end']})"
    if not document["gpus"]:
        return [head, "", "No GPU observed in this window."]
    rows = [["HOST", "GPU", "NAME", "COST USD", "IDLE USD", "UTIL", "SM ACTIVE", "VRAM PEAK GiB"]]
    for g in document["gpus"]:
        rows.append([
            g["host"], g["gpu_index"], g["gpu_name"] or "unknown",
            g["cost_usd"] or "n/a", g["idle_cost_usd"] or "n/a",
            _ratio(g["utilization_ratio"]), _ratio(g["sm_active_ratio"]),
            _gib(g["vram_peak_bytes"], g["vram_total_bytes"]),
        ])  # fmt: skip
        rows.extend(_instances(document, g))
    # Host and GPU names come from NVML and the configuration: columns.aligned makes each cell
    # printable before measuring it.
    return [head, "", *aligned(rows, right=range(3, len(rows[0])))]


def _instances(document: dict[str, Any], g: dict[str, Any]) -> list[list[str]]:
    """A MIG GPU's instances under it: each one's cost, idle cost and busy share (UTIL)."""
    return [
        ["", "", f"  {m['mig_instance']}", m["cost_usd"] or "n/a", m["idle_cost_usd"] or "n/a",
         _ratio(m["busy_ratio"]), "", ""]
        for m in document.get("mig_instances", [])
        if (m["host"], m["gpu_uuid"]) == (g["host"], g["gpu_uuid"])
    ]  # fmt: skip


def _ratio(value: float | None) -> str:
    return "n/a" if value is None else f"{value * 100:.0f} %"


def _gib(peak: float | None, total: float | None) -> str:
    if peak is None:
        return "n/a"
    of = "" if total is None else f" / {total / 2**30:,.0f}"
    return f"{peak / 2**30:,.1f}{of}"
