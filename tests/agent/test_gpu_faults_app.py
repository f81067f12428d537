"""GPU faults end to end (issue 14): scripted in the fake libnvidia-ml, read by the real pynvml
through the App's tick, evaluated, and delivered to a loopback Slack. An Xid 79 (the GPU fell off
the bus), a pending row remap, and the lost GPU each give their alert."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from tests.agent.test_alerting_app import GPU, Box, box, hardware  # noqa: F401
from tests.alerts.notifiers.conftest import loopback  # noqa: F401
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
