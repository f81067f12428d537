"""What each GPU model can do at most: peak dense tensor FLOPs per second and peak memory
bandwidth, the denominators of model FLOPs utilization (MFU) and memory-bandwidth utilization
(MBU) in :mod:`agent.cost.efficiency`.

Every figure is the vendor's, named beside it with the figure as printed. FLOPs are *dense*:
datasheets print tensor throughput "with sparsity" (2:4 structured sparsity, which inference
engines do not use), and where only that is printed it is halved here, said so beside it.
Columns: BF16 (FP16 where the GPU has no BF16) with FP32 accumulation, the precision vLLM runs
unquantized models in, and FP8 where the GPU has FP8 tensor cores (Ada, Hopper, Blackwell);
None where the vendor prints no figure. Bandwidth is in bytes per second (1 TB/s = 1e12 B/s,
as datasheets count).

Lookup is by the product name NVML's ``nvmlDeviceGetName`` returns (what ``nvidia-smi
--query-gpu=name`` prints), normalised only in spelling: case, runs of blanks, and the "NVIDIA "
prefix older drivers left off ("A100-SXM4-40GB"). No fuzzy matching: a name not in the table
(a new SKU, an H800, a MIG instance's name) has no peak, and its MFU is unknown, never a guess
from a similar-sounding GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

TERA = 1e12
PETA = 1e15


class Precision(Enum):
    """The tensor precision a model's matrix multiplications run in (the peak to divide by)."""

    BF16 = "bf16"  # also FP16: the same tensor throughput on every GPU listed
    FP8 = "fp8"


@dataclass(frozen=True, slots=True)
class GpuPeak:
    """One GPU model's peaks; a None figure is one its vendor does not print."""

    model: str  # the product, as the datasheet names it
    bf16_flops_per_second: float | None  # dense, FP32 accumulate
    fp8_flops_per_second: float | None  # dense; None: no FP8 tensor cores, or not printed
    memory_bytes_per_second: float | None
    source: str  # where the figures are printed, and how they were read

    def flops_per_second(self, precision: Precision = Precision.BF16) -> float | None:
        if precision is Precision.FP8:
            return self.fp8_flops_per_second
        return self.bf16_flops_per_second


_H100_DS = "NVIDIA H100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h100/)"
_H200_DS = "NVIDIA H200 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h200/)"
_A100_DS = (
    "NVIDIA A100 Tensor Core GPU datasheet (nvidia-a100-datasheet-us-nvidia-1758950-r4-web.pdf):"
    " BF16 Tensor Core '312 TFLOPS | 624 TFLOPS*' (dense printed, * with sparsity)"
)
_L40S_L40_DS = "datasheet (nvidia.com/en-us/data-center/l40s/, .../l40/)"


def _h(tflops_sparse: float) -> float:
    """A "with sparsity" TFLOPS figure, halved to dense, in FLOPs per second."""
    return tflops_sparse / 2 * TERA


