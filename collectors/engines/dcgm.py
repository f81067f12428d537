"""NVIDIA dcgm-exporter as an alternative GPU source, feeding the canonical GPU signals.

Units follow the exporter's CSV: utilisation in percent, framebuffer in MiB, energy in mJ (a
counter without ``_total``; the parser adds it), clocks in MHz. The framebuffer total is
FB_USED + FB_FREE + FB_RESERVED (dcgm-exporter #271): used + free alone undercounts it, so
without FB_RESERVED the total is left absent. MIG instances (GPU_I_ID) get ``mig_instance``.

Profiling (DCP) fields give what the SMs actually did, where the exporter's CSV enables them
(its dcp-metrics-included.csv enables tensor and DRAM activity, and lists SM activity,
occupancy and the FP pipes commented out). A target reporting SM activity for a GPU keeps
NVML's GPM off that GPU (agent/collect/runner.py): the two share the performance counters.

Faults: the row remapper's fields map to the NVML collector's signals. DCGM_FI_DEV_XID_ERRORS is
a gauge holding the *last* Xid seen (0: none), not a count, so it becomes
``gpuwatch_gpu_xid_errors_total{xid=<that code>} 1``: "this Xid happened", which is what the
GpuHardwareErrors rule reads; how many times is not known from dcgm-exporter.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from collectors.base import Sample
from collectors.engines.exposition import Exposition
from collectors.engines.rules import Context

NAME = "dcgm"

MIB = 1024 * 1024
XID_ERRORS = "gpuwatch_gpu_xid_errors_total"

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
# Profiling field -> canonical gauge. dcgm-exporter exports these as ratios already ("Ratio of
# cycles ...", gauges from 0 to 1 in its dcp-metrics-included.csv), unlike NVML's GPM percent.
PROFILING = {
    "DCGM_FI_PROF_SM_ACTIVE": "gpuwatch_gpu_sm_active_ratio",
    "DCGM_FI_PROF_SM_OCCUPANCY": "gpuwatch_gpu_sm_occupancy_ratio",
    "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": "gpuwatch_gpu_tensor_active_ratio",
    "DCGM_FI_PROF_DRAM_ACTIVE": "gpuwatch_gpu_dram_active_ratio",
    "DCGM_FI_PROF_PIPE_FP16_ACTIVE": "gpuwatch_gpu_fp16_active_ratio",
    "DCGM_FI_PROF_PIPE_FP32_ACTIVE": "gpuwatch_gpu_fp32_active_ratio",
    "DCGM_FI_PROF_PIPE_FP64_ACTIVE": "gpuwatch_gpu_fp64_active_ratio",
}
FIELDS.update((field, (metric, 1.0)) for field, metric in PROFILING.items())
FB_PARTS = ("DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED")
XID = "DCGM_FI_DEV_XID_ERRORS"
# The remapped-row counts are counters in the default CSV (the parser adds ``_total``), and
# gauges where a user's CSV says so: both spellings are read.
REMAP_FIELDS = {
    "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": ("gpuwatch_gpu_remapped_rows_total", "correctable"),
    "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": (
        "gpuwatch_gpu_remapped_rows_total",
        "uncorrectable",
    ),
    "DCGM_FI_DEV_ROW_REMAP_FAILURE": ("gpuwatch_gpu_row_remap_failure", ""),
    "DCGM_FI_DEV_ROW_REMAP_PENDING": ("gpuwatch_gpu_row_remap_pending", ""),  # not in the CSV
}
_REMAP_ROWS = tuple(f for f in REMAP_FIELDS if f.endswith("_ROWS"))
# Every series map_samples reads (the scrape keeps only these families of a body).
READS = (*FIELDS, *FB_PARTS, XID, *REMAP_FIELDS, *(f + "_total" for f in _REMAP_ROWS))

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
    return out + _faults(exposition, context)


def _faults(exposition: Exposition, context: Context) -> list[Sample]:
    out: list[Sample] = []
    for labels, value in exposition.rows(XID):
        key = _gpu_key(labels, context.host)
        if key is not None and value > 0:  # 0: no Xid since DCGM started watching
            out.append(_sample(XID_ERRORS, 1.0, key, context, {"xid": str(int(value))}))
    for field, (metric, cause) in REMAP_FIELDS.items():
        extra = {"cause": cause} if cause else {}
        for name in (field, field + "_total") if field in _REMAP_ROWS else (field,):
            for labels, value in exposition.rows(name):
                key = _gpu_key(labels, context.host)
                if key is not None and "mig_instance" not in dict(key):  # the GPU's, not MIG's
                    out.append(_sample(metric, value, key, context, extra))
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
