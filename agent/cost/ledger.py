"""The GPU cost ledger, pure: observations of one GPU become per-bucket uptime, busy time,
SM-active time, energy, CO2, cost and per-target allocations.

Metering: each observation of a GPU covers the time since the previous one, when that gap is at
most ``max_gap`` (a longer gap means gpuwatch was not watching: that time is not metered, and
reconciliation against the provider's bill shows it). An observation's utilisation and energy
describe the interval that ends at it (NVML reports utilisation over the last sample period).
Intervals are spread over the buckets they overlap, pro rata. Buckets are (start, start + size].

Two bases of "busy" are kept side by side, never mixed: NVML's utilisation flag (a kernel ran)
for every observed second, and SM activity (GPM or dcgm-exporter profiling) for the seconds a
source gave it. An interval without SM activity adds nothing to the SM figures: its SM activity
is unknown, not the flag's.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from functools import partial
from typing import TypeVar

from agent.cost.mig import (
    MigGpu,
    MigShare,
    add_mig,
    gpu_busy,
    instance_split,
    slice_parts,
    target_busy,
    target_split,
)
from agent.cost.pods_ledger import PodKey, PodShare, add_pods, basis_of
from agent.cost.ratecard import GpuPrice
from agent.storage.rollup import bucket_of

PriceAt = Callable[[datetime], GpuPrice | None]
# Grams of CO2 for some joules of GPU energy used at an instant (PUE and grid intensity);
# None: unknown (agent.cost.carbon).
Co2Of = Callable[[float, datetime], float | None]
# A slice's cost -> its idle cost and its targets' costs (agent.cost.mig.slice_parts)
Exact = Callable[[Decimal], tuple[Decimal, dict[str, Decimal]]]
K = TypeVar("K", str, tuple[str, str])  # a target's name, or a pod's (namespace, pod)


@dataclass(frozen=True, slots=True)
class Observation:
    """One tick's reading of one GPU."""

    ts: datetime
    utilization: float | None  # 0-1; None: not reported (counted as not busy)
    energy_joules: float | None  # the cumulative counter
    targets: Mapping[str, float] = field(default_factory=dict)  # target -> memory bytes
    # target -> its processes' summed SM utilization, where NVML gave every process on the GPU
    # one (agent.cost.allocation); empty: not known, the split is by memory
    sm_utilization: Mapping[str, float] = field(default_factory=dict)
    sm_active: float | None = None  # 0-1 from GPM or DCGM profiling; None: no such source
    power_watts: float | None = None  # integrated where the energy counter is missing
    # On Kubernetes (agent.cost.pods): (namespace, pod) -> memory bytes, and their summed SM
    # utilization where NVML gave every process one; empty: not on Kubernetes
    pods: Mapping[PodKey, float] = field(default_factory=dict)
    pod_sm: Mapping[PodKey, float] = field(default_factory=dict)
    mig: MigGpu | None = None  # a MIG-enabled GPU's instances (agent.cost.mig); None: not MIG


@dataclass
class Usage:
    """One GPU's bucket. ``cost_usd`` is None when no rate covered any of its time."""

    observed_seconds: float = 0.0
    busy_seconds: float = 0.0
    energy_joules: float | None = None
    cost_usd: Decimal | None = None
    idle_cost_usd: Decimal | None = None
    allocations: dict[str, Allocation] = field(default_factory=dict)
    sm_observed_seconds: float = 0.0  # seconds with a known SM activity
    sm_active_seconds: float = 0.0
    sm_idle_cost_usd: Decimal | None = None  # cost x (1 - SM activity) over those seconds
    co2_grams: float | None = None
    power_integrated_seconds: float = 0.0  # seconds whose energy is power x time
    pods: dict[PodKey, PodShare] = field(default_factory=dict)  # agent.cost.pods_ledger
    mig: dict[str, MigShare] = field(default_factory=dict)  # MIG instance -> its part


@dataclass
class Allocation:
    seconds: float = 0.0
    busy_seconds: float = 0.0
    cost_usd: Decimal | None = None
    energy_joules: float | None = None
    co2_grams: float | None = None


