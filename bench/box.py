"""The box several benchmarks tick: 8 fake GPUs and 2 vLLM 0.33 targets, over simulated time.

Not a benchmark: bench/tick.py, bench/storage.py, bench/fleet_ingest.py and bench/outage.py
run it.

The hardware is the fake libnvidia-ml.so.1, whose "hardware" file is rewritten every tick so
that utilisation, power, temperature and the energy counter move as on a busy box (values that
never change would flatter any compressing store). Each target is an :class:`EngineServer`
rendering vLLM 0.33 (V1 engine: every histogram, ``_created`` children) for 2 models x 2
data-parallel engines; between ticks each target completes one more request, taking its
(model, engine) in turn, and every engine's gauges move.

The daemon's own objects do the work: :meth:`App.tick` every ``daemon.interval_seconds`` of the
default config (or the interval given), :meth:`App.roll_up` (the real rollup job and the cost
signals) every simulated minute, and the fleet-lead check, as ``agent.daemon.service.Daemon``
schedules them.

The simulator recounts every histogram from every request served so far on each render, which
over hours of traffic makes a render take seconds. Between two renders a histogram's
observations only grow at the end (requests are appended in serve order and nothing restarts
here), so :func:`incremental_counts` counts only the new tail onto the counts of the longest
earlier call whose values are an exact prefix (checked element by element); the result is the
tuple :func:`agent.sim.traffic.cumulative_counts` returns, which :func:`install` checks before
swapping it into the renderer.
"""

from __future__ import annotations

import contextlib
import math
import os
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import agent.sim.expo as expo
from agent.collect.runner import Round
from agent.config.settings import Config, load_config
from agent.daemon.app import App
from agent.daemon.leader import CHECK_SECONDS
from agent.daemon.service import ROLLUP_SECONDS
from agent.sim.fakenvml.hardware import FakeGpu, FakeNvmlConfig, FakeProcess, GiB, write_config
from agent.sim.server import EngineServer
from agent.sim.traffic import Traffic, cumulative_counts
from bench.common import load_fake_nvml

GPUS = 8
TARGETS = 2
MODELS = ("llama-3-8b", "qwen-2.5-32b")
ENGINES = 2  # data-parallel engines per model
VERSION = "vllm-0.33"
T0 = datetime(2026, 12, 1, tzinfo=UTC)
HOST = "bench-box"


@dataclass
class SimClock:
    """The simulated instant; the engines' ``_created`` times read it too."""

    now: datetime = T0

    def unix(self) -> float:
        return self.now.timestamp()


def hardware(tick: int, step: float) -> FakeNvmlConfig:
    """8 busy H100s at ``tick``: utilisation and power swing, energy counts up, one process
    per GPU (GPUs 0-3 serve the first target, 4-7 the second)."""
    gpus = []
    for i in range(GPUS):
        phase = tick / 30 + i
        util = 55 + int(40 * abs(math.sin(phase)))
        power_mw = 250_000 + util * 4_000 + (tick * 7919 + i * 104729) % 3_000
        energy_mj = 10**9 + i * 10**7 + tick * int(step * 500_000) + (tick * util) % 997
        gpus.append(
            FakeGpu(
                uuid=f"GPU-{i:08x}-0000-4000-8000-000000000000",
                util=util,
                memutil=util // 2,
                used=62 * GiB + (tick % 50) * 64 * 1024**2,  # clear of the headroom alert
                power_mw=power_mw,
                temp_c=55 + util // 10,
                sm_mhz=1_755 + (tick + i) % 3 * 15,
                energy_mj=energy_mj,
                throttle=0,
            )
        )
    procs = tuple(FakeProcess(gpu=i, pid=4000 + i, mem=60 * GiB) for i in range(GPUS))
    return FakeNvmlConfig(gpus=tuple(gpus), processes=procs)


