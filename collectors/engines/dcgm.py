"""NVIDIA dcgm-exporter as an alternative GPU source, feeding the canonical GPU signals.

Units follow the exporter's CSV: utilisation in percent, framebuffer in MiB, energy in mJ (a
counter without ``_total``; the parser adds it), clocks in MHz. The framebuffer total is
FB_USED + FB_FREE + FB_RESERVED (dcgm-exporter #271): used + free alone undercounts it, so
without FB_RESERVED the total is left absent. MIG instances (GPU_I_ID) get ``mig_instance``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from collectors.base import Sample
from collectors.engines.exposition import Exposition
from collectors.engines.rules import Context

NAME = "dcgm"

MIB = 1024 * 1024

# DCGM field -> (canonical GPU signal, factor to base units)
FIELDS = {
    "DCGM_FI_DEV_GPU_UTIL": ("gpuwatch_gpu_utilization_ratio", 0.01),
    "DCGM_FI_DEV_MEM_COPY_UTIL": ("gpuwatch_gpu_memory_utilization_ratio", 0.01),
    "DCGM_FI_DEV_FB_USED": ("gpuwatch_gpu_memory_used_bytes", MIB),
    "DCGM_FI_DEV_POWER_USAGE": ("gpuwatch_gpu_power_watts", 1.0),
    "DCGM_FI_DEV_GPU_TEMP": ("gpuwatch_gpu_temperature_celsius", 1.0),
    "DCGM_FI_DEV_SM_CLOCK": ("gpuwatch_gpu_sm_clock_hertz", 1e6),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total": ("gpuwatch_gpu_energy_joules_total", 0.001),
}
FB_PARTS = ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED")
# Every series map_samples reads (the scrape keeps only these families of a body).
READS = (*FIELDS, *FB_PARTS)

GpuKey = tuple[tuple[str, str], ...]


def detect(exposition: Exposition) -> bool:
    return any(name.startswith("DCGM_FI_") for name in exposition.names())


def map_samples(exposition: Exposition, context: Context) -> list[Sample]:
    out: list[Sample] = []
    names: dict[GpuKey, str] = {}
    framebuffer: dict[GpuKey, dict[str, float]] = defaultdict(dict)
    for field, (metric, factor) in FIELDS.items():
        for labels, value in exposition.rows(field):
            key = _gpu_key(labels, context.host)
            if key is None:
                continue
            names.setdefault(key, labels.get("modelName", ""))
            out.append(_sample(metric, _exact(value, factor), key, context))
    for field in FB_PARTS:
        for labels, value in exposition.rows(field):
            key = _gpu_key(labels, context.host)
            if key is not None:
                framebuffer[key][field] = value
    for key, parts in framebuffer.items():
        if len(parts) == len(FB_PARTS):
            out.append(
                _sample("gpuwatch_gpu_memory_total_bytes", sum(parts.values()) * MIB, key, context)
            )
    for key, name in names.items():
        out.append(_sample("gpuwatch_gpu_info", 1.0, key, context, {"gpu_name": name}))
    return out


def _exact(value: float, factor: float) -> float:
    # Dividing by 1000 (not multiplying by 0.001) and by 100 keeps 65000 mJ exactly 65.0 J.
    if factor == 0.001:
        return value / 1000
    if factor == 0.01:
        return value / 100
    return value * factor


def _gpu_key(labels: Mapping[str, str], host: str) -> GpuKey | None:
    uuid = labels.get("UUID") or labels.get("uuid")
    index = labels.get("gpu")
    if not uuid or index is None:  # NVLink/NVSwitch/CPU families: not a GPU series
        return None
    key = {"host": host, "gpu_uuid": uuid, "gpu_index": index}
    if labels.get("GPU_I_ID"):
        key["mig_instance"] = labels["GPU_I_ID"]
    return tuple(sorted(key.items()))


def _sample(
    metric: str, value: float, key: GpuKey, context: Context, extra: Mapping[str, str] = {}
) -> Sample:
    return Sample(metric=metric, value=value, labels={**dict(key), **extra}, ts=context.now)
