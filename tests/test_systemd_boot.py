"""gpuwatch.service under a real systemd: Debian 12 (systemd 252) booted with systemd-nspawn.

`make test-systemd` (slow; .ci/run calls it). gpuwatch is installed in the container as
systemd/README.md says, over the fake libnvidia-ml, and tests/systemd_boot/inside.py records
what the unit does: started and sandboxed, /metrics on loopback, `systemctl reload`, the
watchdog against a stuck NVML call, `systemctl stop`, the journal. The tests here judge that
record. Needs root and systemd-nspawn + debootstrap (the make target installs them as root);
skips otherwise, saying so. The Debian root is cached (tests/systemd_boot/host.py).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path
from typing import Any

import pynvml
import pytest

from tests.conftest import FakeNvml
from tests.fakenvml.build import LIB_NAME, FakeGpu, FakeNvmlConfig, write_config
from tests.systemd_boot import host
from tests.test_systemd import MAX_EXPOSURE

UNIT_DIR = host.REPO / "systemd"
GPU = FakeGpu(uuid="GPU-boot-0")
STUCK_CALL = "nvmlDeviceGetUtilizationRates"  # read on every tick
BOOT_TIMEOUT = 420  # seconds; a passing boot takes about 2 minutes, 75 s of it the watchdog
CONFIG = 'host = "{host}"\n\n[daemon]\ninterval_seconds = 2\n'
# Only for the test: where the fake NVML reads its "hardware", and a shorter WatchdogSec. The
# daemon pings every WatchdogSec/2 and stops pinging once a tick has been stuck for
# max(60 s, 3 intervals) (agent/daemon/service.py); WatchdogSec only sets how long systemd
# waits after the last ping, so 10 s instead of 60 s saves 50 s and changes nothing else.
DROPIN = """[Service]
Environment=FAKE_NVML_CONFIG=/etc/gpuwatch/fakenvml.conf
WatchdogSec=10s
"""


def test_fake_nvml_hang_blocks_the_named_call(fake_nvml: FakeNvml) -> None:
    """The fake's `hang` directive, which the watchdog check relies on: only that call blocks."""
    fake_nvml.write(FakeNvmlConfig(gpus=(GPU,), hang={STUCK_CALL: 1}))
    pynvml.nvmlInit()
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        started = time.monotonic()
        assert pynvml.nvmlDeviceGetPowerUsage(handle) == GPU.power_mw
        assert time.monotonic() - started < 0.5
        started = time.monotonic()
        assert pynvml.nvmlDeviceGetUtilizationRates(handle).gpu == GPU.util
        assert time.monotonic() - started >= 1.0
    finally:
        pynvml.nvmlShutdown()


def _prepare_shared(shared: Path) -> None:
    """What the container sees under /gpuwatch-test (the wheelhouse is already there)."""
    src = shared / "src"  # the install block's working folder: systemd/... and gpuwatch.toml
    (src / "systemd").mkdir(parents=True)
    for name in ("gpuwatch.service", "gpuwatch.env.example"):
        shutil.copy(UNIT_DIR / name, src / "systemd" / name)
    (src / "gpuwatch.toml").write_text(CONFIG.format(host="boot-before"))
    (shared / "gpuwatch-reloaded.toml").write_text(CONFIG.format(host="boot-after"))
    write_config(shared / "fakenvml.conf", FakeNvmlConfig(gpus=(GPU,)))
    # An hour: the call never comes back before the watchdog ends the process.
    hung = FakeNvmlConfig(gpus=(GPU,), hang={STUCK_CALL: 3600})
    write_config(shared / "fakenvml-hang.conf", hung)
    (shared / "test-dropin.conf").write_text(DROPIN)
    (shared / "install.sh").write_text(host.install_block(UNIT_DIR / "README.md"))
    shutil.copy(Path(host.__file__).with_name("inside.py"), shared / "inside.py")


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root (systemd-nspawn boots a container); run `make test-systemd` as root"
    missing = [t for t in ("systemd-nspawn", "debootstrap") if shutil.which(t) is None]
    if missing:
        tools = " and ".join(missing)
        return f"{tools} not installed (apt-get install systemd-container debootstrap)"
    return None


@pytest.fixture(scope="module")
def booted(
    tmp_path_factory: pytest.TempPathFactory, fake_nvml_dir: Path, request: pytest.FixtureRequest
) -> dict[str, Any]:
    reason = _skip_reason()
    if reason:
        pytest.skip(reason)
    work = tmp_path_factory.mktemp("systemd-boot")
    shared = work / "shared"
    shared.mkdir()
    times: dict[str, float] = {}
    started = time.monotonic()
    cached, built = host.cached_rootfs(work / "debootstrap.log")
    times["rootfs (built)" if built else "rootfs (cached)"] = time.monotonic() - started
    started = time.monotonic()
    host.build_wheelhouse(shared)
    _prepare_shared(shared)
    root = host.copy_rootfs(cached, work / "root")
    host.add_driver(root)
    times["wheels and copy"] = time.monotonic() - started
    try:
        boot = host.boot(root, shared, fake_nvml_dir / LIB_NAME, BOOT_TIMEOUT)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    times["boot"] = boot.seconds
    (work / "console.log").write_text(boot.console)
    result_file = shared / "result.json"
    if not result_file.is_file():
        pytest.fail(f"no result from the container (rc {boot.returncode}):\n{boot.console[-4000:]}")
    result: dict[str, Any] = json.loads(result_file.read_text())
    result["boot"] = {"rc": boot.returncode, "console": boot.console[-4000:]}
    steps = ", ".join(f"{k} {v:.0f} s" for k, v in result["steps"].items())
    summary = ", ".join(f"{k} {v:.0f} s" for k, v in times.items())
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():  # the times, shown even when pytest captures
        request.config.get_terminal_writer().line(f"\nsystemd boot: {summary} ({steps}); {work}")
    return result