def drive(traffic: Traffic, tick: int) -> None:
    """One tick of load: one request done on the next (model, engine), every gauge moved."""
    children = [(m, e) for m in traffic.models for e in traffic.engines]
    model, engine = children[tick % len(children)]
    traffic.serve(1, model=model, engine=engine)
    for k, (m, e) in enumerate(children):
        wave = (tick + 3 * k) % 17
        traffic.set_gauges(
            model=m, engine=e, running=8 + wave, waiting=wave // 5, kv_usage=0.3 + wave / 40
        )


def config_text(database_url: str, urls: list[str], interval_seconds: float | None = None) -> str:
    """The box's config: defaults everywhere except what a box must say (targets, a rate), and
    the tick interval when given."""
    interval = [] if interval_seconds is None else [f"interval_seconds = {interval_seconds}"]
    lines = [
        f'host = "{HOST}"',
        f'database_url = "{database_url}"',
        "[daemon]",
        *interval,
        'metrics_listen = ""',  # the bench reads the database, not /metrics
        "[[rates]]",
        'gpu = "*"',
        "usd_per_hour = 2.72",
    ]
    per_target = GPUS // len(urls)
    for n, url in enumerate(urls):
        gpus = ", ".join(f'"{g}"' for g in range(n * per_target, (n + 1) * per_target))
        lines += ["[[targets]]", f'name = "vllm-{n}"', f'url = "{url}"', f"gpus = [{gpus}]"]
    return "\n".join(lines) + "\n"


@contextlib.contextmanager
def engine_servers(clock: SimClock) -> Iterator[list[EngineServer]]:
    install()  # renders stay cheap while requests pile up over simulated hours
    servers = [
        EngineServer(VERSION, Traffic(MODELS, ENGINES, hostname=HOST, clock=clock.unix))
        for _ in range(TARGETS)
    ]
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(s) for s in servers]


@dataclass(frozen=True)
class Checkpoint:
    """Where the run is when the caller's hook measures: after the tick and rollup at ``at``."""

    at: datetime
    ticks: int  # ticks so far
    samples_written: int  # samples handed to the store so far (one per series and tick)
    final: bool


@dataclass
class Run:
    """What the run did, for the report."""

    config: Config
    ticks: int = 0
    rollups: int = 0
    samples_written: int = 0
    metrics: set[str] = field(default_factory=set)
    tick_seconds: float = 0.0
    rollup_seconds: float = 0.0
    last_round: Round | None = None  # the last round handed to the store


Hook = Callable[[App, Run, Checkpoint], None]


def load_box_nvml(folder: Path) -> None:
    """The fake NVML library loaded into this process over the box's GPUs."""
    load_fake_nvml(folder, hardware(0, 10.0))


def load_box_config(
    folder: Path, database_url: str, urls: list[str], interval_seconds: float | None = None
) -> Config:
    path = folder / "gpuwatch.toml"
    path.write_text(config_text(database_url, urls, interval_seconds))
    return load_config(str(path), {"HOME": "/nonexistent"})


def run_box(
    folder: Path,
    database_url: str,
    hours: float,
    every: timedelta,
    hook: Hook,
    jitter_ms: float,
    interval_seconds: float | None = None,
) -> Run:
    """Tick the box over [T0, T0 + ``hours``); ``hook`` measures on the last tick before each
    multiple of ``every`` and on the last tick, so every measurement sees the jobs at the same
    phase, and the run stays inside Prometheus' 2-hour blocks when ``hours`` is a multiple of 2.
    The fake NVML library must be loaded already (:func:`load_box_nvml`)."""
    clock = SimClock()
    late = random.Random(11)
    nvml_file = Path(os.environ["FAKE_NVML_CONFIG"])
    with engine_servers(clock) as servers:
        urls = [s.url for s in servers]
        config = load_box_config(folder, database_url, urls, interval_seconds)
        step = config.daemon.interval_seconds
        run = Run(config)
        app = App.open(config)
        _count_writes(app, run)
        try:
            ticks = int(hours * 3600 / step)
            for i in range(ticks):
                clock.now = T0 + timedelta(
                    seconds=i * step, milliseconds=late.uniform(0, jitter_ms)
                )
                write_config(nvml_file, hardware(i, step))
                for server in servers:
                    drive(server.traffic, i)
                _step(app, run, clock.now, i, step)
                last = i == ticks - 1
                if last or _due(i + 1, step, every.total_seconds()):
                    hook(app, run, Checkpoint(clock.now, run.ticks, run.samples_written, last))
        finally:
            app.close()
    return run


