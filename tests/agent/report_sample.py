"""One hand-built month of a small fleet, a ``Report`` as ``build_report`` would return it:
November 2026 in Madrid, 2 hosts, 6 GPUs and 3 models (one with a hostile name, one with a
long one), for the report rendering tests."""

from __future__ import annotations

import random
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from agent.reporting.model import (
    AlertRow,
    Budget,
    DailySpend,
    DataExtent,
    GpuDay,
    GpuRow,
    HostRow,
    Latency,
    ModelDay,
    ModelRow,
    Period,
    QueueIncident,
    Recommendation,
    Report,
    SpendSource,
    Totals,
)

EVIL = 'evil<b>&"model'
LONG = "meta-llama/Llama-3.1-70B-Instruct-FP8-dynamic"
MODELS = ("Qwen/Qwen2.5-7B-Instruct", LONG, EVIL)
DAYS = 30
HOURS = DAYS * 24


# -- the fixture: November 2026 in Madrid, 2 hosts, 6 GPUs, 3 models ------------------------


def _gpus() -> list[tuple[str, str, str, Decimal]]:
    """(host, uuid, index, USD per hour)."""
    rng = random.Random(7)
    out = []
    for host, count, rate in (("gpu-box-1", 4, Decimal("2.72")), ("gpu-box-2", 2, Decimal("1.19"))):
        for index in range(count):
            uuid = "GPU-" + "-".join(
                "".join(rng.choice("0123456789abcdef") for _ in range(n)) for n in (8, 4, 4, 4, 12)
            )
            out.append((host, uuid, str(index), rate))
    return out


def _gpu_rows() -> list[GpuRow]:
    rows = []
    for n, (host, uuid, index, rate) in enumerate(_gpus()):
        observed = HOURS - 1.5 * n  # a box restarted now and then
        busy = observed * (0.91 - 0.14 * n)
        cost = rate * Decimal(repr(observed))
        idle = rate * Decimal(repr(observed - busy))
        rows.append(
            GpuRow(host, uuid, index, "NVIDIA H100 80GB HBM3" if rate > 2 else "NVIDIA L4",
                   cost, idle, observed, busy, busy / observed,
                   (0.71 + n / 100) * (80 if rate > 2 else 24) * 2**30,
                   (80 if rate > 2 else 24) * 2**30)
        )  # fmt: skip
    return rows