_H100_SXM = GpuPeak(
    "H100 SXM", _h(1979), _h(3958), 3.35 * TERA,
    f"{_H100_DS}, H100 SXM: BF16 '1,979 TFLOPS*', FP8 '3,958 TFLOPS*' (* with sparsity:"
    " halved), GPU memory bandwidth '3.35TB/s'",
)  # fmt: skip
_H100_PCIE = GpuPeak(
    "H100 PCIe", _h(1513), _h(3026), 2.0 * TERA,
    f"{_H100_DS} (2022 edition, H100 PCIe column): BF16 '1,513 TFLOPS*', FP8 '3,026 TFLOPS*'"
    " (* with sparsity: halved), GPU memory bandwidth '2TB/s'",
)  # fmt: skip
_H100_NVL = GpuPeak(
    "H100 NVL", _h(1671), _h(3341), 3.9 * TERA,
    f"{_H100_DS}, H100 NVL: BF16 '1,671 TFLOPS*', FP8 '3,341 TFLOPS*' (* with sparsity:"
    " halved), GPU memory bandwidth '3.9TB/s'",
)  # fmt: skip
_H200_SXM = GpuPeak(
    "H200 SXM", _h(1979), _h(3958), 4.8 * TERA,
    f"{_H200_DS}, H200 SXM: BF16 '1,979 TFLOPS*', FP8 '3,958 TFLOPS*' (* with sparsity:"
    " halved), GPU memory bandwidth '4.8TB/s'",
)  # fmt: skip
_H200_NVL = GpuPeak(
    "H200 NVL", _h(1671), _h(3341), 4.8 * TERA,
    f"{_H200_DS}, H200 NVL: BF16 '1,671 TFLOPS*', FP8 '3,341 TFLOPS*' (* with sparsity:"
    " halved), GPU memory bandwidth '4.8TB/s'",
)  # fmt: skip
_B200 = GpuPeak(
    "B200 (HGX)", 4.5 / 2 * PETA, 9 / 2 * PETA, 7.7 * TERA,
    "NVIDIA HGX B200 specifications (nvidia.com/en-us/data-center/hgx/), individual Blackwell"
    " GPU: FP16/BF16 Tensor Core '4.5 PFLOPS', FP8/FP6 '9 PFLOPS' (with sparsity: halved),"
    " GPU memory '180GB HBM3E | 7.7TB/s' (earlier material printed 8TB/s)",
)  # fmt: skip
_A100_SXM_40 = GpuPeak("A100 40GB SXM", 312 * TERA, None, 1555e9, f"{_A100_DS}; '1,555GB/s'")
_A100_SXM_80 = GpuPeak("A100 80GB SXM", 312 * TERA, None, 2039e9, f"{_A100_DS}; '2,039GB/s'")
_A100_PCIE_40 = GpuPeak("A100 40GB PCIe", 312 * TERA, None, 1555e9, f"{_A100_DS}; '1,555GB/s'")
_A100_PCIE_80 = GpuPeak("A100 80GB PCIe", 312 * TERA, None, 1935e9, f"{_A100_DS}; '1,935GB/s'")
_L40S = GpuPeak(
    "L40S", 362.05 * TERA, 733 * TERA, 864e9,
    f"NVIDIA L40S {_L40S_L40_DS}: BFLOAT16 Tensor Core '362.05 | 733*', FP8 '733 | 1,466*'"
    " TFLOPS (dense printed), memory bandwidth '864GB/s'",
)  # fmt: skip
_L40 = GpuPeak(
    "L40", 181.05 * TERA, 362 * TERA, 864e9,
    f"NVIDIA L40 {_L40S_L40_DS}: BFLOAT16 Tensor Core '181.05 | 362.1*', FP8 '362 | 724*'"
    " TFLOPS (dense printed), memory bandwidth '864GB/s'",
)  # fmt: skip
_L4 = GpuPeak(
    "L4", _h(242), _h(485), 300e9,
    "NVIDIA L4 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/l4/): BF16 Tensor Core"
    " '242 teraFLOPS*', FP8 '485 teraFLOPS*' (* shown with sparsity: halved), GPU memory"
    " bandwidth '300GB/s'",
)  # fmt: skip
_A10 = GpuPeak(
    "A10", 125 * TERA, None, 600e9,
    "NVIDIA A10 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/products/a10-gpu/):"
    " BF16 Tensor Core '125 TF | 250 TF*' (dense printed), GPU memory bandwidth '600GB/s'",
)  # fmt: skip
# AWS's A10G has no NVIDIA datasheet and AWS prints no tensor figure: its FLOPs stay unknown
# rather than borrowed from the A10 (different clocks and tensor throughput).
_A10G = GpuPeak(
    "A10G", None, None, 600e9,
    "no NVIDIA datasheet; memory bandwidth 600 GB/s as Baseten's 'NVIDIA A10 vs A10G for ML"
    " model inference' states it (same GDDR6 as the A10); tensor FLOPs unpublished: unknown",
)  # fmt: skip
_A30 = GpuPeak(
    "A30", 165 * TERA, None, 933e9,
    "NVIDIA A30 Tensor Core GPU datasheet: BF16 Tensor Core '165 teraFLOPS | 330 teraFLOPS*'"
    " (dense printed), GPU memory bandwidth '933GB/s'",
)  # fmt: skip
_A40 = GpuPeak(
    "A40", 149.7 * TERA, None, 696e9,
    "NVIDIA A40 datasheet: Peak BF16 Tensor TFLOPS with FP32 Accumulate '149.7 | 299.4*'"
    " (dense printed), memory bandwidth '696 GB/s'",
)  # fmt: skip
_RTX_4090 = GpuPeak(
    "GeForce RTX 4090", 165.2 * TERA, 330.3 * TERA, 1008e9,
    "NVIDIA Ada GPU Architecture whitepaper, appendix (GeForce RTX 4090): Peak BF16 Tensor"
    " TFLOPS with FP32 Accumulate '165.2/330.4', Peak FP8 Tensor TFLOPS with FP32 Accumulate"
    " '330.3/660.6' (dense/sparse), memory bandwidth '1008 GB/sec'",
)  # fmt: skip
# The RTX 6000 Ada datasheet prints one tensor figure, FP8 with sparsity; no BF16 figure.
_RTX_6000_ADA = GpuPeak(
    "RTX 6000 Ada Generation", None, _h(1457.0), 960e9,
    "NVIDIA RTX 6000 Ada Generation datasheet: Tensor Performance '1,457.0 TFLOPS' (FP8 with"
    " sparsity: halved; no BF16 figure printed), GPU memory bandwidth '960 GB/s'",
)  # fmt: skip
_T4 = GpuPeak(
    "T4", 65 * TERA, None, 320e9,
    "NVIDIA T4 datasheet: Mixed Precision (FP16/FP32) '65 TFLOPS' (Turing: no BF16, no"
    " sparsity; FP16 is what vLLM runs there), GPU memory bandwidth '320+ GB/s' (read as 320)",
)  # fmt: skip

