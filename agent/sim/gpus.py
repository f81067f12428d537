"""What the simulated box's GPUs report through dcgm-exporter (agent.sim.dcgm)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass


@dataclass(frozen=True)
class GpuReading:
    """What dcgm-exporter reports for one GPU. FB_FREE is derived, so USED+FREE+RESERVED=total."""

    index: int
    uuid: str
    pci_bus_id: str
    model_name: str = "NVIDIA H100 80GB HBM3"
    util_pct: int = 0
    mem_copy_util_pct: int = 0
    enc_util_pct: int = 0
    dec_util_pct: int = 0
    fb_total_mib: int = 81559
    fb_used_mib: int = 0
    fb_reserved_mib: int = 552
    power_w: float = 69.5
    gpu_temp_c: int = 31
    memory_temp_c: int = 29
    sm_clock_mhz: int = 345
    mem_clock_mhz: int = 2619
    energy_mj: int = 8_000_000  # counter since boot; engine restarts do not reset it
    pcie_replay: int = 0
    xid: int = 0  # the last Xid (DCGM_FI_DEV_XID_ERRORS), 0: none
    correctable_remapped_rows: int = 0
    uncorrectable_remapped_rows: int = 0
    row_remap_failure: int = 0
    gr_engine_active: float = 0.0
    tensor_active: float = 0.0
    dram_active: float = 0.0
    # Fields dcp-metrics-included.csv lists commented out: None leaves the family out, as a
    # default CSV does; a ratio (0-1) emits it, as a CSV with the line enabled does.
    sm_active: float | None = None
    sm_occupancy: float | None = None
    fp64_active: float | None = None
    fp32_active: float | None = None
    fp16_active: float | None = None
    pcie_tx_bytes: int = 0
    pcie_rx_bytes: int = 0

    @property
    def fb_free_mib(self) -> int:
        return self.fb_total_mib - self.fb_used_mib - self.fb_reserved_mib


def default_gpu(hostname: str, index: int) -> GpuReading:
    h = hashlib.sha256(f"{hostname}/{index}".encode()).hexdigest()
    uuid = f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"
    return GpuReading(index=index, uuid=uuid, pci_bus_id=f"00000000:{0x18 + 0x10 * index:02X}:00.0")
