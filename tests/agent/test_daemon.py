"""`gpuwatch run` as a real process: readiness, /metrics, reload and a clean, fast stop."""

from __future__ import annotations

import logging
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest

from agent.collect.clock import utc_now
from agent.config.settings import load_config
from agent.daemon.service import Daemon
from tests.agent.daemon_harness import RunningDaemon, free_port, start_daemon
from tests.fakenvml.build import FakeGpu, FakeNvmlConfig, FakeProcess, GiB
from tests.fakenvml.build import write_config as write_hardware


def write_config(path: Path, port: int, db: Path, interval: float = 1) -> Path:
    path.write_text(
        f'host = "test-box"\ndatabase_url = "sqlite:///{db}"\n'
        f'[daemon]\ninterval_seconds = {interval}\nmetrics_listen = "127.0.0.1:{port}"\n'
    )
    return path


@pytest.fixture
def no_gpu_daemon(tmp_path: Path) -> Iterator[RunningDaemon]:
    port = free_port()
    config = write_config(tmp_path / "gpuwatch.toml", port, tmp_path / "state" / "gw.db")
    daemon = start_daemon(config, tmp_path, port, env={})
    yield daemon
    daemon.kill()


def test_without_a_gpu_it_keeps_running_and_reports_nvml_failed(
    no_gpu_daemon: RunningDaemon,
) -> None:
    no_gpu_daemon.wait_for_notify("READY=1")
    no_gpu_daemon.wait_for_notify("WATCHDOG=1")  # alive, although blind
    text = no_gpu_daemon.wait_for_metric('gpuwatch_collector_success{collector="nvml"')
    assert 'gpuwatch_collector_success{collector="nvml",host="test-box"} 0.0' in text
    assert "gpuwatch_gpu_utilization_ratio" not in text  # blind is not idle: no fake zeros
    assert "gpuwatch_collector_last_success_timestamp_seconds" not in text
    assert no_gpu_daemon.proc.poll() is None
    log = no_gpu_daemon.log()
    assert log.count("collector nvml failed") == 1  # once, not once per tick
    code, seconds = no_gpu_daemon.stop()
    assert code == 0 and seconds < 5


def test_an_invalid_reload_keeps_the_old_config_and_says_why(
    no_gpu_daemon: RunningDaemon, tmp_path: Path
) -> None:
    no_gpu_daemon.wait_for_notify("READY=1")
    (tmp_path / "gpuwatch.toml").write_text("[daemon]\ninterval_seconds = 'often'\n")
    no_gpu_daemon.signal(signal.SIGHUP)
    no_gpu_daemon.wait_for_notify("RELOADING=1")
    no_gpu_daemon.wait_for_notify("READY=1")
    assert "reload failed, keeping the previous configuration" in no_gpu_daemon.log()
    assert "daemon.interval_seconds: expected a number" in no_gpu_daemon.log()
    assert "gpuwatch_collector_success" in no_gpu_daemon.metrics()  # still serving
    code, _ = no_gpu_daemon.stop()
    assert code == 0


@pytest.fixture
def gpu_daemon(tmp_path: Path, fake_nvml_dir: Path) -> Iterator[RunningDaemon]:
    port = free_port()
    config = write_config(tmp_path / "gpuwatch.toml", port, tmp_path / "state" / "gw.db")
    config.write_text(config.read_text() + '[[rates]]\ngpu = "*"\nusd_per_hour = 2.72\n')
    hardware = write_hardware(
        tmp_path / "hardware.txt",
        FakeNvmlConfig(
            gpus=(
                FakeGpu(uuid="GPU-aaaaaaaa-0000-0000-0000-000000000000", util=42),
                FakeGpu(uuid="GPU-bbbbbbbb-0000-0000-0000-000000000000", power_mw=None),
            ),
            processes=(FakeProcess(gpu=0, pid=777, mem=2 * GiB),),
        ),
    )
    env = {"LD_LIBRARY_PATH": str(fake_nvml_dir), "FAKE_NVML_CONFIG": str(hardware)}
    daemon = start_daemon(config, tmp_path, port, env=env)
    yield daemon
    daemon.kill()