# NVML product names (as nvmlDeviceGetName returns them), spelled as drivers print them.
_BY_NVML_NAME: dict[str, GpuPeak] = {
    "NVIDIA H100 80GB HBM3": _H100_SXM,
    "NVIDIA H100 PCIe": _H100_PCIE,
    "NVIDIA H100 NVL": _H100_NVL,
    "NVIDIA H200": _H200_SXM,
    "NVIDIA H200 NVL": _H200_NVL,
    "NVIDIA B200": _B200,
    "NVIDIA A100-SXM4-40GB": _A100_SXM_40,
    "NVIDIA A100-SXM4-80GB": _A100_SXM_80,
    "NVIDIA A100-PCIE-40GB": _A100_PCIE_40,
    "NVIDIA A100 80GB PCIe": _A100_PCIE_80,
    "NVIDIA L40S": _L40S,
    "NVIDIA L40": _L40,
    "NVIDIA L4": _L4,
    "NVIDIA A10": _A10,
    "NVIDIA A10G": _A10G,
    "NVIDIA A30": _A30,
    "NVIDIA A40": _A40,
    "NVIDIA GeForce RTX 4090": _RTX_4090,
    "NVIDIA RTX 6000 Ada Generation": _RTX_6000_ADA,
    "Tesla T4": _T4,
}


def normalise(nvml_name: str) -> str:
    """The spelling-free key of a product name: casefolded, blanks collapsed, without the
    "NVIDIA " prefix (present since driver R470-ish, absent before: "A100-SXM4-40GB")."""
    key = " ".join(nvml_name.split()).casefold()
    return key.removeprefix("nvidia ")


_TABLE: dict[str, GpuPeak] = {normalise(name): peak for name, peak in _BY_NVML_NAME.items()}


def peak_for(nvml_name: str | None) -> GpuPeak | None:
    """The peaks of the GPU NVML names ``nvml_name``; None for a name not in the table."""
    if not nvml_name:
        return None
    return _TABLE.get(normalise(nvml_name))


def known_names() -> tuple[str, ...]:
    """The NVML product names the table knows, as drivers spell them."""
    return tuple(_BY_NVML_NAME)
