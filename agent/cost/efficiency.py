"""Model FLOPs utilization (MFU) and memory-bandwidth utilization (MBU) from an engine's own
work estimates, and what a low MFU costs. Pure arithmetic; the report code supplies the deltas.

The inputs are vLLM's ``estimated_*_per_gpu`` counters (``--enable-mfu-metrics``), mapped to
``gpuwatch_engine_estimated_{flops,read_bytes,write_bytes}_total``: the FLOPs and device-memory
bytes vLLM's analytic model of the served network says each step cost, per GPU of the engine.
Over a window of ``seconds`` of wall time, with the counters' reset-corrected increases::

    mfu = Δflops_per_gpu / (seconds × peak_flops_per_second)
    mbu = (Δread_bytes_per_gpu + Δwrite_bytes_per_gpu) / (seconds × peak_bytes_per_second)

with the peaks of the GPU it ran on (:mod:`agent.cost.gpu_peaks`, dense tensor FLOPs in the
precision the model runs in). Example: an H100 SXM (989.5e12 BF16 FLOP/s) whose counter moved
by 2.97e16 in 60 s ran at 2.97e16 / (60 × 989.5e12) = 0.5003 MFU.

Data-parallel ranks: one vLLM /metrics carries a row per DP rank (its ``engine`` label), each
rank's per-GPU figure for the TP×PP GPUs of that rank. The mapper (collectors/engines/vllm.py)
stores their *mean*, the per-GPU figure of the whole deployment (every rank has the same GPU
count), so the arithmetic above needs no rank count; summed, as token counters are, N ranks
would read N times the utilization. Targets on several GPUs or GPU models combine in
:func:`combined_mfu`, weighted by GPU-seconds.

Unknown, never 0 (DESIGN "Bases, said out loud"): a utilization is None when the GPU's peak is
unknown, the window has no time, the engine exports no estimate, or the estimate did not move
while the engine processed tokens. vLLM registers the counters whether or not the flag is on
(vllm/v1/metrics/perf.py ``PerfMetricsProm``) and only increments them when the scheduler built
``ModelMetrics`` (flag on and a model its analytic formulas cover: ``is_enabled()``), so a
counter standing still while tokens flowed means "not estimated", not "no work". A counter
standing still while nothing was served is a true 0: no model work was done.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from decimal import Decimal

from agent.cost.gpu_peaks import GpuPeak, Precision

_MONEY = Decimal("1e-12")  # the ledger's scale (Numeric(24, 12)): sums of it do not drift


@dataclass(frozen=True, slots=True)
class WorkWindow:
    """What one engine's per-GPU estimate counters moved over ``seconds`` of wall time: their
    reset-corrected increases (a restart's drop is not negative work). None: the engine
    exported no such counter in the window."""

    seconds: float
    flops_per_gpu: float | None
    read_bytes_per_gpu: float | None = None
    write_bytes_per_gpu: float | None = None
    # Tokens the engine processed in the window (prompt + generated, or generated alone):
    # tells an estimate that is off (tokens moved, counter did not) from an idle engine.
    # None: not known, and then a counter that did not move is unknown too.
    tokens: float | None = None
    gpus: int = 1  # GPUs the engine ran on (TP × PP × DP): its weight in combined_mfu

    def __post_init__(self) -> None:
        for name in ("seconds", "flops_per_gpu", "read_bytes_per_gpu", "write_bytes_per_gpu",
                     "tokens"):  # fmt: skip
            value = getattr(self, name)
            if value is not None and (not math.isfinite(value) or value < 0):
                raise ValueError(f"{name} must be a finite increase >= 0, got {value!r}")
        if self.gpus < 1:
            raise ValueError(f"gpus must be at least 1, got {self.gpus!r}")

    @property
    def bytes_per_gpu(self) -> float | None:
        """Read and written bytes together; None when either counter is absent."""
        if self.read_bytes_per_gpu is None or self.write_bytes_per_gpu is None:
            return None
        return self.read_bytes_per_gpu + self.write_bytes_per_gpu


def utilization(
    amount_per_gpu: float | None,
    seconds: float,
    peak_per_second: float | None,
    tokens: float | None = None,
) -> float | None:
    """``amount_per_gpu / (seconds × peak_per_second)``, the arithmetic of MFU and MBU alike;
    None when the peak or the amount is unknown, there is no time, or the amount did not move
    while tokens did (or tokens are unknown): an estimate that is off is not 0."""
    if amount_per_gpu is None or peak_per_second is None or peak_per_second <= 0:
        return None
    if seconds <= 0:
        return None
    if amount_per_gpu == 0 and (tokens is None or tokens > 0):
        return None
    # Not capped at 1: an estimate above the peak is a finding about the estimate to show.
    return amount_per_gpu / (seconds * peak_per_second)


def mfu(
    window: WorkWindow, peak: GpuPeak | None, precision: Precision = Precision.BF16
) -> float | None:
    """Model FLOPs utilization of one engine over ``window``, against ``peak`` in
    ``precision``: Δflops_per_gpu / (seconds × peak FLOP/s). None: unknown (see module)."""
    flops = None if peak is None else peak.flops_per_second(precision)
    return utilization(window.flops_per_gpu, window.seconds, flops, window.tokens)


def mbu(window: WorkWindow, peak: GpuPeak | None) -> float | None:
    """Memory-bandwidth utilization of one engine over ``window``: (Δread + Δwrite bytes per
    GPU) / (seconds × peak bytes/s). None: unknown (see module)."""
    bandwidth = None if peak is None else peak.memory_bytes_per_second
    return utilization(window.bytes_per_gpu, window.seconds, bandwidth, window.tokens)


def combined_mfu(
    parts: Iterable[tuple[WorkWindow, GpuPeak | None]], precision: Precision = Precision.BF16
) -> float | None:
    """Several engines' MFU as one: the FLOPs they did over the FLOPs their GPUs could have
    done, Σ Δflops_per_gpu·gpus / Σ seconds·gpus·peak, so each weighs by its GPU-seconds at its
    own GPU's peak. None when there are no parts or any part's MFU is unknown: a figure from
    the known parts alone would stand for GPUs it did not see (filter first, and say so)."""
    done = possible = 0.0
    for window, peak in parts:
        if mfu(window, peak, precision) is None:
            return None
        assert window.flops_per_gpu is not None and peak is not None  # mfu() checked them
        flops = peak.flops_per_second(precision)
        assert flops is not None
        done += window.flops_per_gpu * window.gpus
        possible += window.seconds * window.gpus * flops
    return done / possible if possible > 0 else None


def combined_mbu(parts: Iterable[tuple[WorkWindow, GpuPeak | None]]) -> float | None:
    """MBU weighted by GPU-seconds, as combined_mfu weighs MFU; None if any part's is."""
    done = weight = 0.0
    for window, peak in parts:
        ratio = mbu(window, peak)
        if ratio is None:
            return None
        done += ratio * window.seconds * window.gpus
        weight += window.seconds * window.gpus
    return done / weight if weight > 0 else None


def mfu_gap_usd(cost_usd: Decimal, mfu: float | None, target: float | None) -> Decimal | None:
    """The share of ``cost_usd`` an MFU at ``target`` would have saved: the same FLOPs at the
    target rate take mfu/target of the GPU time, so cost × (1 − mfu/target) when mfu is below
    the target, else 0. None when the MFU or the target is unknown. Example: $100 at MFU 0.2
    against a target of 0.4 is $100 × (1 − 0.5) = $50. Rounded to the ledger's 1e-12."""
    if mfu is None or target is None:
        return None
    if not math.isfinite(mfu) or mfu < 0:
        raise ValueError(f"an MFU is a finite ratio >= 0, got {mfu!r}")
    if not math.isfinite(target) or not 0 < target <= 1:
        raise ValueError(f"an MFU target is in (0, 1], got {target!r}")
    if mfu >= target:
        return Decimal(0)
    # Through str: the decimal the ratio prints as, not its binary expansion.
    share = 1 - Decimal(str(mfu)) / Decimal(str(target))
    return (cost_usd * share).quantize(_MONEY)