def test_gpu_samples_are_served_under_canonical_names(gpu_daemon: RunningDaemon) -> None:
    text = gpu_daemon.wait_for_metric("gpuwatch_gpu_utilization_ratio")
    assert (
        'gpuwatch_gpu_utilization_ratio{gpu_index="0",'
        'gpu_uuid="GPU-aaaaaaaa-0000-0000-0000-000000000000",host="test-box"} 0.42'
    ) in text
    assert "# TYPE gpuwatch_gpu_energy_joules_total counter" in text
    assert text.count("gpuwatch_gpu_power_watts{") == 1  # not supported on GPU 1: absent
    assert 'gpuwatch_collector_success{collector="nvml",host="test-box"} 1.0' in text
    assert gpu_daemon.stop()[0] == 0


def test_cost_signals_are_served(gpu_daemon: RunningDaemon, tmp_path: Path) -> None:
    # The rate card prices each GPU now; the minute job publishes spend from the rollups.
    text = gpu_daemon.wait_for_metric('gpuwatch_spend_usd_total{host="test-box",source="metered"}')
    assert (
        'gpuwatch_gpu_hourly_cost_usd{gpu_index="1",'
        'gpu_uuid="GPU-bbbbbbbb-0000-0000-0000-000000000000",host="test-box"} 2.72'
    ) in text
    assert "# TYPE gpuwatch_idle_cost_usd_total counter" in text
    assert gpu_daemon.stop()[0] == 0


