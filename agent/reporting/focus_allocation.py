"""FOCUS 1.3 split cost allocation: a GPU's charge (the *origin charge*) split into *allocated
charges*, one per thing that used it, so the parts add up to the charge exactly.

FOCUS 1.3 ("Data Generator-Calculated Split Cost Allocation Handling") replaces the origin
charge by its allocated charges: their costs and quantities add up to the origin's, and their
dimensions, unit prices and Tags are the origin's. Each names the method that split it
(``AllocatedMethodId``, documented in docs/cost.md), what it went to (``AllocatedResourceId``,
null for the unallocated portion) and that thing's own tags (``AllocatedTags``).

Who used a GPU comes from allocation sources, asked in turn; the first that splits a charge
splits it (:func:`sources`). :class:`PodSource`: on Kubernetes, the pods as the ledger split
the GPU by pod. :class:`TargetSource`: the serving targets as the cost ledger allocated them
(by SM utilization, memory share or equally). Each one's part is cut into its busy and idle
time (:func:`busy_and_idle`), and the GPU time nobody held is the unallocated portion
(:func:`exact_parts`). :class:`MigSource`, first: a MIG GPU's instances, each priced by its
share of the GPU (agent.cost.mig), the free slices the unallocated portion. A source for
tenants is another :class:`AllocationSource` (or one that refines a target's parts, built on
the same two functions).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Protocol

from agent.config.teams import UNLABELLED, Labels
from agent.cost.pods import NO_POD
from agent.reporting.focus_charges import Charge
from agent.reporting.focus_mig import MigUse
from agent.reporting.focus_shares import PodUse, Shares, TargetUse

_MONEY = Decimal("1e-12")  # the ledger's scale
_SECONDS = Decimal("1e-6")
_HELD = Decimal("0.001")  # unallocated time shorter than this is the ledger's rounding

# AllocatedMethodId values and what each means; docs/cost.md documents each (FOCUS: a method's
# documentation names one AllocatedMethodId).
SOLE_TARGET = "gpuwatch-sole-target"
SM_SHARE = "gpuwatch-sm-utilization-share"
MEMORY_SHARE = "gpuwatch-memory-share"
SM_ELSE_MEMORY = "gpuwatch-sm-utilization-else-memory-share"
EQUAL_SHARE = "gpuwatch-equal-share"
POD_SM = "gpuwatch-pod-sm-utilization-share"
POD_MEMORY = "gpuwatch-pod-memory-share"
POD_REQUEST = "gpuwatch-pod-request-share"
POD_MIXED = "gpuwatch-pod-share"
MIG_SLICES = "gpuwatch-mig-slice-share"
MIG_MEMORY = "gpuwatch-mig-memory-share"
METHODS = {
    SOLE_TARGET: "each tick's GPU time went wholly to the one target on the GPU",
    SM_SHARE: "shared ticks split by the targets' processes' SM utilization",
    MEMORY_SHARE: "shared ticks split by the targets' processes' GPU memory",
    SM_ELSE_MEMORY: "shared ticks split by SM utilization where NVML gave it, else by memory",
    EQUAL_SHARE: "shared ticks split equally among the targets (cost.shared_gpu_split)",
    POD_SM: "split among the Kubernetes pods by their processes' SM utilization",
    POD_MEMORY: "split among the Kubernetes pods by their processes' GPU memory",
    POD_REQUEST: "split equally among the pods the kubelet gave the GPU (no process on it)",
    POD_MIXED: "split among the pods by SM utilization, memory or the kubelet's assignment, "
    "as each tick allowed",
    MIG_SLICES: "split among the GPU's MIG instances by their slices; free slices unallocated",
    MIG_MEMORY: "split among the GPU's MIG instances by their memory (cost.mig_split); free "
    "memory unallocated",
}
BUSY, IDLE, UNALLOCATED = "busy", "idle", "unallocated"
PORTION_TAG = "gpuwatch/portion"
NO_LABELS = Labels()


@dataclass(frozen=True, slots=True)
class Part:
    """One allocated charge: its cost and GPU-seconds (exact), what it went to (None: the
    unallocated portion) and that thing's tags."""

    resource_id: str | None
    resource_name: str | None
    portion: str  # busy, idle or unallocated
    cost: Decimal
    seconds: Decimal
    tags: Mapping[str, str] = field(default_factory=dict)
    output_tokens: float | None = None
    prompt_tokens: float | None = None