def _step(app: App, run: Run, now: datetime, i: int, step: float) -> None:
    """One tick's instant as the daemon runs it: the lead check, the tick, the minute job."""
    began = time.perf_counter()
    _tick(app, now, i, step)
    run.tick_seconds += time.perf_counter() - began
    if _due(i, step, ROLLUP_SECONDS):
        began = time.perf_counter()
        app.roll_up(now)
        run.rollup_seconds += time.perf_counter() - began
        run.rollups += 1
    run.ticks = i + 1


def _count_writes(app: App, run: Run) -> None:
    """Count what each tick hands the store (one sample per series and instant, as it keeps),
    whatever layout the store writes it in."""
    write = app.store.write_round

    def counted(round_: Round, timeout: float | None = None) -> int:
        rows = write(round_, timeout=timeout)  # raises when it fails: then nothing was stored
        stored = {(s.metric, s.label_key()) for _, s in round_.tagged_samples()}
        run.samples_written += len(stored)
        run.metrics.update(metric for metric, _ in stored)
        run.last_round = round_
        return rows

    setattr(app.store, "write_round", counted)  # noqa: B010 - an instance's bound method


def _due(tick: int, step: float, period: float) -> bool:
    """Whether a job every ``period`` s (first run at start) fires at this tick's instant."""
    now, before = tick * step, (tick - 1) * step
    return tick == 0 or math.floor(now / period) > math.floor(before / period)


def _tick(app: App, now: datetime, i: int, step: float) -> None:
    if _due(i, step, CHECK_SECONDS):
        app.check_leadership(now)  # the daemon asks before its first rollup, then every 10 s
    app.tick(now)
    if app.queued:
        app.deliver(now)


# -- cheap renders over hours of traffic ---------------------------------------------------

HEAD = 8  # values that key the memo: histograms starting alike are few


@dataclass(eq=False)  # entries are told apart by identity: comparing values costs a scan
class _Memo:
    values: tuple[float, ...]
    counts: tuple[int, ...]


_memo: dict[tuple[tuple[float, ...], tuple[float, ...]], list[_Memo]] = {}
_lock = threading.Lock()  # each target's server renders in its own thread


def incremental_counts(values: Iterable[float], bounds: Sequence[float]) -> tuple[int, ...]:
    vals = tuple(values)
    with _lock:
        return _counts(vals, tuple(bounds))


def _counts(vals: tuple[float, ...], bounds: tuple[float, ...]) -> tuple[int, ...]:
    key = (bounds, vals[:HEAD])
    entries = _memo.setdefault(key, [])
    best: _Memo | None = None
    for entry in entries:
        n = len(entry.values)
        if n <= len(vals) and (best is None or n > len(best.values)) and vals[:n] == entry.values:
            best = entry
    if best is None:
        counts = cumulative_counts(vals, bounds)
    else:
        tail = cumulative_counts(vals[len(best.values) :], bounds)
        counts = tuple(a + b for a, b in zip(best.counts, tail, strict=True))
        entries.remove(best)  # its values are a prefix of these: this entry supersedes it
    entries.append(_Memo(vals, counts))
    return counts


def install() -> None:
    """Render the simulator's histograms with :func:`incremental_counts` from now on."""
    bounds = (0.1, 0.5, 1.0)
    for values in ((), (0.1, 0.2), (0.1, 0.2, 0.5, 2.0, 0.05)):
        assert incremental_counts(values, bounds) == cumulative_counts(values, bounds)
    _memo.clear()
    expo.cumulative_counts = incremental_counts
