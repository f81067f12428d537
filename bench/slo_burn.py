"""Benchmark: what does the SloBurnRate rule cost a tick, with many targets and a month of
rollups, and does it grow with the history?

    python bench/slo_burn.py [--targets 1,4,16] [--models 2] [--history-days 4,30]
                             [--history-targets 4] [--rounds 30]

SloBurnRate (agent/alerting/slo_burn.py) reads, per model with an objective, each workbook
window (5m, 30m, 1h, 6h, 3d) of its latency histograms: the rollup rows up to the host's minute
watermark (minute rows at the edges, hour and day rows inside) at most once a minute (its
SloCache), and the raw samples after the watermark on every tick. So a tick costs the raw tail
("between minutes"), and the first tick after the minute rollup moved the watermark also
re-reads the rollups ("minute boundary"). Both are timed here, next to the baseline measured in
the same run on the same database (every scenario's calls in turn, round after round, so a swing
of the machine's load falls on all alike): the inputs of every other built-in rule
(agent.alerting.inputs.gather with SloBurnRate left out), LatencyP99Spike's 5-minute raw
windows and hourly baselines among them.

A host with ``--targets`` vLLM-like targets, target i serving model i mod ``--models`` (so each
model has targets / models of them), each with the four latency histograms the rollups keep
(TTFT, inter-token, end-to-end, queue time; 20 bounds each), and an objective per model with two
thresholds (TTFT <= 0.5 s and e2e <= 1 s, for 99 %: both histograms read). The last 12 minutes
are raw ticks every 10 s, stored by the real Store and rolled up by the real rollup job (which
sets the minute watermark and makes the minute rows); before them, ``--history-days`` of
rollup rows are written as that job leaves them (a minute row per histogram and minute for up
to 62 days, the minute retention; hour and day rows for the whole history).

Target: SloBurnRate's cost per tick at 16 targets, a minute's ticks averaged (five between
minutes and one at a minute boundary at the default 10 s interval), under 10 % of the 10 s tick
(1 s); and flat in the history once it is longer than the longest window (3 d): 30 days within
1.5 x of 4 days at the same targets.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import Engine, delete, insert, select  # noqa: E402

from agent.alerting.inputs import gather  # noqa: E402
from agent.alerting.slo_burn import SloCache, read_burns  # noqa: E402
from agent.collect.runner import CollectorRun, Round  # noqa: E402
from agent.config.settings import Config, load_config  # noqa: E402
from agent.storage.db import open_database, upgrade_database  # noqa: E402
from agent.storage.rolled_up import HISTOGRAM_ROLLUPS  # noqa: E402
from agent.storage.rollup import SETTLE_SECONDS, Rollup  # noqa: E402
from agent.storage.store import Store  # noqa: E402
from agent.storage.windows import ReadOnce  # noqa: E402
from alerts.rules import DEFAULT_RULES  # noqa: E402
from bench.common import drop_database, fresh_database, ms, postgres_or_skip, verdict  # noqa: E402
from collectors.base import Sample  # noqa: E402
from migrations.schema import histogram_rollups, rollup_state, series  # noqa: E402

HOST = "box"
STEP = 10.0  # the daemon's default tick
NOW = datetime(2026, 11, 30, 12, 0, 5, tzinfo=UTC)  # just after a minute's start
RAW = timedelta(minutes=12)
MINUTE_RETENTION = timedelta(days=62)
BOUNDS = ("0.01", "0.025", "0.05", "0.075", "0.1", "0.15", "0.2", "0.3", "0.5", "0.75", "1.0",
          "1.5", "2.0", "2.5", "5.0", "10.0", "20.0", "40.0", "80.0", "+Inf")  # fmt: skip
# Where a tick's 10 requests fall: the cumulative share at each bound (97 % within 1 s).
SHARES = (0.0, 0.01, 0.05, 0.1, 0.2, 0.35, 0.5, 0.7, 0.85, 0.92, 0.97, 0.985, 0.99, 0.995,
          0.998, 1.0, 1.0, 1.0, 1.0, 1.0)  # fmt: skip
PER_TICK = 10
TICKS_PER_MINUTE = 6  # at the default 10 s interval: five ticks between minutes, one at one
TICK_BUDGET = 0.10 * STEP  # 10 % of the tick
FLAT = 1.5


# -- the host's data ---------------------------------------------------------------------------


def targets_of(count: int, models: int) -> list[tuple[str, str]]:
    return [(f"t{i:02d}", f"model-{i % models}") for i in range(count)]


def raw_round(pairs: Sequence[tuple[str, str]], at: datetime, n: int) -> Round:
    """Tick ``n``: every target's four histograms after n ticks of PER_TICK requests."""
    runs = []
    for target, model in pairs:
        labels = {"host": HOST, "target": target, "engine": "vllm", "model": model}
        up = {"host": HOST, "target": target}
        samples = [Sample(metric="gpuwatch_target_up", value=1.0, labels=up, ts=at)]
        for metric in sorted(HISTOGRAM_ROLLUPS):
            count = float(n * PER_TICK)
            samples += [
                Sample(metric=f"{metric}_bucket", value=round(count * share),
                       labels={**labels, "le": le}, ts=at)
                for le, share in zip(BOUNDS, SHARES, strict=True)
            ]  # fmt: skip
            samples += [
                Sample(metric=f"{metric}_count", value=count, labels=labels, ts=at),
                Sample(metric=f"{metric}_sum", value=count * 0.4, labels=labels, ts=at),
            ]
        runs.append(CollectorRun(f"engine:{target}", at, True, 0.01, tuple(samples), None, target))
    return Round(ts=at, runs=tuple(runs), derived=())