def test_metrics_pass_promtool_check(gpu_daemon: RunningDaemon) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (`make test` installs Debian's prometheus as root)")
    text = gpu_daemon.wait_for_metric("gpuwatch_gpu_process_memory_bytes")
    result = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_reload_applies_a_valid_config_in_process(tmp_path: Path) -> None:
    db = tmp_path / "gw.db"
    path = write_config(tmp_path / "gpuwatch.toml", 0, db, interval=10)
    path.write_text(
        path.read_text().replace('metrics_listen = "127.0.0.1:0"', 'metrics_listen = ""')
        + "[collectors.nvml]\nenabled = false\n"
    )
    daemon = Daemon(str(path), load_config(str(path)))
    path.write_text(path.read_text().replace("interval_seconds = 10", "interval_seconds = 30"))
    assert daemon.reload() is True
    assert daemon.config.daemon.interval_seconds == 30
    path.write_text("nonsense = [")
    assert daemon.reload() is False
    assert daemon.config.daemon.interval_seconds == 30
    daemon.app.close()


def test_a_tick_stuck_in_the_driver_stops_the_watchdog_pings(tmp_path: Path) -> None:
    path = tmp_path / "gpuwatch.toml"
    path.write_text(
        f'database_url = "sqlite:///{tmp_path / "gw.db"}"\n[daemon]\ninterval_seconds = 10\n'
        'metrics_listen = ""\n[collectors.nvml]\nenabled = false\n'
    )
    daemon = Daemon(str(path), load_config(str(path)))
    assert daemon.tick_stuck(1000.0) is False  # idle
    daemon._tick_started = 1000.0
    assert daemon.tick_stuck(1059.0) is False  # slow, but within max(60 s, 3 intervals)
    assert daemon.tick_stuck(1061.0) is True
    assert daemon.ticking(1061.0) is False
    daemon.app.close()


def test_ticks_that_stop_happening_stop_the_watchdog_pings(tmp_path: Path) -> None:
    # A stalled ticker (whatever the cause) must get the service restarted by WatchdogSec.
    path = tmp_path / "gpuwatch.toml"
    path.write_text(
        f'database_url = "sqlite:///{tmp_path / "gw.db"}"\n[daemon]\ninterval_seconds = 10\n'
        'metrics_listen = ""\n[collectors.nvml]\nenabled = false\n'
    )
    daemon = Daemon(str(path), load_config(str(path)))
    assert daemon.ticking(1000.0) is False  # no tick yet
    daemon.ticker.last_started = 1000.0  # a tick started and finished
    assert daemon.ticking(1050.0) is True
    assert daemon.ticking(1061.0) is False  # none for max(60 s, 3 intervals)
    daemon.app.close()


def test_the_daemon_ticks_through_wall_clock_steps_on_its_real_ticker(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The real Daemon, its real ticker and tick, 1 s ticks on real time; only the wall clock
    # is the test's: an NTP step back of an hour, then a VM resumed two hours later.
    path = tmp_path / "gpuwatch.toml"
    path.write_text(
        f'database_url = "sqlite:///{tmp_path / "gw.db"}"\n[daemon]\ninterval_seconds = 1\n'
        'metrics_listen = ""\n'  # NVML, there or not: its run is stored every tick
    )
    offset = [timedelta(0)]
    daemon = Daemon(str(path), load_config(str(path)), clock=lambda: utc_now() + offset[0])
    started = utc_now()
    with caplog.at_level(logging.WARNING, logger="agent.daemon.ticker"):
        daemon.ticker.start()
        time.sleep(2.5)
        offset[0] = timedelta(hours=-1)
        time.sleep(2.5)
        offset[0] = timedelta(hours=1)
        time.sleep(2.5)
        daemon.ticker.stop(timeout=5)
    ticks = sorted(r["ts"] for r in daemon.app.store.collector_runs())
    daemon.app.close()

    back = [t for t in ticks if t < started - timedelta(minutes=30)]
    ahead = [t for t in ticks if t > started + timedelta(minutes=30)]
    assert len(back) in (2, 3, 4) and len(ahead) in (2, 3, 4), ticks  # neither stopped nor bunched
    assert 7 <= len(ticks) <= 9, ticks
    steps = [r.getMessage()[:32] for r in caplog.records if r.name == "agent.daemon.ticker"]
    assert steps == ["the wall clock stepped -3600 s; ", "the wall clock stepped +7200 s; "]


def test_engine_histograms_are_exposed_as_histograms_and_pass_promtool(tmp_path: Path) -> None:
    from agent.sim.server import EngineServer
    from agent.sim.traffic import Traffic

    traffic = Traffic(models=("llama-8b",), engines=2)
    traffic.serve(12, engine="1")
    port = free_port()
    config = write_config(tmp_path / "gpuwatch.toml", port, tmp_path / "state" / "gw.db")
    with EngineServer("vllm-0.33", traffic) as engine:
        target = f'[[targets]]\nname = "llama"\nurl = "{engine.url}"\n'
        config.write_text(config.read_text() + "[collectors.nvml]\nenabled = false\n" + target)
        daemon = start_daemon(config, tmp_path, port, env={})
        try:
            text = daemon.wait_for_metric("gpuwatch_engine_ttft_seconds_bucket")
        finally:
            daemon.kill()
    assert "# TYPE gpuwatch_engine_ttft_seconds histogram" in text
    assert "# TYPE gpuwatch_engine_generation_tokens_total counter" in text
    assert 'gpuwatch_target_up{host="test-box",target="llama"} 1.0' in text
    assert "_created" not in text
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (`make test` installs Debian's prometheus as root)")
    result = subprocess.run(
        [promtool, "check", "metrics"], input=text, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture
def gpm_daemon(tmp_path: Path, fake_nvml_dir: Path) -> Iterator[RunningDaemon]:
    """GPU 0 busy by NVML's flag with a quarter of its SMs active (GPM); GPU 1 without GPM."""
    from tests.fakenvml.build import FakeGpm

    port = free_port()
    config = write_config(tmp_path / "gpuwatch.toml", port, tmp_path / "state" / "gw.db")
    hardware = write_hardware(
        tmp_path / "hardware.txt",
        FakeNvmlConfig(
            gpus=(
                FakeGpu(uuid="GPU-aaaaaaaa-0000-0000-0000-000000000000", util=100,
                        gpm=FakeGpm(sm_active=25, sm_occupancy=10, tensor=5, dram=30)),
                FakeGpu(uuid="GPU-bbbbbbbb-0000-0000-0000-000000000000", util=100),
            ),
        ),
    )  # fmt: skip
    env = {"LD_LIBRARY_PATH": str(fake_nvml_dir), "FAKE_NVML_CONFIG": str(hardware)}
    daemon = start_daemon(config, tmp_path, port, env=env)
    yield daemon
    daemon.kill()


def test_sm_activity_is_served_beside_the_busy_flag(gpm_daemon: RunningDaemon) -> None:
    # GPM compares two samples: the gauge appears from the second tick on.
    text = gpm_daemon.wait_for_metric("gpuwatch_gpu_sm_active_ratio{")
    busy = 'gpu_index="0",gpu_uuid="GPU-aaaaaaaa-0000-0000-0000-000000000000",host="test-box"}'
    assert f"gpuwatch_gpu_utilization_ratio{{{busy} 1.0" in text
    assert f"gpuwatch_gpu_sm_active_ratio{{{busy} 0.25" in text
    assert f"gpuwatch_gpu_tensor_active_ratio{{{busy} 0.05" in text
    assert "# TYPE gpuwatch_gpu_sm_active_ratio gauge" in text
    # No GPM on GPU 1: no SM activity at all, never its 100 % flag standing in.
    assert text.count("gpuwatch_gpu_sm_active_ratio{") == 1
    assert gpm_daemon.stop()[0] == 0
