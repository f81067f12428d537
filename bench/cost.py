"""Benchmark: a month's cost per million tokens for a fleet, from the rollups and from raw samples.

    python bench/cost.py [--days 30] [--gpus 64] [--models 8] [--step-seconds 60]
                         [--rounds 5] [--raw-rounds 2] [--database-url URL]

The fleet: 8 GPUs per host (64 GPUs: 8 hosts). The models' serving targets go round-robin over
the hosts and a host's GPUs are split among its targets; 8 models on 8 hosts is one
tensor-parallel-8 target per host, alternately vLLM and SGLang. Each host's daemon ticks every
``--step-seconds`` (default 60 s, not the daemon's 10 s: 30 days of 10 s ticks would be 70 M
rows, too many to generate on the 2-core development machine), at its own offset into the minute
plus up to 0.25 s of jitter. Each tick stores its collector runs (nvml, one per target) and,
with the labels production writes: per GPU gpuwatch_gpu_info, gpuwatch_gpu_utilization_ratio (a
daily wave plus noise), the cumulative gpuwatch_gpu_energy_joules_total and
gpuwatch_target_gpu_memory_bytes of its target; per target gpuwatch_target_up and
gpuwatch_engine_generation_tokens_total, with one engine restart per target (a failed scrape, no
process on its GPUs for that tick, then the counter back from 0). No ``_created`` series: resets
are found by the counter's decrease. A real host also stores about ten other rows per GPU and
tick (power, clocks, memory, ...): the rollup fill measured here rolls up only these series.
Rate card: $2.49 per GPU-hour, with one host at an instance price, one with a mid-month price
change and one owned (purchase amortised over 36 months plus energy at $0.12/kWh).

Rows are bulk-inserted (executemany of ``insert(samples)``, series rows as production writes
them) into the production schema; then each host's real ``Rollup`` job fills the minute and hour
rollups and the cost ledger, a day per run, as a daemon catching up would (settle time as
configured by the daemon; raw retention set beyond the window so that the raw samples stay for
the baseline). That fill is timed: it is the cost a daemon pays once, incrementally.

Measured: A, ``agent.cost.summarize.summarize`` over the window, per model; against the
baseline B, the same answer from raw samples only, measured in the same run: per host, load the
window's raw points and run the pure functions the rollup uses (``gpu_observations``,
``agent.cost.ledger.meter`` at hour buckets, ``agent.storage.series_math.increase``), writing
nothing. Both must agree within 1e-6 relative per model. Targets: A at least 50 x
faster than B, and A under 1 s.

Diagnostics, printed after the verdicts: what the daemon's minute job spends on its cost signals
(``agent.cost.signals.cost_samples``: summarize over 1h, 24h, 7d, 30d and the month), and A and
that job again once every minute row is deleted (the window is whole hours, so the answer must
not change): what they would cost if summarize did not read minute rows its hour rows cover.

This file is the entry point; the fleet is in bench/cost_fleet.py, its raw samples and the
rollup fill in bench/cost_fill.py, and the two answers in bench/cost_answers.py.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from decimal import Decimal
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sqlalchemy import Engine  # noqa: E402

from agent.config.settings import Config  # noqa: E402
from agent.cost.ratecard import RateCard  # noqa: E402
from agent.cost.signals import cost_samples  # noqa: E402
from agent.cost.summarize import summarize  # noqa: E402
from agent.storage.db import open_database, upgrade_database  # noqa: E402
from agent.storage.rollup import Rollup  # noqa: E402
from bench.cost_answers import (  # noqa: E402
    ModelCost,
    compare,
    drop_minute_rows,
    from_raw,
    from_rollups,
    table_rows,
)
from bench.cost_fill import fill_rollups, load  # noqa: E402
from bench.cost_fleet import T0, TAIL, Fleet, build_fleet, rate_card  # noqa: E402
from bench.timing import ms, timed  # noqa: E402

REL_TOLERANCE = Decimal("1e-6")
SPEEDUP_TARGET = 50.0
A_TARGET_S = 1.0


# -- main -----------------------------------------------------------------------------------


def seconds(values: Sequence[float]) -> str:
    return ", ".join(f"{v:.2f} s" for v in values)


def once(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def fill(engine: Engine, fleet: Fleet, card: RateCard, now: datetime, days: int) -> None:
    t = time.perf_counter()
    rows = load(engine, fleet)
    load_s = time.perf_counter() - t
    print(f"load: {rows:,} raw sample rows in {load_s:.1f} s ({rows / load_s:,.0f} rows/s)")
    fill_s, runs = fill_rollups(engine, fleet, card, now, days)
    host_days = len(fleet.hosts) * days
    print(
        f"rollup fill: {runs} Rollup.run calls in {fill_s:.1f} s "
        f"({fill_s / host_days:.2f} s per host-day; a daemon pays it incrementally)"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--gpus", type=int, default=64)
    parser.add_argument("--models", type=int, default=8)
    parser.add_argument("--step-seconds", type=float, default=60.0)
    parser.add_argument("--rounds", type=int, default=5, help="timed summarize calls")
    parser.add_argument("--raw-rounds", type=int, default=2, help="timed raw baselines")
    parser.add_argument("--database-url", help="default: SQLite in a temporary folder")
    parser.add_argument(
        "--histograms",
        action="store_true",
        help="also store latency histograms and GPU memory, as bench/report.py needs",
    )
    parser.add_argument(
        "--measure-only",
        action="store_true",
        help="the database at --database-url holds an earlier run's fleet (same arguments, run"
        " with --no-diagnostics): skip the load and the rollup fill",
    )
    parser.add_argument(
        "--no-diagnostics", action="store_true", help="keep the minute rows (for --measure-only)"
    )
    args = parser.parse_args()
    if args.measure_only and not args.database_url:
        parser.error("--measure-only needs --database-url")
    fleet = build_fleet(
        args.days, args.gpus, args.models, args.step_seconds, histograms=args.histograms
    )
    card = rate_card(fleet, args.days)
    start, end = T0, T0 + timedelta(days=args.days)
    with tempfile.TemporaryDirectory() as tmp:
        url = args.database_url or f"sqlite:///{Path(tmp) / 'bench.db'}"
        kind = "SQLite" if url.startswith("sqlite") else "PostgreSQL"
        upgrade_database(url)
        engine = open_database(url)
        print(
            f"fleet: {len(fleet.hosts)} hosts, {len(fleet.gpus)} GPUs, {len(fleet.targets)} "
            f"targets/models; {args.days} days of ticks every {args.step_seconds:g} s; {kind}"
        )

        now = end + TAIL
        if not args.measure_only:
            fill(engine, fleet, card, now, args.days)
        print("table rows: " + ", ".join(f"{k} {v:,}" for k, v in table_rows(engine).items()))

        max_gap = Rollup(engine, "", fleet.step).max_gap
        a_answer = from_rollups(engine, start, end)
        a_times = timed(lambda _: summarize(engine, start, end), args.rounds)
        b_times: list[float] = []
        b_answer: dict[str, ModelCost] = {}
        for _ in range(args.raw_rounds):
            t = time.perf_counter()
            b_answer = from_raw(engine, fleet, card, start, end, max_gap)
            b_times.append(time.perf_counter() - t)

        worst = compare(a_answer, b_answer)
        a_median, b_median = statistics.median(a_times), statistics.median(b_times)
        print(f"A: summarize from rollups ({kind})    {ms(a_times)}")
        print(f"B: from raw samples, same functions   {seconds(b_times)}")
        speedup = b_median / a_median
        agree = "OK" if worst <= REL_TOLERANCE else "MISMATCH"
        print(
            f"check: same cost per M tokens within {REL_TOLERANCE} -> {float(worst):.2e}, {agree}"
        )
        lost = b_answer["(fleet)"].observed_seconds - a_answer["(fleet)"].observed_seconds
        if lost:
            per = lost / len(fleet.gpus) / args.days
            print(
                f"  the rollup ledger metered {lost:,.0f} GPU-seconds fewer ({per:.1f} per GPU-day)"
            )
        print(
            f"target: B / A >= {SPEEDUP_TARGET:g} x -> {speedup:.1f} x, "
            f"{'OK' if speedup >= SPEEDUP_TARGET else 'UNDER TARGET'}"
        )
        print(
            f"target: A < {A_TARGET_S:g} s -> {a_median:.3f} s, "
            f"{'OK' if a_median < A_TARGET_S else 'OVER TARGET'}"
        )

        if args.no_diagnostics:
            engine.dispose()
            return 0
        # Diagnostics: the daemon's minute job, then A and that job with only hour rows, i.e.
        # what they would cost if summarize skipped the minute rows its hour rows cover.
        config = Config(host=fleet.hosts[0], database_url=url, rates=card.rates)
        job_s = once(lambda: cost_samples(engine, config, now))
        print(f"diagnostic: daemon minute job, cost signals (5 windows)  {job_s:.2f} s")
        drop_minute_rows(engine)
        hours_only = timed(lambda _: summarize(engine, start, end), args.rounds)
        same = from_rollups(engine, start, end) == a_answer
        print(
            f"diagnostic: A with minute rows deleted  {ms(hours_only)} "
            f"({b_median / statistics.median(hours_only):.0f} x B; same answer: {same})"
        )
        job_hours = once(lambda: cost_samples(engine, config, now))
        print(f"diagnostic: minute job, cost signals, minute rows deleted  {job_hours:.2f} s")
        engine.dispose()
    return 0


if __name__ == "__main__":
    sys.exit(main())
