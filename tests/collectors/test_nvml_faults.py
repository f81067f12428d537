"""GPU faults through the real pynvml over the fake libnvidia-ml: remapped rows, Xid events from
NVML's event API (delivered once, only after registration), and GPUs lost while NVML answers."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import pynvml
import pytest

from collectors.base import CollectError
from tests.collectors.nvml_helpers import (
    BUSY,
    IDLE,
    NOW,
    UUID0,
    UUID1,
    MakeCollector,
    busy_series,
    counting,
    idle_series,
    key,
    labels,
    series,
    two_gpus,
)
from tests.conftest import FakeNvml
from tests.fakenvml.build import FakeNvmlConfig, FakeRemap, FakeXid

XID = "gpuwatch_gpu_xid_errors_total"
LOST = "gpuwatch_gpu_lost"


def remapped(rows: FakeRemap) -> FakeNvmlConfig:
    return FakeNvmlConfig(gpus=(IDLE, replace(BUSY, remapped_rows=rows)))


def fault_series(got: dict[tuple[str, tuple[tuple[str, str], ...]], float]) -> dict[str, float]:
    """The fault series of GPU 1 only, by metric and its one extra label."""
    out = {}
    for (metric, pairs), value in got.items():
        extra = {k: v for k, v in pairs if k not in ("host", "gpu_uuid", "gpu_index")}
        if dict(pairs).get("gpu_uuid") == UUID1 and ("remap" in metric or metric in (XID, LOST)):
            out[metric + "".join(f"{{{k}={v}}}" for k, v in sorted(extra.items()))] = value
    return out


# -- remapped rows ---------------------------------------------------------------------------


def test_a_pending_row_remap_is_reported_with_the_remapped_row_counts(
    fake_nvml: FakeNvml, make_collector: MakeCollector
) -> None:
    fake_nvml.write(remapped(FakeRemap(correctable=2, uncorrectable=1, pending=True)))

    got = fault_series(series(make_collector().collect(NOW)))

    assert got == {
        "gpuwatch_gpu_remapped_rows_total{cause=correctable}": 2.0,
        "gpuwatch_gpu_remapped_rows_total{cause=uncorrectable}": 1.0,
        "gpuwatch_gpu_row_remap_pending": 1.0,
        "gpuwatch_gpu_row_remap_failure": 0.0,
    }


def test_a_failed_row_remap_is_reported(fake_nvml: FakeNvml, make_collector: MakeCollector) -> None:
    fake_nvml.write(remapped(FakeRemap(uncorrectable=512, failure=True)))

    got = fault_series(series(make_collector().collect(NOW)))

    assert got["gpuwatch_gpu_row_remap_failure"] == 1.0
    assert got["gpuwatch_gpu_row_remap_pending"] == 0.0


def test_a_gpu_without_a_row_remapper_reports_no_remap_series(
    fake_nvml: FakeNvml, make_collector: MakeCollector
) -> None:
    fake_nvml.write(two_gpus())  # the fake's default: not supported, as before Ampere

    assert series(make_collector().collect(NOW)) == idle_series() | busy_series()


# -- Xid events ------------------------------------------------------------------------------


def test_an_xid_raised_after_registration_is_counted_once_by_code(
    fake_nvml: FakeNvml, make_collector: MakeCollector
) -> None:
    collector = make_collector()
    fake_nvml.write(two_gpus())
    collector.collect(NOW)  # the event set is created and the GPUs registered

    fake_nvml.write(two_gpus(xids=(FakeXid(gpu=1, code=79),)))
    first = fault_series(series(collector.collect(NOW)))
    again = fault_series(series(collector.collect(NOW)))  # delivered once, still counted
    fake_nvml.write(two_gpus(xids=(FakeXid(gpu=1, code=79), FakeXid(gpu=1, code=13))))
    later = fault_series(series(collector.collect(NOW)))

    assert first == again == {"gpuwatch_gpu_xid_errors_total{xid=79}": 1.0}
    assert later == {
        "gpuwatch_gpu_xid_errors_total{xid=13}": 1.0,
        "gpuwatch_gpu_xid_errors_total{xid=79}": 1.0,
    }


def test_an_xid_raised_before_the_daemon_watched_is_not_delivered(
    fake_nvml: FakeNvml, make_collector: MakeCollector
) -> None:
    fake_nvml.write(two_gpus(xids=(FakeXid(gpu=0, code=48),)))

    assert series(make_collector().collect(NOW)) == idle_series() | busy_series()


def test_xid_79_then_the_gpu_lost_gives_both_its_count_and_its_lost_series(
    fake_nvml: FakeNvml, make_collector: MakeCollector
) -> None:
    collector = make_collector()
    fake_nvml.write(two_gpus())
    collector.collect(NOW)

    fell = FakeNvmlConfig(gpus=(IDLE, replace(BUSY, lost=True)), xids=(FakeXid(gpu=1, code=79),))
    fake_nvml.write(fell)
    got = series(collector.collect(NOW))

    assert got == idle_series() | {
        key(XID, labels(UUID1, 1), xid="79"): 1.0,
        key(LOST, labels(UUID1, 1), pci_bus_id="00000000:19:00.0"): 1.0,
    }


def test_the_event_set_is_polled_without_waiting_once_a_round(
    fake_nvml: FakeNvml, make_collector: MakeCollector
) -> None:
    calls: Counter[str] = Counter()
    timeouts: list[int] = []
    nvml = counting(pynvml, calls)
    wait = nvml.nvmlEventSetWait_v2
    nvml.nvmlEventSetWait_v2 = lambda events, ms: (timeouts.append(ms), wait(events, ms))[1]
    collector = make_collector(nvml=nvml)
    fake_nvml.write(two_gpus())
    collector.collect(NOW)
    calls.clear()

    collector.collect(NOW)

    assert calls["nvmlEventSetWait_v2"] == 1  # answered NVML_ERROR_TIMEOUT at once
    assert set(timeouts) == {0}  # never waits: a tick is not held up by an event set
    assert calls["nvmlEventSetCreate"] == calls["nvmlDeviceRegisterEvents"] == 0


# -- GPUs lost while NVML answers ------------------------------------------------------------


def test_every_gpu_lost_after_being_read_is_lost_by_name_not_a_blind_collector(
    fake_nvml: FakeNvml, make_collector: MakeCollector
) -> None:
    collector = make_collector()
    fake_nvml.write(FakeNvmlConfig(gpus=(replace(IDLE, bus="00000000:3B:00.0"),)))
    collector.collect(NOW)

    fake_nvml.write(FakeNvmlConfig(gpus=(replace(IDLE, bus="00000000:3B:00.0", lost=True),)))

    got = series(collector.collect(NOW))
    assert got == {key(LOST, labels(UUID0, 0), pci_bus_id="00000000:3B:00.0"): 1.0}


def test_a_gpu_gone_from_the_enumeration_is_lost(
    fake_nvml: FakeNvml, make_collector: MakeCollector
) -> None:
    collector = make_collector()
    fake_nvml.write(two_gpus())
    collector.collect(NOW)

    fake_nvml.write(FakeNvmlConfig(gpus=(IDLE,)))  # GPU 1 left the bus: NVML counts one
    collector.collect(NOW)  # its stale handle fails (dropped); that makes the next round look
    got = series(collector.collect(NOW))
    fake_nvml.write(two_gpus())
    back = series(collector.collect(NOW))

    assert got == idle_series() | {key(LOST, labels(UUID1, 1), pci_bus_id="00000000:19:00.0"): 1.0}
    assert back == idle_series() | busy_series()


def test_gpus_failing_otherwise_are_a_blind_collector_not_lost_gpus(
    fake_nvml: FakeNvml, make_collector: MakeCollector
) -> None:
    collector = make_collector()
    fake_nvml.write(two_gpus())
    collector.collect(NOW)

    fake_nvml.write(two_gpus(fail={"nvmlDeviceGetMigMode": 999}))  # NVML_ERROR_UNKNOWN

    with pytest.raises(CollectError, match="no GPU could be read"):
        collector.collect(NOW)