@dataclass(frozen=True, slots=True)
class Allocation:
    """An origin charge split by one method into parts that add up to it."""

    method_id: str
    parts: tuple[Part, ...]


class AllocationSource(Protocol):
    """Splits a priced charge into allocated parts, or says None: not mine to split."""

    def allocate(self, charge: Charge) -> Allocation | None: ...


@dataclass(frozen=True, slots=True)
class TargetSource:
    """The serving targets that held the GPU, as the cost ledger allocated its time."""

    labels: Labels = NO_LABELS
    rule: str = "memory"  # cost.shared_gpu_split

    def allocate(self, charge: Charge) -> Allocation | None:
        if charge.cost_usd is None or not charge.shares.uses:
            return None
        parts = [p for use in charge.shares.uses for p in self._parts(charge, use)]
        return Allocation(method_of(charge.shares, self.rule), exact_parts(charge, parts))

    def _parts(self, charge: Charge, use: TargetUse) -> list[Part]:
        return busy_and_idle(
            f"{charge.host}/{use.target}", f"{use.target} on {charge.host}",
            self._tags(charge.host, use), use.cost_usd, use.seconds, use.busy_seconds,
            (use.output_tokens, use.prompt_tokens),
        )  # fmt: skip

    def _tags(self, host: str, use: TargetUse) -> dict[str, str]:
        """The target's tags: FOCUS wants every tag that applies to the allocated resource, and
        none already in the origin's Tags (the GPU's own: host and index)."""
        tags = {"gpuwatch/target": use.target}
        if use.models:
            tags["gpuwatch/model"] = ",".join(use.models)
        if self.labels.entries:  # user-defined tags, without the prefix (as in Tags for 1.0)
            tags["team"] = self.labels.team(host, use.target)
            tags["project"] = self.labels.project(host, use.target)
        return tags