def make_report() -> Report:
    zone = "Europe/Madrid"
    start = datetime(2026, 10, 31, 23, 0, tzinfo=UTC)  # 1 November 00:00 CET
    period = Period(start, start + timedelta(days=DAYS), "2026-11", zone)
    previous = Period(datetime(2026, 9, 30, 22, 0, tzinfo=UTC), start, "2026-10", zone)
    gpus = _gpu_rows()
    metered = sum((g.cost_usd for g in gpus), Decimal(0))
    idle = sum((g.idle_cost_usd for g in gpus), Decimal(0))
    models = [
        ModelRow(MODELS[0], Decimal("3917.283333"), 2_150_345_678.0, 2_150_345_678.0,
                 6_300_000_123.0, 1_234_567.0, Decimal("1.821702815"), Decimal("1.652"),
                 Latency(0.0421, 0.1876, 0.3125, 1_234_567.0),
                 Latency(2.4, 7.9, 12.4449, 1_234_567.0)),
        ModelRow(LONG, Decimal("6011.115"), 1_020_001_000.0, 1_020_001_000.0, 3.1e9, 401_000.0,
                 Decimal("5.893245"), Decimal("6.5"), Latency(0.11, 0.5, 0.955, 401_000.0),
                 Latency(5.5, 17.25, 30.0005, 401_000.0)),
        ModelRow(EVIL, Decimal("655.125"), 12_000_000.0, 12_000_000.0, 50_000_000.0, 999.0,
                 Decimal("54.59375"), None, Latency(), Latency()),
    ]  # fmt: skip
    useful = sum(m.useful_tokens for m in models)
    busy_hours = sum(g.busy_hours for g in gpus)
    gpu_hours = sum(g.observed_hours for g in gpus)
    totals = Totals(
        spend_usd=metered + Decimal("312.404"), metered_usd=metered,
        billed_usd=metered + Decimal("312.404"), useful_tokens=useful, output_tokens=useful,
        total_tokens=9.45e9, cost_per_million_tokens_usd=metered / Decimal(repr(useful / 1e6)),
        previous_cost_per_million_tokens_usd=Decimal("3.1"), gpu_hours=gpu_hours,
        busy_gpu_hours=busy_hours, idle_loaded_gpu_hours=(gpu_hours - busy_hours) * 0.8,
        unallocated_gpu_hours=(gpu_hours - busy_hours) * 0.2,
        utilization_ratio=busy_hours / gpu_hours, idle_cost_usd=idle, requests=1_636_566.0,
    )  # fmt: skip
    first = date(2026, 11, 1)
    days = [first + timedelta(days=i) for i in range(DAYS)]
    rng = random.Random(11)
    return Report(
        generated_at=datetime(2026, 12, 1, 7, 5, 12, tzinfo=UTC),
        period=period,
        previous_period=previous,
        hosts_filter=(),
        models_filter=(),
        useful_tokens_rule="output",
        totals=totals,
        spend_sources=(
            SpendSource("metered", "metered", metered),
            SpendSource("runpod", "billed", metered + Decimal("312.404")),
        ),
        models=tuple(models),
        hosts=(
            HostRow(
                "gpu-box-1",
                sum((g.cost_usd for g in gpus[:4]), Decimal(0)),
                3_170_346_678.0,
                Decimal("2.9012"),
                Decimal("3.0"),
                sum(g.observed_hours for g in gpus[:4]),
                0.7,
            ),
            HostRow(
                "gpu-box-2",
                sum((g.cost_usd for g in gpus[4:]), Decimal(0)),
                12_000_000.0,
                Decimal("142.6049"),
                Decimal("120.5"),
                sum(g.observed_hours for g in gpus[4:]),
                None,
            ),
        ),  # fmt: skip
        gpus=tuple(gpus),
        top_waste=tuple(sorted(gpus, key=lambda g: g.idle_cost_usd, reverse=True)[:5]),
        alerts=(
            AlertRow("GpuIdle", 14, 51_234.6),
            AlertRow("QueueGrowing", 3, 4_980.0),
            AlertRow("BudgetForecastOver", 1, 1_209_600.0),
        ),
        queue_incidents=(
            QueueIncident(
                "gpu-box-1",
                "llama-70b",
                LONG,
                datetime(2026, 11, 12, 17, 3, tzinfo=UTC),
                datetime(2026, 11, 12, 17, 48, tzinfo=UTC),
                "waiting requests grew from 3 to 118 in 10m; KV cache 97% full",
            ),
            QueueIncident(
                "gpu-box-2",
                "tiny<script>",
                EVIL,
                datetime(2026, 11, 30, 22, 40, tzinfo=UTC),
                None,
                f"queue of {EVIL} still growing",
            ),
        ),  # fmt: skip
        budget=Budget(
            Decimal("15000"),
            "2026-11",
            metered + Decimal("312.404"),
            0.93,
            Decimal("14205.5"),
            0.947,
        ),  # fmt: skip
        recommendations=(
            Recommendation(
                "serverless",
                f"Move {EVIL} to serverless",
                "At a 0.7% duty cycle, serverless at $0.00035/s costs $41.20/month "
                "against $856.80 for the pod.",
                Decimal("815.6"),
            ),
            Recommendation(
                "consolidate",
                "Consolidate gpu-box-2's two L4s onto one",
                "Both ran under 30% busy all month; one L4 fits the peak.",
                None,
            ),
        ),  # fmt: skip
        daily_spend=tuple(
            DailySpend(
                d,
                Decimal(rng.randint(25_000, 38_000)) / 100,
                Decimal(rng.randint(2_000, 9_000)) / 100 + Decimal("0.004"),
            )
            for d in days
        ),  # fmt: skip
        model_days=tuple(
            ModelDay(
                m,
                d,
                None
                if (m == EVIL and i % 7 == 3)
                else Decimal(rng.randint(100, 900)) / 100 * (k + 1),
            )
            for k, m in enumerate(MODELS)
            for i, d in enumerate(days)
        ),  # fmt: skip
        gpu_days=tuple(
            GpuDay(g.host, g.gpu_uuid, g.gpu_index, d, None if (n == 5 and i < 2) else rng.random())
            for n, g in enumerate(gpus)
            for i, d in enumerate(days)
        ),  # fmt: skip
        # The month's data from its second day to the report's generation, a week after.
        data=DataExtent(period.start + timedelta(days=1), period.end - timedelta(minutes=3)),
    )
