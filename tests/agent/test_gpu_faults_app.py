"""GPU faults end to end: scripted in the fake libnvidia-ml, read by the real pynvml
through the App's tick, evaluated, and delivered to a loopback Slack. An Xid 79 (the GPU fell off
the bus), a pending row remap, and the lost GPU each give their alert."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest

from agent.config.settings import load_config
from agent.daemon.app import App
from agent.sim.server import EngineServer
from agent.sim.traffic import Traffic
from agent.storage.db import upgrade_database
from tests.agent.test_alerting_app import GPU, HOOK, T0, Box, box, hardware  # noqa: F401
from tests.alerts.notifiers.conftest import Loopback, Reply, loopback  # noqa: F401
from tests.conftest import FakeNvml
from tests.fakenvml.build import FakeNvmlConfig, FakeRemap, FakeXid

BUS = "00000000:3B:00.0"


def busy(**gpu: object) -> FakeNvmlConfig:
    """The box's one GPU, busy (so GpuIdle stays out of the way), changed as told."""
    config = hardware(util=85)
    gpu = {"bus": BUS, **gpu}
    return replace(config, gpus=(replace(config.gpus[0], **gpu),))  # type: ignore[arg-type]


def firing(box: Box, rule: str) -> list[str]:  # noqa: F811 - the fixture's name
    return [t for t in box.texts() if t.startswith("[FIRING") and rule in t]


def test_an_xid_79_pages_as_a_hardware_error_and_the_gpu_as_lost(
    box: Box,  # noqa: F811
    fake_nvml: FakeNvml,
) -> None:
    fake_nvml.write(busy())
    box.run(timedelta(minutes=1))  # NVML's event set is created and the GPU registered
    assert firing(box, "GpuHardwareErrors") == []

    fell = busy(lost=True)  # Xid 79, and NVML calls it lost from then on
    fake_nvml.write(replace(fell, xids=(FakeXid(gpu=0, code=79),)))
    box.run(timedelta(minutes=2))

    [xid] = firing(box, "GpuHardwareErrors")
    assert "xid=79" in xid and GPU in xid and "Xid 79, GPU has fallen off the bus" in xid
    [lost] = firing(box, "GpuLost")
    assert f"{GPU} at PCI {BUS} no longer answers" in lost  # as last read, before the fall
    assert firing(box, "CollectorDown") == []  # NVML still answers: the host is not blind


def test_a_pending_row_remap_gives_its_alert_and_resolves_after_the_reset(
    box: Box,  # noqa: F811
    fake_nvml: FakeNvml,
) -> None:
    fake_nvml.write(busy(remapped_rows=FakeRemap()))
    box.run(timedelta(minutes=1))
    assert firing(box, "GpuHardwareErrors") == []

    fake_nvml.write(busy(remapped_rows=FakeRemap(uncorrectable=1, pending=True)))
    box.run(timedelta(minutes=2))
    [remap] = firing(box, "GpuHardwareErrors")
    assert "row_remap=pending" in remap and remap.endswith(": row remap pending")

    fake_nvml.write(busy(remapped_rows=FakeRemap(uncorrectable=1)))  # the reset applied it
    box.run(timedelta(minutes=6))
    assert [t for t in box.texts() if t.startswith("[RESOLVED") and "row_remap" in t]


# -- dcgm-exporter as the GPU source ---------------------------------------------------------


@pytest.mark.parametrize("db_url", ["sqlite"], indirect=True)
def test_with_nvml_disabled_dcgm_exporter_feeds_gpu_hot_and_a_fatal_xid(
    tmp_path: Path,
    db_url: str,
    loopback: Loopback,  # noqa: F811
) -> None:
    loopback.reply(HOOK, Reply(200, "ok"))
    traffic = Traffic(gpus=1)
    server = EngineServer("dcgm", traffic).start()
    config_file = tmp_path / "gpuwatch.toml"
    config_file.write_text(
        f'host = "box"\ndatabase_url = "{db_url}"\n[collectors.nvml]\nenabled = false\n'
        f'[[targets]]\nname = "dcgm"\nurl = "{server.url}"\nengine = "dcgm"\n'
        '[notify.slack]\nwebhook_url_env = "HOOK"\n'
    )
    upgrade_database(db_url)
    app = App.open(load_config(str(config_file), {"HOOK": loopback.url + HOOK}))
    dcgm_box = Box(app, server, traffic, loopback, T0)
    try:
        dcgm_box.run(timedelta(minutes=1))
        traffic.set_gpu(0, gpu_temp_c=95, xid=79)
        dcgm_box.run(timedelta(minutes=3))
    finally:
        app.close()
        server.stop()

    assert firing(dcgm_box, "GpuHot")  # evaluated although NVML is not collecting at all
    [xid] = firing(dcgm_box, "GpuHardwareErrors")
    assert "xid=79" in xid
    assert firing(dcgm_box, "CollectorDown") == []
