"""Shared by the weekly digest's tests: hand-built week reports (the week of Monday
23 November 2026 in Madrid, due Monday 30 November 08:00 UTC) and the webhook they post to."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any
from zoneinfo import ZoneInfo

from agent.reporting.model import (
    AlertRow,
    Budget,
    GpuRow,
    Latency,
    ModelRow,
    Period,
    Recommendation,
    Report,
    Totals,
)
from agent.reporting.period import last_week_period

ZONE = "Europe/Madrid"


def week_period(monday: date, zone: str = ZONE) -> Period:
    """The Monday-to-Monday week starting on ``monday`` (local)."""
    return last_week_period(
        datetime.combine(monday + timedelta(days=7), time(12), ZoneInfo(zone)), zone
    )


HOOK = "/services/T000/B000/XXXXDIGESTSECRETXXXX"
SECRET = "XXXXDIGESTSECRETXXXX"
# The week of Monday 23 November 2026 (CET, UTC+1); its digest is due Monday 30 Nov 09:00
# local, 08:00 UTC.
WEEK = week_period(date(2026, 11, 23), ZONE)
DUE = datetime(2026, 11, 30, 8, 0, tzinfo=UTC)


def totals(spend: str = "1234.565", **changes: Any) -> Totals:
    base = Totals(
        spend_usd=Decimal(spend),
        metered_usd=Decimal(spend),
        billed_usd=None,
        useful_tokens=2.5e9,
        output_tokens=2.5e9,
        total_tokens=3e9,
        cost_per_million_tokens_usd=Decimal("0.4938"),
        previous_cost_per_million_tokens_usd=Decimal("0.52"),
        gpu_hours=336.0,
        busy_gpu_hours=201.6,
        idle_loaded_gpu_hours=100.0,
        unallocated_gpu_hours=34.4,
        utilization_ratio=0.6,
        idle_cost_usd=Decimal("493.83"),
        requests=1_250_000,
    )
    return replace(base, **changes)


def model(name: str, cost: str = "600", per_m: str | None = "0.48", **changes: Any) -> ModelRow:
    row = ModelRow(
        model=name,
        cost_usd=Decimal(cost),
        useful_tokens=1.25e9,
        output_tokens=1.25e9,
        total_tokens=1.5e9,
        requests=600_000,
        cost_per_million_tokens_usd=Decimal(per_m) if per_m else None,
        previous_cost_per_million_tokens_usd=Decimal("0.50"),
        ttft=Latency(p99_seconds=0.85, count=600_000),
        e2e=Latency(p99_seconds=12.3, count=600_000),
    )
    return replace(row, **changes)


def gpu(host: str, index: int, idle: str, name: str | None = "NVIDIA H100 80GB HBM3") -> GpuRow:
    return GpuRow(
        host=host,
        gpu_uuid=f"GPU-{host}-{index}",
        gpu_index=str(index),
        gpu_name=name,
        cost_usd=Decimal("457.00"),
        idle_cost_usd=Decimal(idle),
        observed_hours=168.0,
        busy_hours=10.0,
        utilization_ratio=0.06,
        vram_peak_bytes=None,
        vram_total_bytes=None,
    )


def make_report(period: Period = WEEK, **changes: Any) -> Report:
    monday = period.start.astimezone(ZoneInfo(period.timezone)).date()
    base = Report(
        generated_at=period.end,
        period=period,
        previous_period=week_period(monday - timedelta(days=7), period.timezone),
        hosts_filter=(),
        models_filter=(),
        useful_tokens_rule="output",
        totals=totals(),
        spend_sources=(),
        models=(model("llama-8b"), model("qwen-32b", cost="400", per_m="0.55")),
        hosts=(),
        gpus=(),
        top_waste=(gpu("box-1", 0, "380.10"), gpu("box-2", 1, "113.73", name=None)),
        alerts=(AlertRow("GpuIdle", 3, 4 * 3600 + 12 * 60), AlertRow("QueueGrowing", 1, 600)),
        queue_incidents=(),
        budget=Budget(
            monthly_usd=Decimal("5000"),
            month="2026-11",
            spent_usd=Decimal("4100"),
            used_ratio=0.82,
            forecast_usd=Decimal("4400"),
            forecast_ratio=0.88,
        ),
        recommendations=(
            Recommendation(
                "serverless",
                "Move qwen-32b to serverless",
                "At 4,200 requests a day and 1.9 GPU-seconds each, serverless costs $21.40 a day "
                "against the pod's $65.28.",
                Decimal("1315.80"),
            ),
            Recommendation("pod", "Keep llama-8b on its pod", "Busy 91% of the time."),
        ),
        daily_spend=(),
        model_days=(),
        gpu_days=(),
    )
    return replace(base, **changes)


def utc(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0
) -> datetime:
    return datetime(year, month, day, hour, minute, second, tzinfo=UTC)
