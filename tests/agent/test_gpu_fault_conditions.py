"""GPU fault conditions over hand-built inputs: critical Xids, the row remapper and lost GPUs
(GpuHardwareErrors and GpuLost), each its own alert, quiet on harmless data, unknown when blind."""

from __future__ import annotations

from dataclasses import replace

from agent.alerting.conditions import conditions
from agent.alerting.inputs import AlertInputs
from alerts.model import AlertKey
from alerts.rules import DEFAULT_RULES
from collectors.base import Sample
from tests.agent.test_alert_conditions import GPU_LABELS, fired, inputs, sample

XID = "gpuwatch_gpu_xid_errors_total"


def test_xid_79_is_a_critical_hardware_error_of_its_own() -> None:
    [error] = fired("GpuHardwareErrors", inputs(sample(XID, 1.0, **GPU_LABELS, xid="79")))

    assert error.key == AlertKey.of("GpuHardwareErrors", {**GPU_LABELS, "xid": "79"})
    assert error.annotations["error"] == "Xid 79, GPU has fallen off the bus"
    assert error.annotations["severity"] == "critical"
    assert error.annotations["summary"].endswith("): Xid 79, GPU has fallen off the bus")


def test_application_xids_are_counted_but_page_nobody() -> None:
    app_errors = [sample(XID, 5.0, **GPU_LABELS, xid=code) for code in ("13", "31", "43", "45")]

    assert fired("GpuHardwareErrors", inputs(*app_errors)) == []


def test_ecc_and_xid_on_one_gpu_are_two_alerts() -> None:
    ecc = sample("gpuwatch_gpu_ecc_errors_total", 1.0, **GPU_LABELS, type="uncorrected")
    dbe = sample(XID, 1.0, **GPU_LABELS, xid="48")

    keys = {c.key for c in fired("GpuHardwareErrors", inputs(ecc, dbe))}

    assert keys == {
        AlertKey.of("GpuHardwareErrors", GPU_LABELS),
        AlertKey.of("GpuHardwareErrors", {**GPU_LABELS, "xid": "48"}),
    }


def test_a_pending_row_remap_is_a_warning_and_a_failed_one_critical() -> None:
    pending = sample("gpuwatch_gpu_row_remap_pending", 1.0)
    failure = sample("gpuwatch_gpu_row_remap_failure", 1.0)

    got = {
        c.key: c.annotations["severity"]
        for c in fired("GpuHardwareErrors", inputs(pending, failure))
    }

    assert got == {
        AlertKey.of("GpuHardwareErrors", {**GPU_LABELS, "row_remap": "pending"}): "warning",
        AlertKey.of("GpuHardwareErrors", {**GPU_LABELS, "row_remap": "failure"}): "critical",
    }


def test_a_healthy_row_remapper_is_quiet() -> None:
    healthy = (
        sample("gpuwatch_gpu_row_remap_pending", 0.0),
        sample("gpuwatch_gpu_row_remap_failure", 0.0),
        sample("gpuwatch_gpu_remapped_rows_total", 3.0, **GPU_LABELS, cause="correctable"),
    )

    assert fired("GpuHardwareErrors", inputs(*healthy)) == []


def test_a_lost_gpu_is_named_by_uuid_and_bus_id() -> None:
    lost = sample("gpuwatch_gpu_lost", 1.0, **GPU_LABELS, pci_bus_id="00000000:3B:00.0")

    [alert] = fired("GpuLost", inputs(lost))

    assert alert.key == AlertKey.of("GpuLost", {**GPU_LABELS, "pci_bus_id": "00000000:3B:00.0"})
    summary = DEFAULT_RULES["GpuLost"].render_summary(alert.key.label_map(), alert.value)
    assert "GPU-aaaa at PCI 00000000:3B:00.0 no longer answers" in summary


def test_gpu_faults_are_unknown_while_nvml_is_blind() -> None:
    data = inputs(sample(XID, 1.0, **GPU_LABELS, xid="79"), nvml_ok=False)

    _, evaluated = conditions(DEFAULT_RULES, data)

    assert {"GpuHardwareErrors", "GpuLost"}.isdisjoint(evaluated)


# -- the GPU rules from whichever GPU source is configured -----------------------------------


def dcgm_only(*samples: Sample, exporter_up: bool = True) -> AlertInputs:
    """NVML disabled; dcgm-exporter scraped as target "dcgm" (its GPU samples, when up)."""
    info = sample("gpuwatch_gpu_info", 1.0, **GPU_LABELS, gpu_name="H100")
    return replace(
        inputs(),
        latest=(info, *samples) if exporter_up else (),
        collector_success={"target/dcgm": exporter_up},
        collector_last_success={"target/dcgm": None},
    )


def test_with_nvml_disabled_the_gpu_rules_evaluate_from_dcgm_exporter() -> None:
    data = dcgm_only(
        sample("gpuwatch_gpu_temperature_celsius", 95.0),
        sample(XID, 1.0, **GPU_LABELS, xid="79"),
    )

    assert [c.key for c in fired("GpuHot", data)] == [AlertKey.of("GpuHot", GPU_LABELS)]
    [xid] = fired("GpuHardwareErrors", data)
    assert xid.key.label_map()["xid"] == "79"


def test_with_the_exporter_down_the_gpus_are_unknown_and_gpu_lost_needs_nvml() -> None:
    _, down = conditions(DEFAULT_RULES, dcgm_only(exporter_up=False))
    _, up = conditions(DEFAULT_RULES, dcgm_only())

    gpu_rules = {"GpuIdle", "GpuHot", "VramHeadroomLow", "GpuThrottling", "GpuHardwareErrors"}
    assert gpu_rules.isdisjoint(down)
    assert gpu_rules <= up
    assert "GpuLost" not in up  # NVML's signal alone: unknown without NVML
