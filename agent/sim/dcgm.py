"""NVIDIA dcgm-exporter's /metrics ("dcgm"), following engine-metrics.md §5 (release 4.5.3).

A Go text template, not a Prometheus client: HELP and TYPE from the counters CSV, counters keep
their DCGM names (no ``_total``: ``DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`` is a counter in mJ),
float fields print with ``%f`` (``69.500000``), integer fields as integers. Labels in the
exporter's order: gpu, UUID, pci_bus_id, device, modelName, Hostname (capitalised up to 4.5.3),
then the CSV's label fields (``DCGM_FI_DRIVER_VERSION``). Families come in CSV order, one
sample per GPU, with no blank lines. FB values are MiB; FB_USED + FB_FREE is not the total,
FB_RESERVED makes up the rest. Values come from ``Traffic.set_gpu``. The profiling fields the
CSV ships commented out (SM activity and occupancy, the FP pipes) appear, in CSV order, only
for GPUs whose reading sets them: a family no GPU sets is left out, as the default CSV does.
"""

from __future__ import annotations

from collections.abc import Callable

from agent.sim.traffic import GpuReading, Snapshot

VERSIONS = ("dcgm",)
DRIVER_VERSION = "550.90.07"
_FP_HELP = "Ratio of cycles the %s pipes are active."

# (field, type, help, value); a float value prints with %f, an int as an integer; None: no row.
_FIELDS: tuple[tuple[str, str, str, Callable[[GpuReading], int | float | None]], ...] = (
    ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz).", lambda g: g.sm_clock_mhz),
    (
        "DCGM_FI_DEV_MEM_CLOCK",
        "gauge",
        "Memory clock frequency (in MHz).",
        lambda g: g.mem_clock_mhz,
    ),
    ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C).", lambda g: g.memory_temp_c),
    ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C).", lambda g: g.gpu_temp_c),
    ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W).", lambda g: float(g.power_w)),
    (
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
        "counter",
        "Total energy consumption since boot (in mJ).",
        lambda g: g.energy_mj,
    ),
    (
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
        "counter",
        "Total number of PCIe retries.",
        lambda g: g.pcie_replay,
    ),
    ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %).", lambda g: g.util_pct),
    (
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "gauge",
        "Memory utilization (in %).",
        lambda g: g.mem_copy_util_pct,
    ),
    ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %).", lambda g: g.enc_util_pct),
    ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %).", lambda g: g.dec_util_pct),
    (
        "DCGM_FI_DEV_XID_ERRORS",
        "gauge",
        "Value of the last XID error encountered.",
        lambda g: g.xid,
    ),
    ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB).", lambda g: g.fb_free_mib),
    ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB).", lambda g: g.fb_used_mib),
    (
        "DCGM_FI_DEV_FB_RESERVED",
        "gauge",
        "Framebuffer memory reserved (in MiB).",
        lambda g: g.fb_reserved_mib,
    ),
    (
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for uncorrectable errors",
        lambda g: g.uncorrectable_remapped_rows,
    ),
    (
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
        "counter",
        "Number of remapped rows for correctable errors",
        lambda g: g.correctable_remapped_rows,
    ),
    (
        "DCGM_FI_DEV_ROW_REMAP_FAILURE",
        "gauge",
        "Whether remapping of rows has failed",
        lambda g: g.row_remap_failure,
    ),
    (
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "gauge",
        "Ratio of time the graphics engine is active.",
        lambda g: float(g.gr_engine_active),
    ),
    (
        "DCGM_FI_PROF_SM_ACTIVE",
        "gauge",
        "The ratio of cycles an SM has at least 1 warp assigned.",
        lambda g: g.sm_active,
    ),
    (
        "DCGM_FI_PROF_SM_OCCUPANCY",
        "gauge",
        "The ratio of number of warps resident on an SM.",
        lambda g: g.sm_occupancy,
    ),
    (
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "gauge",
        "Ratio of cycles the tensor (HMMA) pipe is active.",
        lambda g: float(g.tensor_active),
    ),
    (
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "gauge",
        "Ratio of cycles the device memory interface is active sending or receiving data.",
        lambda g: float(g.dram_active),
    ),
    ("DCGM_FI_PROF_PIPE_FP64_ACTIVE", "gauge", _FP_HELP % "fp64", lambda g: g.fp64_active),
    ("DCGM_FI_PROF_PIPE_FP32_ACTIVE", "gauge", _FP_HELP % "fp32", lambda g: g.fp32_active),
    ("DCGM_FI_PROF_PIPE_FP16_ACTIVE", "gauge", _FP_HELP % "fp16", lambda g: g.fp16_active),
    (
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "gauge",
        "The rate of data transmitted over the PCIe bus - including both protocol headers and "
        "data payloads - in bytes per second.",
        lambda g: g.pcie_tx_bytes,
    ),
    (
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "gauge",
        "The rate of data received over the PCIe bus - including both protocol headers and "
        "data payloads - in bytes per second.",
        lambda g: g.pcie_rx_bytes,
    ),
)


# The families the default CSV ships commented out: printed only when some GPU sets them.
_OPTIONAL = frozenset(
    name
    for name in (f[0] for f in _FIELDS)
    if name.startswith(("DCGM_FI_PROF_SM_", "DCGM_FI_PROF_PIPE_FP"))
)


def dcgm_value(value: int | float) -> str:
    return f"{value:f}" if isinstance(value, float) else str(int(value))


def _labels(g: GpuReading, hostname: str) -> str:
    return (
        f'gpu="{g.index}",UUID="{g.uuid}",pci_bus_id="{g.pci_bus_id}",device="nvidia{g.index}",'
        f'modelName="{g.model_name}",Hostname="{hostname}",DCGM_FI_DRIVER_VERSION="{DRIVER_VERSION}"'
    )


def render(snap: Snapshot) -> str:
    out: list[str] = []
    for name, kind, help_, get in _FIELDS:
        rows = [(g, value) for g in snap.gpus if (value := get(g)) is not None]
        if not rows and name in _OPTIONAL:
            continue
        out.append(f"# HELP {name} {help_}\n# TYPE {name} {kind}\n")
        out.extend(
            f"{name}{{{_labels(g, snap.hostname)}}} {dcgm_value(value)}\n" for g, value in rows
        )
    return "".join(out)
