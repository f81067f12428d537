"""The canonical signals of DESIGN.md as data: name, kind and help text.

The /metrics exposition and ``collect --json`` use these names verbatim; a collector that emits a
name missing here is a bug caught by tests, not something to expose under a guessed type.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Kind(Enum):
    GAUGE = "gauge"
    COUNTER = "counter"


@dataclass(frozen=True, slots=True)
class Signal:
    name: str
    kind: Kind
    help: str


def _g(name: str, help_: str) -> Signal:
    return Signal(name, Kind.GAUGE, help_)


def _c(name: str, help_: str) -> Signal:
    return Signal(name, Kind.COUNTER, help_)


GPU_SIGNALS = (
    _g("gpuwatch_gpu_info", "Constant 1; gpu_name, driver_version and mig_mode as labels."),
    _g("gpuwatch_gpu_utilization_ratio", "Fraction of the last sample period a kernel ran (0-1)."),
    _g(
        "gpuwatch_gpu_memory_utilization_ratio",
        "Fraction of time device memory was read or written (0-1).",
    ),
    _g("gpuwatch_gpu_memory_used_bytes", "Device memory in use, bytes."),
    _g("gpuwatch_gpu_memory_total_bytes", "Device memory installed, bytes."),
    _g("gpuwatch_gpu_power_watts", "Power draw, watts."),
    _g("gpuwatch_gpu_power_limit_watts", "Enforced power limit, watts."),
    _g("gpuwatch_gpu_temperature_celsius", "GPU core temperature, degrees Celsius."),
    _c("gpuwatch_gpu_energy_joules_total", "Energy consumed since the driver was loaded, joules."),
    _g("gpuwatch_gpu_sm_clock_hertz", "Current SM clock, hertz."),
    _c(
        "gpuwatch_gpu_ecc_errors_total",
        "ECC errors since the driver was loaded (volatile), by type.",
    ),
    _g(
        "gpuwatch_gpu_throttle_reasons",
        "Clock throttle reasons bitmask (NVML clocks event reasons).",
    ),
    _g("gpuwatch_gpu_process_memory_bytes", "Device memory used by one process, bytes."),
)

HEALTH_SIGNALS = (
    _g("gpuwatch_collector_success", "1 if the collector's last run succeeded, else 0."),
    _g("gpuwatch_collector_duration_seconds", "Duration of the collector's last run, seconds."),
    _g(
        "gpuwatch_collector_last_success_timestamp_seconds",
        "Unix time of the collector's last successful run.",
    ),
    _g("gpuwatch_target_up", "1 if the last scrape of the target succeeded, else 0."),
)

SIGNALS: dict[str, Signal] = {s.name: s for s in GPU_SIGNALS + HEALTH_SIGNALS}