def fill(engine: Engine, pairs: Sequence[tuple[str, str]], days: float) -> tuple[Round, int]:
    """The raw tail and its real rollup, then the history's rollup rows; (last round, rows)."""
    store = Store(engine, HOST)
    ticks = int(RAW.total_seconds() // STEP)
    last = None
    for n in range(ticks + 1):
        last = raw_round(pairs, NOW - RAW + timedelta(seconds=n * STEP), n + 1)
        store.write_round(last)
    job = Rollup(engine, HOST, STEP, settle=timedelta(seconds=SETTLE_SECONDS))
    while job.run(NOW).minutes:
        pass
    assert last is not None
    return last, history(engine, days)


def history(engine: Engine, days: float) -> int:
    """Rollup rows of the ``days`` before the raw tail, as the rollup job leaves them: each
    histogram's minute rows (within the minute retention), hour rows and day rows, with the
    increases of its first real minute (x 60 an hour, x 1,440 a day)."""
    h = histogram_rollups.c
    with engine.connect() as conn:
        first = conn.execute(
            select(h.series_id, h.layout_id, h.increases, h.start)
            .join(series, series.c.id == h.series_id)
            .where(series.c.host == HOST, h.resolution == 60)
            .order_by(h.series_id, h.start)
        ).all()
        have = {(r.series_id, r.resolution, r.start) for r in conn.execute(
            select(h.series_id, h.resolution, h.start))}  # fmt: skip
    seen: dict[int, tuple[int, list[float], datetime]] = {}
    for sid, layout, increases, start in first:
        if sid not in seen:
            seen[sid] = (layout, [float(x) for x in increases.split()], start)
    begin = NOW - timedelta(days=days)
    written = 0
    for resolution, since in ((60, max(begin, NOW - MINUTE_RETENTION)), (3600, begin),
                              (86400, begin)):  # fmt: skip
        rows = []
        for sid, (layout, per_minute, first_minute) in seen.items():
            scale = resolution // 60
            text = " ".join(f"{v * scale:g}" for v in per_minute)
            at = _ceil(since, resolution)
            stop = first_minute if resolution == 60 else _floor(first_minute, resolution)
            while at < stop:
                if (sid, resolution, at) not in have:
                    rows.append({"series_id": sid, "resolution": resolution, "start": at,
                                 "layout_id": layout, "increases": text})  # fmt: skip
                at += timedelta(seconds=resolution)
        for i in range(0, len(rows), 20_000):
            with engine.begin() as conn:
                conn.execute(insert(histogram_rollups), rows[i : i + 20_000])
        written += len(rows)
    with engine.begin() as conn:  # the hour and day jobs caught up, as a daemon's are
        for job, mark in (("hour", _floor(NOW, 3600)), ("day", _floor(NOW, 86400))):
            conn.execute(delete(rollup_state).where(rollup_state.c.host == HOST,
                                                    rollup_state.c.job == job))  # fmt: skip
            conn.execute(insert(rollup_state).values(host=HOST, job=job, watermark=mark))
    return written


def _floor(at: datetime, seconds: int) -> datetime:
    return datetime.fromtimestamp(at.timestamp() // seconds * seconds, UTC)


def _ceil(at: datetime, seconds: int) -> datetime:
    floor = _floor(at, seconds)
    return floor if floor == at else floor + timedelta(seconds=seconds)


def config_for(folder: Path, url: str, pairs: Sequence[tuple[str, str]], models: int) -> Config:
    lines = [f'host = "{HOST}"', f'database_url = "{url}"', "[daemon]", "interval_seconds = 10"]
    for target, _ in pairs:
        lines += ["[[targets]]", f'name = "{target}"', f'url = "http://127.0.0.1:9/{target}"']
    for m in range(models):
        lines += ["[[slo]]", f'model = "model-{m}"', 'ttft = "500ms"', 'e2e = "1s"',
                  "objective = 0.99"]  # fmt: skip
    path = folder / f"gpuwatch-{len(pairs)}.toml"
    path.write_text("\n".join(lines) + "\n")
    return load_config(str(path), {})


# -- the timings ---------------------------------------------------------------------------------


@dataclass
class Scenario:
    """One filled database and the three calls timed on it."""

    label: str
    calls: dict[str, Callable[[], object]]  # "base", "tail", "full"
    engine: Engine
    times: dict[str, list[float]] = field(default_factory=dict)

    def median(self, key: str) -> float:
        return statistics.median(self.times[key])

    @property
    def tick(self) -> float:
        return (self.median("tail") * (TICKS_PER_MINUTE - 1) + self.median("full")) / (
            TICKS_PER_MINUTE
        )


def prepare(url: str, folder: Path, targets: int, models: int, days: float) -> Scenario:
    pairs = targets_of(targets, models)
    upgrade_database(url)
    engine = open_database(url)
    began = time.perf_counter()
    last, rows = fill(engine, pairs, days)
    label = f"{targets} targets, {days:g} days"
    print(f"  {label}: filled in {time.perf_counter() - began:.1f} s ({rows:,} history rows)")
    config = config_for(folder, url, pairs, models)
    store = Store(engine, HOST)
    names = sorted({m for _, m in pairs})
    others = {k: v for k, v in DEFAULT_RULES.items() if k != "SloBurnRate"}
    warm = SloCache()
    burns = read_burns(ReadOnce(store, HOST), HOST, config.slos, names, NOW, warm)
    assert burns and all(b.long is not None for b in burns), burns  # measured, not unknown

    def tail() -> object:  # the cache warm: this minute's rollup windows were read
        return read_burns(ReadOnce(store, HOST), HOST, config.slos, names, NOW, warm)

    def full() -> object:  # the watermark moved: the rollup windows are read again
        return read_burns(ReadOnce(store, HOST), HOST, config.slos, names, NOW, SloCache())

    def base() -> object:
        return gather(store, last, config, NOW, rules=others)

    return Scenario(label, {"base": base, "tail": tail, "full": full}, engine)


def time_all(scenarios: list[Scenario], rounds: int) -> None:
    """Every call of every scenario once per round, in turn: a swing of the machine's load
    falls on all of them alike, so their ratios hold even when the medians move."""
    for sc in scenarios:
        for fn in sc.calls.values():
            fn()  # warm-up: statement compilation, the first read of the series
        sc.times = {key: [] for key in sc.calls}
    for _ in range(rounds):
        for sc in scenarios:
            for key, fn in sc.calls.items():
                start = time.perf_counter()
                fn()
                sc.times[key].append(time.perf_counter() - start)


def print_scenario(sc: Scenario) -> None:
    base = sc.median("base")
    print(f"baseline: {sc.label}: the other rules' inputs   {ms(sc.times['base'])}")
    print(f"{sc.label}: SloBurnRate between minutes    {ms(sc.times['tail'])}")
    print(f"{sc.label}: SloBurnRate at a minute boundary {ms(sc.times['full'])}")
    share, ratio = sc.tick / STEP, sc.tick / base
    print(f"{sc.label}: SloBurnRate a tick, a minute's mean {sc.tick * 1e3:8.2f} ms "
          f"({share:.2%} of the 10 s tick; {ratio:.2f} x the baseline)")  # fmt: skip


def run_all(args: argparse.Namespace, url_for: Callable[[str], str], folder: Path) -> None:
    by_targets = {
        n: prepare(url_for(f"t{n}"), folder, n, args.models, args.history_days[0])
        for n in args.targets
    }
    by_days = {}
    for days in args.history_days:
        if days == args.history_days[0] and args.history_targets in by_targets:
            by_days[days] = by_targets[args.history_targets]
        else:
            by_days[days] = prepare(url_for(f"d{days:g}"), folder, args.history_targets,
                                    args.models, days)  # fmt: skip
    scenarios = list({id(sc): sc for sc in [*by_targets.values(), *by_days.values()]}.values())
    time_all(scenarios, args.rounds)
    for sc in scenarios:
        print_scenario(sc)
        sc.engine.dispose()
    most = max(args.targets)
    tick = by_targets[most].tick
    print(
        f"target: SloBurnRate a tick at {most} targets {tick * 1e3:.2f} ms <= "
        f"{TICK_BUDGET * 1e3:.0f} ms (10 % of the tick): {verdict(tick <= TICK_BUDGET)}"
    )
    first, longest = by_days[args.history_days[0]], by_days[args.history_days[-1]]
    for key, what in (("tail", "between minutes"), ("full", "at a minute boundary")):
        ratio = longest.median(key) / first.median(key)
        print(f"target: {what} flat in the history ({args.history_days[-1]:g} vs "
              f"{args.history_days[0]:g} days at {args.history_targets} targets) "
              f"{ratio:.2f} x <= {FLAT} x: {verdict(ratio <= FLAT)}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--targets",
        type=_ints,
        default=[1, 4, 16],
        help="the targets on the host, one scenario each (the first --history-days)",
    )
    parser.add_argument("--models", type=int, default=2, help="models over the targets")
    parser.add_argument(
        "--history-days",
        type=_floats,
        default=[4.0, 30.0],
        help="history lengths at --history-targets (first: the baseline)",
    )
    parser.add_argument("--history-targets", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=30, help="timed calls per figure")
    parser.add_argument(
        "--postgres-url",
        default=None,
        help="a superuser URL: the same on PostgreSQL (default SQLite only)",
    )
    args = parser.parse_args(argv)  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="bench-slo-") as tmp:
        folder = Path(tmp)
        print("SQLite")
        run_all(args, lambda name: f"sqlite:///{folder / (name + '.db')}", folder)
        if args.postgres_url is not None:
            admin = postgres_or_skip(args.postgres_url, "the PostgreSQL run")
            made: list[str] = []

            def pg(name: str) -> str:
                made.append(f"bench_slo_{name}".replace(".", "_"))
                return fresh_database(admin, made[-1])

            print("PostgreSQL")
            try:
                run_all(args, pg, folder)
            finally:
                for name in made:
                    drop_database(admin, name)
    return 0


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",")]


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",")]


if __name__ == "__main__":
    raise SystemExit(main())
