"""The cost ledger's split of a MIG GPU's slice of time by its MIG instances.

A MIG instance is a fixed part of its GPU, held whether it works or not: it is priced by its
share of the GPU, the slices its GPU instance holds out of the GPU's (``[cost] mig_split =
"slices"``, the default; NVML's slice counts) or its memory out of the GPU's ("memory"). Where a
GPU's slice counts are not all known the split falls back to memory, and the instance rows say
which basis priced them. The slices no instance holds are the GPU's "(free)" remainder, idle by
construction. Each instance's cost is rounded to the ledger's 12 decimals and the remainder
takes the rest: instances plus remainder are the GPU's cost to the digit in every bucket.

An instance is busy by its own SM activity (GPM per instance, nvmlGpmMigSampleGet), else by the
presence of processes on it (NVML gives no utilization under MIG): a busy-basis field per row
tells them apart. The GPU's own busy fraction is then its instances' busy shares' sum, so its
idle cost is its instances' idle costs plus the free remainder.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal

FREE = "(free)"  # the slices (or memory) no instance holds
CENT_OF_NANO = Decimal("0.000000000001")  # the ledger's NUMERIC(24, 12) scale
MIG_SPLITS = ("slices", "memory")


@dataclass(frozen=True, slots=True)
class MigInstance:
    """One tick's reading of one MIG instance; None: not reported."""

    slices: float | None = None
    memory_bytes: float | None = None  # the instance's memory size
    sm_active: float | None = None  # 0-1, GPM of the instance
    held: bool = False  # a process is on it
    targets: tuple[str, ...] = ()  # the serving targets whose processes are on it


@dataclass(frozen=True, slots=True)
class MigGpu:
    """One tick's MIG layout of a GPU: its slices and memory, and its instances."""

    slices: float | None
    memory_bytes: float | None
    instances: Mapping[str, MigInstance]


@dataclass
class MigShare:
    """One instance's (or the free remainder's) sums on one GPU in one bucket."""

    seconds: float = 0.0
    share_seconds: float = 0.0  # seconds x its share of the GPU
    busy_seconds: float = 0.0  # share_seconds while busy (SM activity, else presence)
    sm_seconds: float = 0.0  # of seconds, those whose busy time is GPM's SM activity
    slices: float | None = None  # its slices (the latest reading)
    basis: str = ""  # "slices" or "memory": what priced it
    cost_usd: Decimal | None = None
    idle_cost_usd: Decimal | None = None
    targets: set[str] = field(default_factory=set)


@dataclass(frozen=True, slots=True)
class MigSplit:
    """A MIG GPU's instances' parts (slices or bytes) of its ``total``, and the basis."""

    parts: Mapping[str, float]
    total: float
    basis: str  # "slices" or "memory"

    def shares(self) -> dict[str, float]:
        return {name: part / self.total for name, part in self.parts.items()}


def instance_split(gpu: MigGpu | None, rule: str) -> MigSplit | None:
    """The instances' parts of the GPU by ``rule``, else by the other basis; None when neither
    is known for every instance (the GPU is then priced whole, as before MIG pricing)."""
    if gpu is None or not gpu.instances:
        return None
    for basis in (rule, *(b for b in MIG_SPLITS if b != rule)):
        total = gpu.slices if basis == "slices" else gpu.memory_bytes
        parts = {
            name: (i.slices if basis == "slices" else i.memory_bytes)
            for name, i in gpu.instances.items()
        }
        if total and total > 0 and all(p is not None and p >= 0 for p in parts.values()):
            known = {name: p or 0.0 for name, p in parts.items()}
            # A layout over 100 % (a bad reading) is scaled down rather than priced twice.
            return MigSplit(known, max(total, sum(known.values())), basis)
    return None


def busy_of(instance: MigInstance) -> float:
    """The instance's busy fraction: its SM activity, else 1 while a process is on it."""
    if instance.sm_active is not None:
        return min(1.0, max(0.0, instance.sm_active))
    return 1.0 if instance.held else 0.0


def gpu_busy(gpu: MigGpu, shares: Mapping[str, float]) -> float:
    """The GPU's busy fraction: its instances' busy shares summed (the free part idles)."""
    return sum(share * busy_of(gpu.instances[name]) for name, share in shares.items())


