"""The daemon's alerting end to end, on the simulated clock: real pynvml over the fake
libnvidia-ml, a vLLM simulator over HTTP, the App's tick (collect, store, evaluate, queue) and
delivery to a loopback Slack through slack_sdk, or to Debian's real Alertmanager."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select

from agent.collect.runner import Round
from agent.config.settings import load_config
from agent.daemon.app import App
from agent.sim.server import EngineServer
from agent.sim.traffic import Traffic
from agent.storage.db import upgrade_database
from migrations.schema import alert_history
from tests.alerts.notifiers.conftest import Loopback, Reply, loopback  # noqa: F401
from tests.conftest import FakeNvml
from tests.fakenvml.build import FakeGpu, FakeNvmlConfig, FakeProcess, GiB
from tests.real_alertmanager import alertmanager, listed  # noqa: F401

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
STEP = timedelta(seconds=10)
GPU = "GPU-00000000-0000-0000-0000-00000000aaaa"
HOOK = "/services/T1/B1/hooksecret"
MODEL = "llama-8b"


def hardware(util: int) -> FakeNvmlConfig:
    return FakeNvmlConfig(
        gpus=(FakeGpu(uuid=GPU, util=util, used=60 * GiB),),
        processes=(FakeProcess(gpu=0, pid=100, mem=60 * GiB),),
    )


@dataclass
class Box:
    """One GPU box: its App, its engine, and the simulated clock; ``arrivals`` are the
    simulated times of each message the receiver got."""

    app: App
    engine: EngineServer
    traffic: Traffic
    sink: Loopback | None
    now: datetime
    arrivals: list[datetime] = field(default_factory=list)
    requests_per_tick: int = 0  # an idle GPU serves nothing
    last_round: Round | None = None

    def run(self, duration: timedelta) -> None:
        end = self.now + duration
        while self.now < end:
            if self.requests_per_tick:
                self.traffic.serve(self.requests_per_tick)
            self.last_round = self.app.tick(self.now)
            before = len(self.sink.requests) if self.sink else 0
            self.app.deliver(self.now)
            if self.sink is not None:
                self.arrivals += [self.now] * (len(self.sink.requests) - before)
            self.now += STEP

    def texts(self) -> list[str]:
        assert self.sink is not None
        return [r.json()["text"] for r in self.sink.requests]


def open_box(
    tmp_path: Path, db_url: str, notify: str, env: dict[str, str], start: datetime
) -> Iterator[Box]:
    traffic = Traffic(models=(MODEL,))
    server = EngineServer("vllm-0.33", traffic).start()
    config_file = tmp_path / "gpuwatch.toml"
    config_file.write_text(
        f'host = "box"\ndatabase_url = "{db_url}"\n'
        f'[[rates]]\ngpu = "{GPU}"\nusd_per_hour = 3.60\n'
        f'[[targets]]\nname = "llm"\nurl = "{server.url}"\ngpus = ["0"]\n' + notify
    )
    upgrade_database(db_url)
    config = load_config(str(config_file), env)
    app = App.open(config)
    try:
        yield Box(app, server, traffic, None, start)
    finally:
        app.close()
        server.stop()


@pytest.fixture
def box(
    tmp_path: Path,
    db_url: str,
    fake_nvml: FakeNvml,
    loopback: Loopback,  # noqa: F811
) -> Iterator[Box]:
    loopback.reply(HOOK, Reply(200, "ok"))
    fake_nvml.write(hardware(util=0))
    notify = '[notify.slack]\nwebhook_url_env = "HOOK"\n'
    env = {"HOOK": loopback.url + HOOK}
    for opened in open_box(tmp_path, db_url, notify, env, T0):
        opened.sink = loopback
        yield opened


def test_an_idle_gpu_fires_after_warm_up_and_for_with_its_dollars_then_resolves_once(
    box: Box, fake_nvml: FakeNvml
) -> None:
    box.engine.mode = "500"  # the model is loading: the engine does not answer yet
    box.run(timedelta(minutes=5))
    box.engine.mode = "ok"
    up_at = box.now
    box.run(timedelta(minutes=45))
    # TargetDown needs 2 min of down: the 5 min of loading fired it, and it resolved once up.
    idle = [
        (t, text) for t, text in zip(box.arrivals, box.texts(), strict=True) if "GpuIdle" in text
    ]
    ((fired_at, text),) = idle
    # Idle only counts once the engine has been up for the warm-up (10 min), then for 30 min.
    began = up_at + timedelta(minutes=10)
    assert began + timedelta(minutes=30) <= fired_at <= began + timedelta(minutes=30) + STEP
    assert "for 30m" in text and "$1.80 burnt at $3.60/h" in text
    assert box.last_round is not None  # and /metrics counts it
    shown = {(s.labels["rule"], s.labels["state"]): s.value
             for s in box.last_round.derived if s.metric == "gpuwatch_alerts"}  # fmt: skip
    assert shown == {("GpuIdle", "firing"): 1.0}

    fake_nvml.write(hardware(util=85))
    box.run(timedelta(minutes=10))
    resolved = [t for t in box.texts() if "GpuIdle" in t and t.startswith("[RESOLVED")]
    assert len(resolved) == 1
    assert sum("GpuIdle" in t for t in box.texts()) == 2


def test_a_blind_collector_is_collector_down_and_never_gpu_idle(
    box: Box, fake_nvml: FakeNvml
) -> None:
    box.run(timedelta(minutes=25))  # idle, GpuIdle pending (warm-up, then 30 min)
    fake_nvml.remove()  # the driver goes away: NVML answers nothing
    blind_at = box.now
    box.run(timedelta(minutes=20))  # past minute 40, when GpuIdle would fire were blind idle
    texts = box.texts()
    assert not any("GpuIdle" in t for t in texts)
    (down_at,) = [a for a, t in zip(box.arrivals, texts, strict=True) if "CollectorDown" in t]
    assert blind_at + 2 * STEP <= down_at <= blind_at + 3 * STEP  # three missed collections
    assert "CollectorDown on box: Collector blind (collector=nvml, host=box)" in texts[0]


def test_a_growing_queue_on_a_full_kv_cache_asks_for_a_replica(box: Box) -> None:
    box.requests_per_tick = 5
    box.run(timedelta(minutes=15))  # a healthy baseline
    for minute in range(15):
        box.traffic.set_gauges(model=MODEL, waiting=20 + 4 * minute, kv_usage=0.97)
        box.run(timedelta(minutes=1))
    queue = [t for t in box.texts() if "QueueGrowing" in t]
    assert queue and "add a replica" in queue[0]


# -- Debian's real Alertmanager --------------------------------------------------------------


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_the_real_alertmanager_shows_the_firing_alert_then_its_resolution(
    tmp_path: Path,
    db_url: str,
    fake_nvml: FakeNvml,
    alertmanager: str,  # noqa: F811
) -> None:
    # Alertmanager judges endsAt against its own clock, so the simulated clock runs just
    # behind the real one.
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=3)
    notify = f'[notify.alertmanager]\nurl = "{alertmanager}"\n'
    labels = {"alertname": "CollectorDown", "host": "box", "collector": "nvml"}
    for box in open_box(tmp_path, db_url, notify, {}, start):
        box.run(timedelta(seconds=60))  # no driver loaded: NVML is blind from the start
        (shown,) = [a for a in listed(alertmanager) if _has(a, labels)]
        assert shown["status"]["state"] == "active"
        assert shown["labels"]["severity"] == "critical"

        fake_nvml.write(hardware(util=50))
        box.run(timedelta(seconds=30))
        assert [a for a in listed(alertmanager) if _has(a, labels)] == []


def _has(alert: dict[str, object], labels: dict[str, str]) -> bool:
    shown = alert["labels"]
    assert isinstance(shown, dict)
    return all(shown.get(k) == v for k, v in labels.items())


# -- a failing target next to a hot GPU; a restart while NVML is missing -------------------


def hot(celsius: int) -> FakeNvmlConfig:
    return FakeNvmlConfig(
        gpus=(FakeGpu(uuid=GPU, util=85, used=60 * GiB, temp_c=celsius),),
        processes=(FakeProcess(gpu=0, pid=100, mem=60 * GiB),),
    )


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_a_failing_target_never_mutes_a_hot_gpu_in_slack_or_alertmanager(
    tmp_path: Path,
    db_url: str,
    fake_nvml: FakeNvml,
    loopback: Loopback,  # noqa: F811
    alertmanager: str,  # noqa: F811
) -> None:
    loopback.reply(HOOK, Reply(200, "ok"))
    fake_nvml.write(hot(95))
    notify = (
        f'[notify.slack]\nwebhook_url_env = "HOOK"\n[notify.alertmanager]\nurl = "{alertmanager}"\n'
    )
    start = datetime.now(UTC).replace(microsecond=0) - timedelta(minutes=8)
    for box in open_box(tmp_path, db_url, notify, {"HOOK": loopback.url + HOOK}, start):
        box.sink = loopback
        box.engine.mode = "500"  # the engine is being redeployed, for 6 minutes
        box.run(timedelta(minutes=6))
        texts = box.texts()
        assert any(t.startswith("[FIRING") and "GpuHot" in t for t in texts)
        assert not any("CollectorDown" in t for t in texts)  # a target is not a blind host
        (down_at,) = [a for a, t in zip(box.arrivals, texts, strict=True) if "TargetDown" in t]
        assert down_at >= start + timedelta(minutes=5)  # only after its `for`
        hot_in_am = [a for a in listed(alertmanager) if _has(a, {"alertname": "GpuHot"})]
        assert hot_in_am and hot_in_am[0]["status"]["state"] == "active"  # not inhibited


def test_a_restart_while_nvml_is_missing_resolves_nothing(
    tmp_path: Path,
    db_url: str,
    fake_nvml: FakeNvml,  # nothing written: NVML is missing throughout
    loopback: Loopback,  # noqa: F811
) -> None:
    loopback.reply(HOOK, Reply(200, "ok"))
    notify = '[notify.slack]\nwebhook_url_env = "HOOK"\n'
    env = {"HOOK": loopback.url + HOOK}
    now = T0
    for box in open_box(tmp_path, db_url, notify, env, now):
        box.sink = loopback
        box.run(timedelta(minutes=2))
        now = box.now
    assert sum("CollectorDown" in t for t in box.texts()) == 1
    for box in open_box(tmp_path, db_url, notify, env, now + timedelta(seconds=20)):
        box.sink = loopback
        box.run(timedelta(minutes=6))  # past the group interval a resolution would wait for
        texts = box.texts()
        with box.app.engine.connect() as conn:
            history = conn.execute(select(alert_history.c.rule, alert_history.c.resolved_at))
            rows = [tuple(r) for r in history]
    assert [t[:9] for t in texts if "CollectorDown" in t] == ["[FIRING:1"]  # nothing new
    assert rows == [("CollectorDown", None)]  # one episode, still open: no false resolution
