"""The GPU peak table: NVML's product names, exact after spelling, and dense figures."""

from __future__ import annotations

import pytest

from agent.cost.gpu_peaks import Precision, known_names, normalise, peak_for


@pytest.mark.parametrize(
    ("name", "model"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA B200", "B200 (HGX)"),
        ("NVIDIA A100-SXM4-80GB", "A100 80GB SXM"),
        ("NVIDIA A100-PCIE-40GB", "A100 40GB PCIe"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA A10G", "A10G"),
        ("NVIDIA GeForce RTX 4090", "GeForce RTX 4090"),
        ("NVIDIA RTX 6000 Ada Generation", "RTX 6000 Ada Generation"),
        ("A100-SXM4-40GB", "A100 40GB SXM"),  # older drivers: no "NVIDIA " prefix
        ("  nvidia   l40s ", "L40S"),  # case and blanks are spelling
    ],
)
def test_nvml_names_find_their_gpu(name: str, model: str) -> None:
    peak = peak_for(name)
    assert peak is not None and peak.model == model


@pytest.mark.parametrize(
    "name", ["NVIDIA H800", "NVIDIA H100", "H100", "NVIDIA L4S", "NVIDIA A100", "", None]
)
def test_a_name_not_in_the_table_is_unknown_never_the_nearest(name: str | None) -> None:
    assert peak_for(name) is None


def test_dense_figures_halve_the_sparsity_ones_and_keep_the_printed_dense_ones() -> None:
    h100 = peak_for("NVIDIA H100 80GB HBM3")
    assert h100 is not None
    assert h100.flops_per_second() == 989.5e12  # "1,979 TFLOPS*" with sparsity
    assert h100.flops_per_second(Precision.FP8) == 1979e12
    assert h100.memory_bytes_per_second == 3.35e12
    a100 = peak_for("NVIDIA A100-SXM4-80GB")
    assert a100 is not None
    assert a100.flops_per_second() == 312e12  # printed dense
    assert a100.flops_per_second(Precision.FP8) is None  # Ampere has no FP8 tensor cores
    assert a100.memory_bytes_per_second == 2039e9


def test_every_entry_names_its_source_and_has_a_figure() -> None:
    for name in known_names():
        peak = peak_for(name)
        assert peak is not None, name
        assert peak.source, name
        figures = (peak.bf16_flops_per_second, peak.fp8_flops_per_second,
                   peak.memory_bytes_per_second)  # fmt: skip
        assert any(f is not None for f in figures), name
        assert all(f is None or f > 0 for f in figures), name
    assert len({normalise(n) for n in known_names()}) == len(known_names())
