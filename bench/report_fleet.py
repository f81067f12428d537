"""Benchmark: `gpuwatch report --month` for a 1,024-GPU fleet (128 hosts x 8 GPUs) on PostgreSQL,
next to the cost engine's own month answer measured in the same run, and where its time goes.

    scripts/with-postgres sh -c '.venv/bin/python bench/report_fleet.py \\
        --postgres-url "$GPUWATCH_TEST_DB_URL" [--hosts 8,32,128] [--minute-days D] \\
        [--template /tmp/gpuwatch-report-fleet.db] [--layout time|host] [--no-profile]'

One host (8 GPUs, 2 serving targets of one model each, TTFT and end-to-end histograms, GPU
memory; bench/cost.py's fleet machinery, 32 days of ticks 60 s apart around November 2026) is
filled into SQLite and rolled up by its real rollup job (``metered_rollup``), so the template
holds exactly what today's rollup code writes (bench/report_fleet_template.py). The file is
cached at ``--template`` and reused while the schema revision, the code that writes it and the
fill's parameters match; any change refills it (minutes), so after the rollup tables change
the same command measures the new layout. Then, for each N of ``--hosts``, a fresh PostgreSQL
database (``gpuwatch_report_fleet_<N>`` next to ``--postgres-url``'s) gets N renamed copies of
that host (bench/report_fleet_clone.py: host, GPU UUIDs, series ids, models in groups so the
fleet serves ``--fleet-models`` models; every table but the raw samples and collector runs,
discovered from ``migrations.schema.metadata``), a month of alert history and daily billed
records per host, VACUUM ANALYZE; then a check that the first and the last host's month
(``summarize``) equal the template host's.

Measured per N: the baseline, ``agent.cost.summarize.summarize`` over the month (the one
cost query), then ``build_report`` for the month: its first call on a fresh engine right after
the load (cold Python caches; PostgreSQL's buffers hold what the load and VACUUM left) and the
median of ``--rounds``; then each rendering. Target (issue 11): under 3 s at 1,024 GPUs. At the
largest N, one call is profiled (bench/report_fleet_profile.py). A diagnostic repeats the
report and the baseline with PostgreSQL's JIT off for the session (``--no-jit-diagnostic``).

Size and time: 32 days of today's rollups are about 1.8 M rows per host, 0.3 GB of PostgreSQL
per host; 128 hosts with every minute row are about 38 GB and take most of an hour to clone on
a 2-core machine, with ``--minute-days 2`` about 3 GB and 5 minutes.

``--minute-days D`` keeps only the last D days of minute rows (and the month's edge hours): the
report over a complete month reads hour rows only, so this shows whether the volume of minute
rows around them changes its time.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from sqlalchemy import Engine, create_engine, make_url, text  # noqa: E402

from agent.config.rates import Rate  # noqa: E402
from agent.config.settings import BudgetConfig, Config  # noqa: E402
from agent.cost.summarize import summarize  # noqa: E402
from agent.reporting.build import build_report  # noqa: E402
from agent.reporting.model import Report  # noqa: E402
from agent.reporting.period import month_period  # noqa: E402
from agent.reporting.render.dispatch import render  # noqa: E402
from agent.storage.db import open_database  # noqa: E402
from bench.pg import drop_database, fresh_database  # noqa: E402
from bench.report_fleet_clone import CloneSpec, Template, check, clone, row_counts  # noqa: E402
from bench.report_fleet_profile import profile  # noqa: E402
from bench.report_fleet_template import TemplateSpec, ensure_template  # noqa: E402
from bench.timing import ms, timed  # noqa: E402

TARGET_S = 3.0
MONTH = "2026-11"
GPUS_PER_HOST = 8
USD_PER_GPU_HOUR = Decimal("2.49")  # bench/cost_fleet.py's default rate


def settings(engine: Engine) -> str:
    with engine.connect() as conn:
        version = conn.execute(text("SHOW server_version")).scalar_one()
        shared = conn.execute(text("SHOW shared_buffers")).scalar_one()
        work = conn.execute(text("SHOW work_mem")).scalar_one()
        size = conn.execute(text("SELECT pg_size_pretty(pg_database_size(current_database()))"))
        return (
            f"PostgreSQL {version}, shared_buffers {shared}, work_mem {work}, "
            f"database {size.scalar_one()}"
        )


def measure(engine: Engine, config: Config, spec: CloneSpec, rounds: int) -> float:
    period = month_period(MONTH, spec.now, config.timezone)
    label = f"{spec.hosts * GPUS_PER_HOST:>5} GPUs"

    def report() -> Report:
        return build_report(engine, config, period, now=spec.now)

    t = time.perf_counter()
    built = report()
    cold = time.perf_counter() - t
    base = timed(lambda _: summarize(engine, period.start, period.end), rounds)
    times = timed(lambda _: report(), rounds)
    median = statistics.median(times)
    print(f"{label}: baseline, summarize over the month    {ms(base)}")
    print(f"{label}: build_report --month {MONTH}, first    {cold * 1e3:9.1f} ms (fresh engine)")
    print(f"{label}: build_report --month {MONTH}           {ms(times)}")
    for fmt in ("table", "json", "csv", "markdown", "html"):
        rendered = timed(_renderer(built, fmt), rounds)
        print(f"{label}:   render {fmt:<9}                      {ms(rendered)}")
    print(
        f"{label}: report = {median / statistics.median(base):.1f} x the baseline; target "
        f"{TARGET_S:g} s -> {median:.3f} s (first call {cold:.3f} s), "
        f"{'OK' if median < TARGET_S else 'OVER TARGET'}; {len(built.gpus)} GPU rows, "
        f"{len(built.models)} models, {len(built.alerts)} alerts"
    )
    return median


def cli(url: str, config: Config, spec: CloneSpec, rounds: int) -> float:
    """What a user waits for: ``gpuwatch report --month`` as a process (start, imports,
    connect, build, render the default table), ``rounds`` times; the median in seconds."""
    rate = config.rates[0].usd_per_hour
    assert config.budget.monthly_usd is not None
    with tempfile.TemporaryDirectory() as folder:
        toml = Path(folder) / "gpuwatch.toml"
        toml.write_text(
            f'host = "{config.host}"\ndatabase_url = "{url}"\ntimezone = "{config.timezone}"\n'
            f'[[rates]]\ngpu = "*"\nusd_per_hour = {rate}\n'
            f"[budget]\nmonthly_usd = {config.budget.monthly_usd}\n"
        )
        command = [str(Path(sys.executable).parent / "gpuwatch"), "report", "--month", MONTH,
                   "--config", str(toml)]  # fmt: skip
        times = []
        for _ in range(rounds):
            t = time.perf_counter()
            subprocess.run(command, check=True, stdout=subprocess.DEVNULL, cwd=folder)
            times.append(time.perf_counter() - t)
    label = f"{spec.hosts * GPUS_PER_HOST:>5} GPUs"
    print(f"{label}: gpuwatch report --month {MONTH} (a process, table) {ms(times)}")
    return statistics.median(times)


def jit_diagnostic(url: str, config: Config, spec: CloneSpec, rounds: int) -> None:
    """The report again with PostgreSQL's JIT off for the session: the report's aggregates
    cost enough for the planner to compile them, and the CASE expressions (day of a row,
    hour watermark per host) make that compilation slow (EXPLAIN's "JIT: Timing")."""
    engine = create_engine(make_url(url).update_query_dict({"options": "-c jit=off"}))
    period = month_period(MONTH, spec.now, config.timezone)
    times = timed(lambda _: build_report(engine, config, period, now=spec.now), rounds)
    base = timed(lambda _: summarize(engine, period.start, period.end), rounds)
    label = f"{spec.hosts * GPUS_PER_HOST:>5} GPUs"
    print(f"{label}: diagnostic, jit=off: summarize        {ms(base)}")
    print(f"{label}: diagnostic, jit=off: build_report     {ms(times)}")
    engine.dispose()


def _renderer(report: Report, fmt: str) -> Callable[[int], object]:
    return lambda _: render(report, fmt)


def config_for(spec: CloneSpec, url: str) -> Config:
    month_usd = USD_PER_GPU_HOUR * GPUS_PER_HOST * 24 * 30 * spec.hosts
    return Config(
        host=spec.host_name(0),
        database_url=url,
        rates=(Rate(usd_per_hour=USD_PER_GPU_HOUR),),
        budget=BudgetConfig(monthly_usd=month_usd.quantize(Decimal(1000))),
    )


def run_one(
    args: argparse.Namespace,
    hosts: int,
    tpl: TemplateSpec,
    cache: dict[str, bytes],
    profiled: bool,
) -> float:
    fleet = tpl.fleet()
    period = month_period(MONTH, tpl.now, "UTC")
    spec = CloneSpec(
        hosts, args.fleet_models, args.minute_days, (period.start, period.end), tpl.now
    )
    name = f"gpuwatch_report_fleet_{hosts}"
    url = fresh_database(args.postgres_url, name)
    engine = open_database(url)
    source = create_engine(f"sqlite:///{args.template}")
    t = time.perf_counter()
    template = Template(fleet.hosts[0], tuple(t.model for t in fleet.targets))
    phases = clone(engine, source, spec, template, args.layout, cache)
    print(
        f"clone: {hosts} hosts ({hosts * GPUS_PER_HOST} GPUs) in {time.perf_counter() - t:.1f} s ("
        + ", ".join(f"{k} {v:.1f} s" for k, v in phases.items())
        + ")"
    )
    print("clone: rows " + ", ".join(f"{k} {v:,}" for k, v in row_counts(engine).items() if v))
    print(f"clone: {settings(engine)}")
    print(f"check: {check(source, engine, spec, template)}")
    source.dispose()
    engine.dispose()
    engine = open_database(url)  # a fresh pool: the first report call is the CLI's first
    config = config_for(spec, url)
    median = measure(engine, config, spec, args.rounds)
    median = max(median, cli(url, config, spec, args.rounds))
    if not args.no_jit_diagnostic:
        jit_diagnostic(url, config, spec, args.rounds)
    if profiled:
        period = month_period(MONTH, spec.now, config.timezone)
        profile(engine, lambda: build_report(engine, config, period, now=spec.now))
    engine.dispose()
    if not args.keep:
        drop_database(args.postgres_url, name)
    return median


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--postgres-url", required=True, help="a superuser URL (creates databases)")
    parser.add_argument("--hosts", default="128", help="comma-separated fleet sizes, 8 GPUs each")
    parser.add_argument("--template", type=Path, default=Path("/tmp/gpuwatch-report-fleet.db"))
    parser.add_argument("--days", type=int, default=32, help="of ticks in the template")
    parser.add_argument("--models-per-host", type=int, default=2, help="serving targets per host")
    parser.add_argument("--step-seconds", type=float, default=60.0, help="between raw ticks")
    parser.add_argument("--fleet-models", type=int, default=16, help="models across the fleet")
    parser.add_argument(
        "--minute-days", type=float, help="keep only the last D days of minute rows"
    )
    parser.add_argument(
        "--layout",
        choices=("time", "host"),
        default="time",
        help="heap order of the rollups: as written over time, or per host",
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-profile", action="store_true")
    parser.add_argument("--no-jit-diagnostic", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the databases")
    args = parser.parse_args()
    sizes = [int(n) for n in args.hosts.split(",")]
    tpl = ensure_template(args.template, args.days, args.models_per_host, args.step_seconds)
    failed = False
    cache: dict[str, bytes] = {}  # the template's tables as COPY text, loaded once
    for n, hosts in enumerate(sizes):
        profiled = not args.no_profile and n == len(sizes) - 1
        failed |= run_one(args, hosts, tpl, cache, profiled) >= TARGET_S
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