@dataclass(frozen=True, slots=True)
class PodSource:
    """On Kubernetes, the pods that held the GPU, as the cost ledger split it by pod; the time
    no pod held (``(no pod)``) is the unallocated portion. Processes in no pod gpuwatch could
    name are the pod ``(unattributed)``: allocated, to nobody known."""

    labels: Labels = NO_LABELS

    def allocate(self, charge: Charge) -> Allocation | None:
        pods = [p for p in charge.shares.pods if p.pod != NO_POD]
        if charge.cost_usd is None or not pods:
            return None
        parts = [part for pod in pods for part in self._parts(charge.host, pod)]
        return Allocation(pod_method(pods), exact_parts(charge, parts))

    def _parts(self, host: str, pod: PodUse) -> list[Part]:
        tags = {"gpuwatch/namespace": pod.namespace, "gpuwatch/pod": pod.pod}
        if self.labels.namespaces:
            label = self.labels.of_namespace(pod.namespace)
            tags["team"] = label.team or UNLABELLED
            tags["project"] = label.project or UNLABELLED
        return busy_and_idle(
            f"{host}/{pod.namespace}/{pod.pod}", f"pod {pod.namespace}/{pod.pod} on {host}",
            tags, pod.cost_usd, pod.seconds, pod.busy_seconds, (None, None),
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class MigSource:
    """A MIG GPU's instances, as the cost ledger priced them (their share of the GPU by slices
    or memory); the slices no instance held are the unallocated portion."""

    def allocate(self, charge: Charge) -> Allocation | None:
        migs = charge.shares.migs
        if charge.cost_usd is None or not migs:
            return None
        parts = [part for m in migs for part in self._parts(charge, m)]
        memory = any(m.basis == "memory" for m in migs)
        return Allocation(MIG_MEMORY if memory else MIG_SLICES, exact_parts(charge, parts))

    def _parts(self, charge: Charge, m: MigUse) -> list[Part]:
        tags = {"gpuwatch/mig_instance": m.instance}
        if m.targets:
            tags["gpuwatch/target"] = ",".join(m.targets)
        return busy_and_idle(
            f"{charge.host}/{m.instance}", f"MIG {m.instance} on {charge.host}", tags,
            m.cost_usd, m.seconds, m.busy_seconds, (None, None),
        )  # fmt: skip


def sources(labels: Labels = NO_LABELS, rule: str = "memory") -> tuple[AllocationSource, ...]:
    """The allocation sources, most specific first: the first that splits a charge splits it.
    A MIG GPU's instances, else pods where the ledger split a GPU by pod (on Kubernetes), else
    the serving targets. Tenants go before them when they exist."""
    return MigSource(), PodSource(labels), TargetSource(labels, rule)


def busy_and_idle(
    rid: str,
    name: str,
    tags: Mapping[str, str],
    cost_usd: Decimal | None,
    seconds_held: float,
    busy_seconds: float,
    tokens: tuple[float | None, float | None],
) -> list[Part]:
    """The busy and the idle part of what one thing held (either left out when it is empty);
    its tokens on the first, since tokens are the thing's, not its busy or idle time's."""
    cost = cost_usd or Decimal(0)
    seconds = _seconds(seconds_held)
    busy = min(_seconds(busy_seconds), seconds)
    idle = _idle_cost(cost, seconds, busy)
    parts = [
        Part(rid, name, BUSY, cost - idle, busy, {**tags, PORTION_TAG: BUSY}, *tokens),
        Part(f"{rid}/idle", f"{name} (idle)", IDLE, idle, seconds - busy,
             {**tags, PORTION_TAG: IDLE}),
    ]  # fmt: skip
    kept = [p for p in parts if p.seconds > 0 or p.cost != 0] or parts[:1]
    if kept[0] is not parts[0]:
        first = kept[0]
        kept[0] = Part(first.resource_id, first.resource_name, first.portion, first.cost,
                       first.seconds, first.tags, *tokens)  # fmt: skip
    return kept


def pod_method(pods: Sequence[PodUse]) -> str:
    """The AllocatedMethodId of a split by pod: the rule (or rules) the ledger's ticks used."""
    used = [
        method
        for method, seconds in (
            (POD_SM, sum(p.sm_seconds for p in pods)),
            (POD_MEMORY, sum(p.memory_seconds for p in pods)),
            (POD_REQUEST, sum(p.request_seconds for p in pods)),
        )
        if seconds > 0
    ]
    return used[0] if len(used) == 1 else POD_MIXED


def allocate(charge: Charge, among: Sequence[AllocationSource]) -> Allocation | None:
    for source in among:
        allocation = source.allocate(charge)
        if allocation is not None:
            return allocation
    return None


def method_of(shares: Shares, rule: str) -> str:
    """The AllocatedMethodId of a charge's split: which rule the ledger applied to its shared
    ticks. A charge with no shared tick recorded was held by one target, or by several one
    after the other (or before the rule was recorded): the ledger's own rule for it."""
    basis = shares.basis
    if basis is None or not (basis.sm_ticks or basis.memory_ticks):
        if len(shares.uses) <= 1:
            return SOLE_TARGET
        return EQUAL_SHARE if rule == "equal" else MEMORY_SHARE
    if rule == "equal":
        return EQUAL_SHARE
    if not basis.memory_ticks:
        return SM_SHARE
    return MEMORY_SHARE if not basis.sm_ticks else SM_ELSE_MEMORY


def exact_parts(charge: Charge, parts: Sequence[Part]) -> tuple[Part, ...]:
    """``parts`` plus the unallocated portion, adding up to the charge's cost and GPU-seconds
    exactly. The ledger splits each tick's cost by float shares rounded to 9 decimals, so the
    targets' costs may miss the GPU's by a few 1e-12 dollars when they held all of its time:
    that rounding goes to the largest part, not into an unallocated row of no time."""
    assert charge.cost_usd is not None
    cost = charge.cost_usd - sum((p.cost for p in parts), Decimal(0))
    seconds = _seconds(charge.observed_seconds) - sum((p.seconds for p in parts), Decimal(0))
    if seconds >= _HELD or not parts:
        return (*parts, Part(None, None, UNALLOCATED, cost, seconds, {PORTION_TAG: UNALLOCATED}))
    i = max(range(len(parts)), key=lambda k: parts[k].cost)
    p = parts[i]
    fixed = Part(p.resource_id, p.resource_name, p.portion, p.cost + cost, p.seconds + seconds,
                 p.tags, p.output_tokens, p.prompt_tokens)  # fmt: skip
    return (*parts[:i], fixed, *parts[i + 1 :])


def _idle_cost(cost: Decimal, seconds: Decimal, busy: Decimal) -> Decimal:
    """The cost of a target's time that was not busy: its cost x idle share (as agent.cost.teams
    prices idle dollars)."""
    if seconds <= 0:
        return Decimal(0)
    return (cost * (seconds - busy) / seconds).quantize(_MONEY)


def _seconds(value: float) -> Decimal:
    return Decimal(repr(round(value, 6))).quantize(_SECONDS)