def shares(
    targets: Mapping[K, float], rule: str, sm_utilization: Mapping[K, float] = {}
) -> dict[K, float]:
    """Each target's share of a GPU: equal, or (the default rule, "memory") by SM utilization
    where every target on it has one and they sum above 0, else by memory used; empty:
    unallocated."""
    if not targets:
        return {}
    if rule != "equal" and split_by_sm(targets, sm_utilization):
        busy = sum(sm_utilization[t] for t in targets)
        return {t: sm_utilization[t] / busy for t in targets}
    total = sum(targets.values())
    if rule == "equal" or total <= 0:
        return {t: 1 / len(targets) for t in targets}
    return {t: m / total for t, m in targets.items()}


def split_by_sm(targets: Mapping[K, float], sm_utilization: Mapping[K, float]) -> bool:
    """Whether a GPU's targets are split by SM utilization rather than by memory."""
    return all(t in sm_utilization for t in targets) and sum(sm_utilization[t] for t in targets) > 0


def meter(
    observations: Sequence[Observation],
    bucket_seconds: int,
    max_gap: float,
    price_at: PriceAt,
    split_rule: str = "memory",
    co2_of: Co2Of | None = None,
    mig_split: str = "slices",
) -> dict[datetime, Usage]:
    """Per bucket start, the usage of one GPU from its observations (sorted by time).

    The first observation only opens metering: the time before it is not known to be billed.
    ``co2_of`` prices energy in grams of CO2 (None: CO2 not counted). A MIG GPU whose
    instances' parts are known (``mig_split``: by slices or memory) is split by instance: its
    targets get the instances they are on, its busy time is theirs (agent.cost.mig).
    """
    buckets: dict[datetime, Usage] = defaultdict(Usage)
    for before, after in zip(observations, observations[1:], strict=False):
        length = (after.ts - before.ts).total_seconds()
        if length <= 0 or length > max_gap:
            continue
        energy = _energy_step(before.energy_joules, after.energy_joules)
        integrated = energy is None and after.power_watts is not None
        if integrated:
            energy = _power_step(before.power_watts, after.power_watts, length)
        split = shares(after.targets, split_rule, after.sm_utilization)
        utilization = after.utilization
        mig = instance_split(after.mig, mig_split)
        busy_split: Mapping[str, float] | None = None  # None: each target busy as the GPU
        if after.mig is not None and mig is not None:
            split = target_split(after.mig, mig.shares())
            busy_split = target_busy(after.mig, mig.shares())
            if utilization is None:  # NVML has none under MIG: the instances' busy shares
                utilization = gpu_busy(after.mig, mig.shares())
        pod_split = shares(after.pods, split_rule, after.pod_sm)
        pod_basis = basis_of(after.pods, after.pod_sm, split_rule)
        for start, lo, seconds in _spread(before.ts, after.ts, bucket_seconds):
            hi = lo + timedelta(seconds=seconds)
            for part, price in _priced(lo, hi, price_at):
                joules = None if energy is None else energy * part / length
                co2 = None if joules is None or co2_of is None else co2_of(joules, lo)
                usage = buckets[start]
                if after.mig is not None and mig is not None:
                    exact = partial(slice_parts, gpu=after.mig, split=mig)
                    cost = _add(usage, part, utilization, joules, price, split, exact, busy_split)
                    add_mig(usage.mig, part, cost, after.mig, mig)
                else:
                    cost = _add(usage, part, utilization, joules, price, split)
                _add_work(usage, part, after.sm_active, cost, joules, co2, split)
                # The GPU's own busy fraction (under MIG: its instances'), as its cost has.
                add_pods(usage.pods, part, utilization, cost, pod_split, pod_basis, bool(split))
                usage.power_integrated_seconds += part if integrated else 0.0
    return dict(buckets)


def _priced(
    lo: datetime, hi: datetime, price_at: PriceAt
) -> Iterable[tuple[float, GpuPrice | None]]:
    """(seconds, price) over (lo, hi], cut where the price changes (a rate's validity bound).

    The change instant is found by bisection to the millisecond, so any price source works and
    a slice with one price (nearly always) costs two look-ups.
    """
    price = price_at(lo)
    while price_at(hi) != price:
        a, b = lo, hi  # price_at(a) == price, price_at(b) != price
        while (b - a) > timedelta(milliseconds=1):
            mid = a + (b - a) / 2
            a, b = (mid, b) if price_at(mid) == price else (a, mid)
        yield (b - lo).total_seconds() if b < hi else (hi - lo).total_seconds(), price
        lo, price = b, price_at(b)
    if hi > lo:
        yield (hi - lo).total_seconds(), price