def target_busy(gpu: MigGpu, shares: Mapping[str, float]) -> dict[str, float]:
    """Each target's busy part of the GPU: its instances' busy shares, as :func:`target_split`
    gives their shares (a target's busy time is its instances', not the whole GPU's)."""
    out: dict[str, float] = {}
    for name, share in shares.items():
        instance = gpu.instances[name]
        for target in instance.targets:
            part = share * busy_of(instance) / len(instance.targets)
            out[target] = out.get(target, 0.0) + part
    return out


def target_split(gpu: MigGpu, shares: Mapping[str, float]) -> dict[str, float]:
    """Each target's share of the GPU: the instances it is on, an instance shared by several
    targets equally; instances no target is on stay unallocated."""
    out: dict[str, float] = {}
    for name, share in shares.items():
        targets = gpu.instances[name].targets
        for target in targets:
            out[target] = out.get(target, 0.0) + share / len(targets)
    return out


def add_mig(
    into: dict[str, MigShare], seconds: float, cost: Decimal | None, gpu: MigGpu, split: MigSplit
) -> None:
    """Add one priced slice of time of a MIG GPU to its instances and the free remainder."""
    parts = _exact_parts(cost, split)
    shares = split.shares()
    free = max(0.0, 1.0 - sum(shares.values()))
    for name in [*shares, FREE]:
        m = into.setdefault(name, MigShare())
        instance = gpu.instances.get(name)
        share = free if instance is None else shares[name]
        busy = 0.0 if instance is None else busy_of(instance)
        m.seconds += seconds
        m.share_seconds += seconds * share
        m.busy_seconds += seconds * share * busy
        m.basis = split.basis
        if instance is not None:
            m.sm_seconds += seconds if instance.sm_active is not None else 0.0
            m.slices = instance.slices
            m.targets.update(instance.targets)
        else:
            m.slices = None if gpu.slices is None else round(gpu.slices * free, 9)
        if cost is not None:
            m.cost_usd = (m.cost_usd or Decimal(0)) + parts[name]
            m.idle_cost_usd = (m.idle_cost_usd or Decimal(0)) + _idle(parts[name], instance)


def slice_parts(cost: Decimal, gpu: MigGpu, split: MigSplit) -> tuple[Decimal, dict[str, Decimal]]:
    """A priced slice's idle cost (its instances' idle parts and the free part) and each
    target's cost (the parts of the instances it is on; an instance several targets share,
    equally, the last in name order taking the rounding): exactly what :func:`add_mig` adds
    to the instances' rows, so the GPU's and its targets' figures add up to theirs."""
    parts = _exact_parts(cost, split)
    idle = sum((_idle(part, gpu.instances.get(name)) for name, part in parts.items()), Decimal(0))
    targets: dict[str, Decimal] = {}
    for name in split.parts:
        names = gpu.instances[name].targets
        each = (parts[name] / len(names)).quantize(CENT_OF_NANO) if names else Decimal(0)
        for i, target in enumerate(names):
            mine = each if i < len(names) - 1 else parts[name] - each * (len(names) - 1)
            targets[target] = targets.get(target, Decimal(0)) + mine
    return idle, targets


def _idle(part: Decimal, instance: MigInstance | None) -> Decimal:
    """An instance's idle part of its cost (the free part is idle whole)."""
    if instance is None:
        return part
    return (part * _dec(1 - busy_of(instance))).quantize(CENT_OF_NANO)


def _exact_parts(cost: Decimal | None, split: MigSplit) -> dict[str, Decimal]:
    """Each instance's part of ``cost`` (cost x part / total, to 12 decimals: 3 of 7 slices is
    3/7 of the cost, not a rounded float's), and the free remainder the rest."""
    if cost is None:
        return {}
    total = _dec(split.total)
    out = {
        name: (cost * _dec(part) / total).quantize(CENT_OF_NANO)
        for name, part in split.parts.items()
    }
    out[FREE] = cost.quantize(CENT_OF_NANO) - sum(out.values(), Decimal(0))
    return out


def _dec(x: float) -> Decimal:
    return Decimal(repr(round(x, 12)))
