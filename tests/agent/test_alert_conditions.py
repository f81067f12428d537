"""Alert conditions over hand-built inputs (pure), and ``gather`` against a real SQLite database:
each rule fires on the right data, stays quiet on the wrong data, and a rule whose data is
unknown is left out of the evaluated set instead of looking like "all clear"."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from agent.alerting.conditions import conditions, least_squares_slope
from agent.alerting.inputs import AlertInputs, LatencyCadence, gather
from agent.config.rates import Rate
from agent.config.settings import load_config
from agent.daemon.app import App
from agent.storage.db import upgrade_database
from alerts.model import AlertKey, Condition
from alerts.rules import DEFAULT_RULES
from collectors.base import CollectError, Sample

T = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
HOST = "box"
GPU = "GPU-aaaa"
GPU_LABELS = {"host": HOST, "gpu_uuid": GPU, "gpu_index": "0"}
ENGINE = {"host": HOST, "target": "llm", "engine": "vllm", "model": "m"}


def ago(seconds: float) -> datetime:
    return T - timedelta(seconds=seconds)


def sample(metric: str, value: float, **labels: str) -> Sample:
    return Sample(metric=metric, value=value, labels=labels or GPU_LABELS, ts=T)


def health(collector: str, ok: bool, last: datetime | None) -> list[Sample]:
    labels = {"host": HOST, "collector": collector}
    out = [Sample(metric="gpuwatch_collector_success", value=float(ok), labels=labels, ts=T)]
    if last is not None:
        stamp = last.timestamp()
        out.append(
            Sample(
                metric="gpuwatch_collector_last_success_timestamp_seconds",
                value=stamp,
                labels=labels,
                ts=T,
            )
        )
    return out


def up(target: str, value: float) -> Sample:
    return Sample(
        metric="gpuwatch_target_up", value=value, labels={"host": HOST, "target": target}, ts=T
    )


def inputs(*samples: Sample, nvml_ok: bool = True, **overrides: Any) -> AlertInputs:
    """A box whose NVML collector ran this round (successfully unless told), GPU billed."""
    base = AlertInputs(
        now=T,
        host=HOST,
        interval_seconds=10.0,
        started_at=ago(3600),
        latest=(*health("nvml", nvml_ok, T if nvml_ok else ago(60)), *samples),
        collector_success={"nvml": nvml_ok},
        collector_last_success={"nvml": T if nvml_ok else ago(60)},
        billed_gpus=frozenset({GPU}),
        gpu_hourly_usd={GPU: 3.6},
    )
    return replace(base, **overrides)


def fired(rule: str, data: AlertInputs) -> list[Condition]:
    found, evaluated = conditions(DEFAULT_RULES, data)
    assert rule in evaluated
    return [c for c in found if c.key.rule == rule]


def gpu_key(rule: str) -> AlertKey:
    return AlertKey.of(rule, GPU_LABELS)


UTIL = "gpuwatch_gpu_utilization_ratio"


# -- GpuIdle ---------------------------------------------------------------------------------


def test_an_idle_billed_gpu_fires_with_its_hourly_price() -> None:
    [idle] = fired("GpuIdle", inputs(sample(UTIL, 0.01)))
    assert idle.key == gpu_key("GpuIdle")
    assert idle.value == 0.01
    assert idle.annotations["usd_per_hour"] == "3.6"


def test_a_busy_or_unbilled_gpu_is_not_idle_waste() -> None:
    assert fired("GpuIdle", inputs(sample(UTIL, 0.4))) == []
    assert fired("GpuIdle", inputs(sample(UTIL, 0.0), billed_gpus=frozenset())) == []


def test_a_blind_nvml_collector_is_collector_down_and_never_gpu_idle() -> None:
    # The last utilization seen was 0, but NVML failed this round: nothing is known of the GPU.
    data = inputs(sample(UTIL, 0.0), nvml_ok=False)
    found, evaluated = conditions(DEFAULT_RULES, data)
    assert "GpuIdle" not in evaluated
    assert {"GpuHot", "VramHeadroomLow", "GpuThrottling", "GpuHardwareErrors"}.isdisjoint(evaluated)
    [down] = [c for c in found if c.key.rule == "CollectorDown"]
    assert down.key == AlertKey.of("CollectorDown", {"host": HOST, "collector": "nvml"})
    assert down.value == 6.0  # 60 s without a success at a 10 s interval
    assert all(c.key.rule != "GpuIdle" for c in found)


def test_a_gpu_whose_model_is_loading_stays_quiet_until_the_warm_up_is_over() -> None:
    def with_target(since: datetime | None) -> AlertInputs:
        return inputs(
            sample(UTIL, 0.0),
            gpu_targets={GPU: frozenset({"llm"})},
            target_up_since={"llm": since},
        )

    assert fired("GpuIdle", with_target(ago(60))) == []  # up a minute ago: loading weights
    assert fired("GpuIdle", with_target(None)) == []  # down: starting, or TargetDown's business
    assert len(fired("GpuIdle", with_target(ago(900)))) == 1  # up 15 min and still idle


# -- CollectorDown and TargetDown ------------------------------------------------------------


def test_a_collector_fires_after_the_missed_intervals_and_not_before() -> None:
    def nvml(ok: bool, last: datetime | None, started: datetime, **since: datetime) -> AlertInputs:
        return inputs(
            collector_success={"nvml": ok, "target/llm": True},
            collector_last_success={"nvml": last, "target/llm": T},
            started_at=started,
            failing_since=since,
        )

    assert fired("CollectorDown", nvml(False, ago(20), ago(3600))) == []  # two misses
    [down] = fired("CollectorDown", nvml(False, ago(29.8), ago(3600)))  # three, with jitter
    assert down.value == 3.0
    [never] = fired("CollectorDown", nvml(False, None, ago(40)))
    assert never.annotations["last_success"] == "never"
    assert fired("CollectorDown", nvml(False, None, ago(10))) == []  # just started
    assert fired("CollectorDown", nvml(True, T, ago(3600))) == []
    # Failing since before a restart 10 s ago: still down, no fresh count from the start.
    [still] = fired("CollectorDown", nvml(False, None, ago(10), nvml=ago(600)))
    assert still.value == 60.0


def test_a_failing_target_is_target_down_never_collector_down() -> None:
    failing = inputs(
        collector_success={"nvml": True, "target/llm": False},
        collector_last_success={"nvml": T, "target/llm": ago(3600)},
        started_at=ago(7200),
    )
    assert fired("CollectorDown", failing) == []


def test_a_target_that_is_not_up_is_target_down() -> None:
    [down] = fired("TargetDown", inputs(up("llm", 0.0), up("other", 1.0)))
    assert down.key == AlertKey.of("TargetDown", {"host": HOST, "target": "llm"})


# -- latency ---------------------------------------------------------------------------------

TTFT = ("llm", "m", "ttft")
LATENCY_KEY = AlertKey.of(
    "LatencyP99Spike", {"host": HOST, "target": "llm", "model": "m", "kind": "ttft"}
)


def test_a_p99_above_the_absolute_limit_fires_with_enough_requests() -> None:
    [spike] = fired("LatencyP99Spike", inputs(up("llm", 1.0), p99={TTFT: (6.0, 100.0)}))
    assert spike.key == LATENCY_KEY
    assert spike.value == 6.0
    assert spike.annotations["limit_seconds"] == "5"


def test_too_few_requests_are_no_latency_alert() -> None:
    assert fired("LatencyP99Spike", inputs(up("llm", 1.0), p99={TTFT: (60.0, 5.0)})) == []


def test_the_baseline_raises_the_limit_when_it_is_the_higher() -> None:
    base = {TTFT: (3.0, 500.0)}  # 3 x 3 s = 9 s is above the 5 s limit
    assert fired("LatencyP99Spike", inputs(p99={TTFT: (6.0, 100.0)}, baseline_p99=base)) == []
    [spike] = fired("LatencyP99Spike", inputs(p99={TTFT: (10.0, 100.0)}, baseline_p99=base))
    assert spike.annotations["limit_seconds"] == "9"
    thin = {TTFT: (3.0, 4.0)}  # a baseline of four requests does not count
    assert len(fired("LatencyP99Spike", inputs(p99={TTFT: (6.0, 100.0)}, baseline_p99=thin))) == 1


# -- queue and KV cache ----------------------------------------------------------------------


def rising(start: float, step: float, n: int = 11) -> tuple[tuple[datetime, float], ...]:
    return tuple((ago(600 - 60 * i), start + step * i) for i in range(n))


def kv(ratio: float) -> Sample:
    return sample("gpuwatch_engine_kv_cache_usage_ratio", ratio, **ENGINE)


def test_a_growing_queue_with_a_full_kv_cache_asks_for_a_replica() -> None:
    data = inputs(kv(0.97), queue_points={("llm", "m"): rising(5, 2)})
    [queue] = fired("QueueGrowing", data)
    assert queue.key == AlertKey.of("QueueGrowing", {"host": HOST, "target": "llm", "model": "m"})
    assert queue.value == 25.0
    assert queue.annotations["kv_saturated"] == "yes"
    assert "add a replica" in queue.annotations["summary"]
    assert queue.annotations["slope_per_minute"] == "2.00"


def test_a_growing_queue_with_room_in_the_kv_cache_is_a_scheduling_problem() -> None:
    [queue] = fired("QueueGrowing", inputs(kv(0.3), queue_points={("llm", "m"): rising(5, 2)}))
    assert queue.annotations["kv_saturated"] == "no"
    assert "admission or scheduling problem" in queue.annotations["summary"]
    assert "add a replica" not in queue.annotations["summary"]


def test_a_long_but_draining_or_short_queue_is_quiet() -> None:
    assert fired("QueueGrowing", inputs(queue_points={("llm", "m"): rising(40, -1)})) == []
    assert fired("QueueGrowing", inputs(queue_points={("llm", "m"): rising(0, 0.5)})) == []
    assert fired("QueueGrowing", inputs(queue_points={("llm", "m"): rising(30, 0, n=1)})) == []


def test_kv_cache_saturation() -> None:
    [full] = fired("KvCacheSaturated", inputs(kv(0.97)))
    assert full.key == AlertKey.of(
        "KvCacheSaturated", {"host": HOST, "target": "llm", "model": "m"}
    )
    assert fired("KvCacheSaturated", inputs(kv(0.9))) == []


def test_engine_rules_are_not_evaluated_while_a_target_cannot_be_scraped() -> None:
    data = inputs(up("llm", 0.0), kv(0.99), p99={TTFT: (60.0, 100.0)})
    found, evaluated = conditions(DEFAULT_RULES, data)
    assert {"LatencyP99Spike", "QueueGrowing", "KvCacheSaturated"}.isdisjoint(evaluated)
    assert [c.key.rule for c in found] == ["TargetDown"]


def test_least_squares_slope() -> None:
    assert least_squares_slope(rising(0, 6)) == 0.1  # 6 per minute
    assert least_squares_slope(rising(0, 6, n=1)) is None


# -- GPU health ------------------------------------------------------------------------------


def test_vram_headroom_is_free_over_total() -> None:
    def memory(used: float) -> AlertInputs:
        return inputs(
            sample("gpuwatch_gpu_memory_used_bytes", used),
            sample("gpuwatch_gpu_memory_total_bytes", 100.0),
        )

    [low] = fired("VramHeadroomLow", memory(90.0))
    assert low.key == gpu_key("VramHeadroomLow")
    assert low.value is not None and abs(low.value - 0.1) < 1e-9
    assert fired("VramHeadroomLow", memory(80.0)) == []


def test_gpu_hot() -> None:
    temperature = "gpuwatch_gpu_temperature_celsius"
    assert [c.value for c in fired("GpuHot", inputs(sample(temperature, 90.0)))] == [90.0]
    assert fired("GpuHot", inputs(sample(temperature, 85.0))) == []


def test_thermal_and_power_brake_throttling_fire_but_the_power_cap_does_not() -> None:
    reasons = "gpuwatch_gpu_throttle_reasons"
    assert fired("GpuThrottling", inputs(sample(reasons, 0x4 | 0x1))) == []  # SW power cap, idle
    [hot] = fired("GpuThrottling", inputs(sample(reasons, 0x4 | 0x20 | 0x80)))
    assert hot.annotations["reasons"] == (
        "nvmlClocksEventReasonSwThermalSlowdown, nvmlClocksEventReasonHwPowerBrakeSlowdown"
    )


def test_uncorrected_ecc_errors_are_hardware_errors_corrected_ones_are_not() -> None:
    ecc = "gpuwatch_gpu_ecc_errors_total"
    corrected = sample(ecc, 12.0, **GPU_LABELS, type="corrected")
    assert fired("GpuHardwareErrors", inputs(corrected)) == []
    uncorrected = sample(ecc, 1.0, **GPU_LABELS, type="uncorrected")
    [error] = fired("GpuHardwareErrors", inputs(corrected, uncorrected))
    assert error.key == gpu_key("GpuHardwareErrors")  # the error type is not part of identity


def test_a_disabled_rule_is_neither_evaluated_nor_reported() -> None:
    rules = {**DEFAULT_RULES, "GpuIdle": replace(DEFAULT_RULES["GpuIdle"], enabled=False)}
    found, evaluated = conditions(rules, inputs(sample(UTIL, 0.0)))
    assert "GpuIdle" not in evaluated
    assert found == []


# -- gather, against SQLite ------------------------------------------------------------------


@dataclass
class ScriptedNvml:
    name: str = "nvml"

    def collect(self, now: datetime) -> Iterable[Sample]:
        return [
            Sample(metric="gpuwatch_gpu_info", value=1.0, labels=GPU_LABELS, ts=now),
            Sample(metric=UTIL, value=0.0, labels=GPU_LABELS, ts=now),
        ]


@dataclass
class ScriptedEngine:
    """A vLLM target: ten requests of about half a second per scrape, and a growing queue."""

    name: str = "target/llm"
    target: str = "llm"
    requests: float = 0.0
    waiting: float = 0.0
    down: bool = False
    buckets: tuple[float, ...] = (0.1, 1.0, 10.0, float("inf"))

    def collect(self, now: datetime) -> Iterable[Sample]:
        if self.down:
            raise CollectError("connection refused")
        self.requests += 10
        self.waiting += 1
        out = [Sample(metric="gpuwatch_engine_requests_waiting", value=self.waiting,
                      labels=ENGINE, ts=now)]  # fmt: skip
        for le in self.buckets:
            count = 0.0 if le < 0.5 else self.requests
            labels = {**ENGINE, "le": "+Inf" if le == float("inf") else str(le)}
            out.append(
                Sample(metric="gpuwatch_engine_ttft_seconds_bucket", value=count, labels=labels,
                       ts=now)
            )  # fmt: skip
        return out


def test_gather_reads_p99_queue_points_and_health_from_the_store(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'gw.db'}"
    upgrade_database(url)
    config = replace(
        load_config(None, {"GPUWATCH_DATABASE_URL": url}),
        host=HOST,
        rates=(Rate(usd_per_hour=Decimal("3.60")),),
    )
    app = App.open(config, collectors=[ScriptedNvml(), ScriptedEngine()])
    try:
        for i in range(37):  # six minutes at 10 s
            round_ = app.tick(T + timedelta(seconds=10 * i))
        now = T + timedelta(seconds=360)
        data = gather(app.store, round_, config, now, started_at=T)
    finally:
        app.close()
    value, count = data.p99[("llm", "m", "ttft")]
    assert count == 300.0  # 30 scrapes of 10 requests in the 5 min window
    assert 0.1 < value <= 1.0
    assert data.baseline_p99 == {}  # no whole hour rolled up yet
    points = data.queue_points[("llm", "m")]
    assert len(points) == 37 and points[0] == (T, 1.0) and points[-1] == (now, 37.0)
    assert data.target_up_since == {"llm": T}
    assert data.collector_success == {"nvml": True, "target/llm": True}
    assert data.collector_last_success["nvml"] == now
    assert data.billed_gpus == frozenset({GPU}) and data.gpu_hourly_usd == {GPU: 3.6}
    found, _ = conditions(DEFAULT_RULES, data)
    assert {c.key.rule for c in found} == {"GpuIdle", "QueueGrowing"}


def test_the_latency_baseline_is_the_p99_of_the_hour_rollups_before_the_window(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'gw.db'}"
    upgrade_database(url)
    config = replace(load_config(None, {"GPUWATCH_DATABASE_URL": url}), host=HOST)
    app = App.open(config, collectors=[ScriptedNvml(), ScriptedEngine()])
    try:
        for i in range(181):  # three hours at 60 s
            round_ = app.tick(T + timedelta(seconds=60 * i))
        now = T + timedelta(hours=3)
        app.rollup.run(now + timedelta(minutes=5))
        data = gather(app.store, round_, config, now, started_at=T)
    finally:
        app.close()
    # The whole hours before the 5 min window (14:55): 12:00-14:00, 600 requests each.
    value, count = data.baseline_p99[("llm", "m", "ttft")]
    assert count == 2 * 600
    assert 0.1 < value <= 1.0


def test_at_1_s_ticks_the_latency_windows_are_read_every_10_seconds(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'gw.db'}"
    upgrade_database(url)
    config = load_config(None, {"GPUWATCH_DATABASE_URL": url})
    config = replace(config, host=HOST, daemon=replace(config.daemon, interval_seconds=1.0))
    app = App.open(config, collectors=[ScriptedNvml(), ScriptedEngine()])
    assert app.cadence is not None  # the daemon's own
    counts: list[float | None] = []
    try:
        for i in range(25):
            now = T + timedelta(seconds=i)
            round_ = app.tick(now)
            data = gather(app.store, round_, config, now, started_at=T, cadence=app.cadence)
            p99 = data.p99.get(("llm", "m", "ttft"))
            counts.append(None if p99 is None else p99[1])
    finally:
        app.close()
    # Ten requests a scrape: read at 0 s (nothing counted yet), 10 s and 20 s, kept between.
    assert counts == [None] * 10 + [100.0] * 10 + [200.0] * 5


def test_the_latency_cadence_reads_again_when_due_or_when_something_changed() -> None:
    reads: list[datetime] = []

    def at(cadence: LatencyCadence, seconds: float, pairs: set[tuple[str, str]]) -> bool:
        before = len(reads)
        now = T + timedelta(seconds=seconds)
        cadence(pairs, now, lambda: (reads.append(now), ({}, {}))[1])
        return len(reads) > before

    pair = {("llm", "m")}
    ten = LatencyCadence(10.0)  # the default tick: every tick reads, early or late by a little
    assert [at(ten, s, pair) for s in (0, 9.98, 20.03, 29.99)] == [True] * 4
    one = LatencyCadence(1.0)
    assert [at(one, s, pair) for s in (0, 1, 5, 9.2, 10, 11)] == [True, False, False, False,
                                                                  True, False]  # fmt: skip
    assert at(one, 12, pair | {("llm", "other")})  # a new model: read now
    assert at(one, 3, pair | {("llm", "other")})  # the clock went back: read now
    assert at(one, 4, pair) and not at(one, 5, pair)
    two = LatencyCadence(2.0)
    assert [at(two, s, pair) for s in range(0, 22, 2)] == [
        True, False, False, False, False, True, False, False, False, False, True
    ]  # fmt: skip


def test_the_daemons_rollup_leaves_in_the_head_what_its_rules_read_back(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'gw.db'}"
    upgrade_database(url)
    path = tmp_path / "gpuwatch.toml"
    path.write_text(f'database_url = "{url}"\n')
    app = App.open(load_config(str(path), {}), collectors=[])
    assert app.rollup.head_reach == timedelta(seconds=600 + 2 * 10)  # GpuIdle's warm-up
    app.close()
    rule = "[alerts.rules.LatencyP99Spike]\nwindow_seconds = 1800\n"
    path.write_text(f'database_url = "{url}"\n{rule}')
    app = App.open(load_config(str(path), {}), collectors=[])
    assert app.rollup.head_reach == timedelta(minutes=30)
    app.close()