def _no_error(result: dict[str, Any]) -> None:
    assert "error" not in result, result["error"]


@pytest.mark.slow
def test_installs_on_a_minimal_debian_as_the_readme_says(booted: dict[str, Any]) -> None:
    install = booted["install"]
    assert install["rc"] == 0, install["output"]
    # The system is minimal for real: no procps, so no /bin/kill (which ExecReload once ran).
    assert booted["kill_binary"] == []
    assert booted["boot"]["rc"] == 0, booted["boot"]["console"]  # a clean poweroff
    _no_error(booted)


@pytest.mark.slow
def test_the_unit_is_active_and_serves_metrics_on_loopback(booted: dict[str, Any]) -> None:
    assert booted["running"]["ActiveState"] == "active", booted["running"]
    assert booted["metrics_first"] is not None, "no GPU series on 127.0.0.1:9877/metrics"
    assert any('gpu_uuid="GPU-boot-0"' in line for line in booted["metrics_sample"])
    assert booted["listening"] == ["127.0.0.1:9877"]


@pytest.mark.slow
def test_runs_as_gpuwatch_in_its_sandbox(booted: dict[str, Any]) -> None:
    status, ids = booted["proc_status"], booted["ids"]
    assert status["Uid"].split() == [ids["gpuwatch"]] * 4
    assert status["Gid"].split() == [ids["gpuwatch_gid"]] * 4
    assert ids["video"][0] in status["Groups"].split()  # SupplementaryGroups=video
    assert status["NoNewPrivs"] == "1"
    assert int(status["CapEff"], 16) == 0 and int(status["CapBnd"], 16) == 0
    assert status["Seccomp"] == "2"  # SystemCallFilter= in force
    writes = booted["writes"]
    for folder in ("/usr/lib", "/etc/gpuwatch", "/opt/gpuwatch"):
        assert "Read-only file system" in writes[folder], writes  # ProtectSystem=strict
    assert writes["/var/lib/gpuwatch"] == "ok", writes
    # systemd's own verdict on the running unit, drop-in included, under the offline test's bound.
    score = re.search(
        r"Overall exposure level for gpuwatch\.service: (\d+\.\d+)", booted["security"]
    )
    assert score and float(score.group(1)) <= MAX_EXPOSURE, booted["security"]
    state = booted["state_dir"]
    assert state["mode"] == "0o700" and state["owner"] == "gpuwatch:gpuwatch", state
    assert "gpuwatch.db" in state["files"], state


@pytest.mark.slow
def test_reload_applies_a_changed_config(booted: dict[str, Any]) -> None:
    reload = booted["reload"]
    assert reload["rc"] == 0, reload["stderr"]
    assert reload["applied_after"] is not None, "the new host name never reached /metrics"
    assert reload["pid_after"] == reload["pid_before"]  # reloaded, not restarted
    assert any("configuration reloaded from /etc/gpuwatch/gpuwatch.toml" in line
               for line in reload["journal"]), reload["journal"]  # fmt: skip


@pytest.mark.slow
def test_watchdog_restarts_a_daemon_stuck_in_nvml(booted: dict[str, Any]) -> None:
    watchdog = booted["watchdog"]
    assert watchdog["stuck_after"] is not None, "the hang directive did not stop the ticks"
    assert watchdog["seconds_to_restart"] is not None, watchdog
    assert int(watchdog["after"]["NRestarts"]) == int(watchdog["before"]["NRestarts"]) + 1
    assert any("Watchdog timeout" in line for line in watchdog["journal"]), watchdog["journal"]
    assert watchdog["metrics_again"] is not None, "no /metrics after the restart"


@pytest.mark.slow
def test_stop_is_clean(booted: dict[str, Any]) -> None:
    stop = booted["stop"]
    assert stop["rc"] == 0
    props = stop["props"]
    assert props["ActiveState"] == "inactive" and props["Result"] == "success", props
    assert props["ExecMainCode"] == "1" and props["ExecMainStatus"] == "0", props  # exited 0
    lines = stop["journal"]
    assert any("STOPPING=1" in line for line in lines), lines  # sd_notify, as PID 1 got it
    assert any("gpuwatch stopped" in line for line in lines), lines
    assert not any("SIGKILL" in line for line in lines), lines
    assert stop["seconds"] < 10, stop


@pytest.mark.slow
def test_the_journal_has_the_daemon_s_lines(booted: dict[str, Any]) -> None:
    lines = booted["journal_unit"]
    assert any("gpuwatch started: host boot-before" in line for line in lines), lines
    _no_error(booted)
