"""GpuIdle judged on SM activity where GPM or DCGM profiling gives it, on NVML's busy flag
elsewhere, and saying which: over hand-built inputs through ``conditions``, and end to end in
the App on the simulated clock (real pynvml over the fake libnvidia-ml with GPM, delivery to
a loopback Slack), where GPM's gauge arrives a round after the flag and a restart happens."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent.alerting.conditions import conditions
from agent.alerting.inputs import AlertInputs
from agent.config.settings import load_config
from agent.daemon.app import App
from agent.storage.db import upgrade_database
from alerts.model import Condition
from alerts.rules import DEFAULT_RULES, apply_overrides
from tests.agent.test_alert_conditions import GPU_LABELS, UTIL, gpu_key, inputs, sample
from tests.alerts.notifiers.conftest import Loopback, Reply, loopback  # noqa: F401
from tests.conftest import FakeNvml
from tests.fakenvml.build import FakeGpm, FakeGpu, FakeMig, FakeNvmlConfig

SM = "gpuwatch_gpu_sm_active_ratio"


# -- the condition, over hand-built inputs ---------------------------------------------------


def test_a_gpu_busy_by_the_flag_but_idle_by_its_sms_is_idle_and_says_so() -> None:
    # One small request at a time: a kernel always runs (100 %), 3 % of the SMs work.
    [idle] = _fired(inputs(sample(UTIL, 1.0), sample(SM, 0.03)))
    assert idle.key == gpu_key("GpuIdle")  # the key GpuIdle always had: no basis label
    assert idle.value == 0.03
    assert idle.annotations["basis"] == "sm_active"
    assert idle.annotations["activity"] == "SM activity 3% (GPM/DCGM)"
    assert idle.annotations["summary"].endswith("for 30m: SM activity 3% (GPM/DCGM) < 5%")


def test_without_an_sm_source_the_flag_decides_and_is_named() -> None:
    [idle] = _fired(inputs(sample(UTIL, 0.02)))
    assert idle.key == gpu_key("GpuIdle")
    assert idle.annotations["basis"] == "utilization_flag"
    assert idle.annotations["activity"] == "utilization 2% (NVML busy flag)"
    # The flag's 100 % is never idle, and SM activity is never borrowed from it.
    assert _fired(inputs(sample(UTIL, 1.0))) == []


def test_sm_activity_wins_over_the_flag_both_ways() -> None:
    # The flag covers the driver's last sample period, GPM the whole interval: a burst early
    # in the tick shows 2 % on the flag and 50 % of SMs. SM activity decides: busy.
    assert _fired(inputs(sample(UTIL, 0.02), sample(SM, 0.5))) == []


def test_sm_activity_of_another_gpu_or_of_a_mig_instance_is_not_this_gpus() -> None:
    other = sample(SM, 0.01, **{**GPU_LABELS, "gpu_uuid": "GPU-bbbb", "gpu_index": "1"})
    mig = sample(SM, 0.01, **GPU_LABELS, mig_instance="1/0")
    assert _fired(inputs(sample(UTIL, 1.0), other, mig)) == []  # GPU-bbbb is not billed


def test_an_sm_sample_alone_is_enough() -> None:
    # dcgm-exporter with DCGM_FI_PROF_SM_ACTIVE but without DCGM_FI_DEV_GPU_UTIL.
    [idle] = _fired(inputs(sample(SM, 0.0)))
    assert idle.key == gpu_key("GpuIdle") and idle.annotations["basis"] == "sm_active"


def test_sm_active_below_is_its_own_threshold_and_is_validated() -> None:
    rules, problems = apply_overrides(DEFAULT_RULES, {"GpuIdle": {"sm_active_below": 0.2}})
    assert problems == []
    data = inputs(sample(UTIL, 1.0), sample(SM, 0.1))
    assert _fired(data) == []  # 10 % of SMs is not idle at the default 5 %
    found, _ = conditions(rules, data)
    assert [c.annotations["basis"] for c in found if c.key.rule == "GpuIdle"] == ["sm_active"]
    _, problems = apply_overrides(DEFAULT_RULES, {"GpuIdle": {"sm_active_below": 5}})
    assert problems == [
        "alerts.rules.GpuIdle.sm_active_below: must be a ratio from 0 to 1, got 5;"
        " did you mean 0.05?"
    ]


def test_the_first_round_waits_rather_than_judge_a_busy_flag_without_gpm() -> None:
    first = inputs(sample(UTIL, 1.0), started_at=inputs().now)
    found, evaluated = conditions(DEFAULT_RULES, first)
    assert "GpuIdle" not in evaluated  # its alerts keep their state for this one round
    # An idle flag, an SM sample already there (DCGM), or any later round: judged at once.
    assert len(_fired(replace(first, latest=(*first.latest, sample(SM, 0.03))))) == 1
    assert len(_fired(inputs(sample(UTIL, 0.0), started_at=first.now))) == 1
    assert _fired(inputs(sample(UTIL, 1.0))) == []


def _fired(data: AlertInputs) -> list[Condition]:
    found, evaluated = conditions(DEFAULT_RULES, data)
    assert "GpuIdle" in evaluated
    return [c for c in found if c.key.rule == "GpuIdle"]


# -- end to end: the App, the fake NVML with GPM, a loopback Slack ---------------------------

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
STEP = timedelta(seconds=10)
GPU = "GPU-00000000-0000-0000-0000-00000000aaaa"
HOOK = "/services/T1/B1/hooksecret"


def hardware(util: int, sm_active: int) -> FakeNvmlConfig:
    return FakeNvmlConfig(gpus=(FakeGpu(uuid=GPU, util=util, gpm=FakeGpm(sm_active=sm_active)),))


@dataclass
class Box:
    """One billed GPU, no engine (no warm-up), ticked every STEP on the simulated clock."""

    config_file: Path
    env: dict[str, str]
    sink: Loopback
    now: datetime = T0
    arrivals: list[datetime] = field(default_factory=list)
    alerts: dict[tuple[str, str], float] = field(default_factory=dict)  # /metrics' count
    app: App = field(init=False)

    def __post_init__(self) -> None:
        self.app = App.open(load_config(str(self.config_file), self.env))

    def restart(self) -> None:
        """A new daemon process over the same database: GPM starts again from no sample."""
        self.app.close()
        self.__post_init__()

    def run(self, duration: timedelta) -> None:
        end = self.now + duration
        while self.now < end:
            done = self.app.tick(self.now)
            self.alerts = {
                (s.labels["rule"], s.labels["state"]): s.value
                for s in done.derived
                if s.metric == "gpuwatch_alerts"
            }
            before = len(self.sink.requests)
            self.app.deliver(self.now)
            self.arrivals += [self.now] * (len(self.sink.requests) - before)
            self.now += STEP

    def idle_texts(self) -> list[tuple[datetime, str]]:
        texts = [r.json()["text"] for r in self.sink.requests]
        return [(t, x) for t, x in zip(self.arrivals, texts, strict=True) if "GpuIdle" in x]


@pytest.fixture
def box(
    tmp_path: Path,
    db_url: str,
    fake_nvml: FakeNvml,
    loopback: Loopback,  # noqa: F811
) -> Iterator[Box]:
    loopback.reply(HOOK, Reply(200, "ok"))
    config_file = tmp_path / "gpuwatch.toml"
    config_file.write_text(
        f'host = "box"\ndatabase_url = "{db_url}"\n'
        f'[[rates]]\ngpu = "{GPU}"\nusd_per_hour = 3.60\n'
        '[notify.slack]\nwebhook_url_env = "HOOK"\n'
    )
    upgrade_database(db_url)
    opened = Box(config_file, {"HOOK": loopback.url + HOOK}, loopback)
    try:
        yield opened
    finally:
        opened.app.close()


def test_busy_by_the_flag_idle_by_its_sms_fires_survives_a_restart_and_resolves_once(
    box: Box, fake_nvml: FakeNvml
) -> None:
    fake_nvml.write(hardware(util=100, sm_active=3))
    box.run(timedelta(minutes=35))
    [(fired_at, text)] = box.idle_texts()
    # GPM's gauge arrives on the second round; pending from there, then 30 min.
    began = T0 + STEP
    assert began + timedelta(minutes=30) <= fired_at <= began + timedelta(minutes=30) + STEP
    assert "SM activity 3% (GPM/DCGM) for 30m" in text and "$1.80 burnt at $3.60/h" in text

    # A restart: its first round has the flag's 100 % and no SM activity yet. The alert is
    # neither resolved nor fired again (nor repeated: repeat_interval is 4 h).
    assert box.alerts == {("GpuIdle", "firing"): 1.0}
    box.restart()
    box.run(STEP)
    assert box.alerts == {("GpuIdle", "firing"): 1.0}
    box.run(timedelta(minutes=5))
    assert len(box.idle_texts()) == 1 and box.alerts == {("GpuIdle", "firing"): 1.0}

    fake_nvml.write(hardware(util=100, sm_active=60))  # real work now
    box.run(timedelta(minutes=2))
    texts = [x for _, x in box.idle_texts()]
    assert len(texts) == 2 and texts[1].startswith("[RESOLVED")


def test_the_basis_changing_under_a_pending_alert_keeps_its_start(
    box: Box, fake_nvml: FakeNvml
) -> None:
    # Idle by the flag from the first round, by SM activity from the second: one alert,
    # pending since the first round, firing 30 min after it, and named by its SM activity.
    fake_nvml.write(hardware(util=2, sm_active=3))
    box.run(timedelta(minutes=32))
    [(fired_at, text)] = box.idle_texts()
    assert T0 + timedelta(minutes=30) <= fired_at <= T0 + timedelta(minutes=30) + STEP
    assert "SM activity 3% (GPM/DCGM)" in text


def test_a_mig_instances_sm_activity_does_not_make_its_gpu_idle(
    box: Box, fake_nvml: FakeNvml
) -> None:
    # MIG enabled, no whole-GPU GPM: the instance's idle SMs say nothing of the GPU's others.
    mig = FakeMig(slot=0, uuid="MIG-aaaa", gpm=FakeGpm(sm_active=0))
    gpu = FakeGpu(uuid=GPU, util=100, mig_mode=1, migs=(mig,))
    fake_nvml.write(FakeNvmlConfig(gpus=(gpu,)))
    box.run(timedelta(minutes=35))
    assert box.idle_texts() == []