def _add(
    usage: Usage,
    seconds: float,
    utilization: float | None,
    joules: float | None,
    price: GpuPrice | None,
    split: Mapping[str, float],
    exact: Exact | None = None,
    busy_split: Mapping[str, float] | None = None,
) -> Decimal | None:
    """Uptime, busy time, energy, cost and allocations of one priced slice; its cost.
    ``exact`` gives the slice's idle cost and targets' costs from its cost where a finer split
    (MIG instances) must add up to them to the digit; ``busy_split`` each target's busy part
    of the GPU where it is not the GPU's busy time times its share (a MIG instance's own)."""
    busy = seconds * (utilization or 0.0)
    usage.observed_seconds += seconds
    usage.busy_seconds += busy
    if joules is not None:
        usage.energy_joules = (usage.energy_joules or 0.0) + joules
    cost = (
        None
        if price is None
        else price.cost(_dec(seconds), None if joules is None else _dec(joules))
    )
    idle = None if cost is None else cost * _dec(1 - (utilization or 0.0))
    parts = None if cost is None or exact is None else exact(cost)
    if parts is not None:
        idle = parts[0]
    usage.cost_usd = _plus(usage.cost_usd, cost)
    usage.idle_cost_usd = _plus(usage.idle_cost_usd, idle)
    for target, share in split.items():
        a = usage.allocations.setdefault(target, Allocation())
        a.seconds += seconds * share
        a.busy_seconds += busy * share if busy_split is None else seconds * busy_split[target]
        if parts is not None:
            a.cost_usd = _plus(a.cost_usd, parts[1].get(target, Decimal(0)))
        else:
            a.cost_usd = _plus(a.cost_usd, None if cost is None else cost * _dec(share))
    return cost


def _add_work(
    usage: Usage,
    seconds: float,
    sm_active: float | None,
    cost: Decimal | None,
    joules: float | None,
    co2: float | None,
    split: Mapping[str, float],
) -> None:
    """SM activity, CO2 and each target's share of the energy, for one priced slice."""
    if co2 is not None:
        usage.co2_grams = (usage.co2_grams or 0.0) + co2
    for target, share in split.items():
        a = usage.allocations[target]
        if joules is not None:
            a.energy_joules = (a.energy_joules or 0.0) + joules * share
        if co2 is not None:
            a.co2_grams = (a.co2_grams or 0.0) + co2 * share
    if sm_active is None:
        return
    usage.sm_observed_seconds += seconds
    usage.sm_active_seconds += seconds * sm_active
    idle = None if cost is None else cost * _dec(1 - sm_active)
    usage.sm_idle_cost_usd = _plus(usage.sm_idle_cost_usd, idle)


def _energy_step(before: float | None, after: float | None) -> float | None:
    if before is None or after is None:
        return None
    # The counter restarts at driver reload: the value after it is all new energy.
    return after - before if after >= before else after


def _power_step(before: float | None, after: float | None, seconds: float) -> float:
    """Joules over an interval from the power at its ends (trapezoid; the end alone when the
    start has none): for GPUs and sources without an energy counter."""
    assert after is not None
    watts = after if before is None else (before + after) / 2
    return watts * seconds


def _spread(
    start: datetime, end: datetime, size: int
) -> Iterable[tuple[datetime, datetime, float]]:
    """(bucket start, slice start, seconds) of the interval (start, end] over (b, b + size]."""
    step = timedelta(seconds=size)
    bucket = bucket_of(start, size)
    # The instant ``start`` itself belongs to the bucket that ends at or after it.
    while bucket < end:
        lo, hi = max(start, bucket), min(end, bucket + step)
        if hi > lo:
            yield bucket, lo, (hi - lo).total_seconds()
        bucket += step


def _dec(x: float) -> Decimal:
    # Seconds and joules come from timestamps and counters: 9 decimals keep micro-dollar
    # exactness without dragging float noise into Decimal sums.
    return Decimal(repr(round(x, 9)))


def _plus(total: Decimal | None, amount: Decimal | None) -> Decimal | None:
    if amount is None:
        return total
    return amount if total is None else total + amount
