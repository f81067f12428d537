"""The cost ledger's split of a GPU's slice of time by Kubernetes pod (agent.cost.pods gives
the pods' memory and SM utilization per tick).

A slice's cost goes to the pods in proportion to their shares, rounded to the ledger's 12
decimals, and the last pod (in name order) takes the remainder: a GPU's pods add up to its
cost to the digit in every bucket, so a month's sums add up too. Busy time is shared the same
way, so a pod's idle dollars are its share of the GPU's idle time at the time's own price.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal

from agent.cost.pods import NO_POD

PodKey = tuple[str, str]  # (namespace, pod)
NOBODY = (NO_POD, NO_POD)  # GPU time no pod held
CENT_OF_NANO = Decimal("0.000000000001")  # the ledger's NUMERIC(24, 12) scale


@dataclass
class PodShare:
    """One pod's sums on one GPU in one bucket; ``cost_usd`` None: no rate priced its time."""

    seconds: float = 0.0
    busy_seconds: float = 0.0
    cost_usd: Decimal | None = None
    sm_seconds: float = 0.0  # of ``seconds``, split by the pods' SM utilization
    memory_seconds: float = 0.0  # ... by their memory
    request_seconds: float = 0.0  # ... equally among the pods the kubelet gave the GPU
    # While no serving target held the GPU (agent.cost.pods_teams: a namespace's team's share)
    untargeted_seconds: float = 0.0
    untargeted_busy_seconds: float = 0.0
    untargeted_cost_usd: Decimal | None = None


def basis_of(pods: Mapping[PodKey, float], sm: Mapping[PodKey, float], rule: str) -> str:
    """How a slice with these pods is split: "request" (no process: the pods the kubelet gave
    the GPU, equally), "whole" (one pod, or nobody's time), "sm", "memory"; "equal" under that
    rule."""
    if pods and sum(pods.values()) <= 0 and NOBODY not in pods:
        return "request"
    if len(pods) <= 1:
        return "whole"
    if rule == "equal":
        return "equal"
    if all(p in sm for p in pods) and sum(sm[p] for p in pods) > 0:
        return "sm"
    return "memory"


def add_pods(
    into: dict[PodKey, PodShare],
    seconds: float,
    utilization: float | None,
    cost: Decimal | None,
    split: Mapping[PodKey, float],
    basis: str,
    targeted: bool,
) -> None:
    """Add one priced slice of a GPU to its pods' shares (``split``: pod -> share of 1);
    ``targeted``: a serving target held the GPU in it."""
    busy = seconds * (utilization or 0.0)
    parts = _exact_parts(cost, split)
    for pod, share in split.items():
        p = into.setdefault(pod, PodShare())
        p.seconds += seconds * share
        p.busy_seconds += busy * share
        if cost is not None:
            p.cost_usd = (p.cost_usd or Decimal(0)) + parts[pod]
        if basis == "sm":
            p.sm_seconds += seconds * share
        elif basis == "memory":
            p.memory_seconds += seconds * share
        elif basis == "request":
            p.request_seconds += seconds * share
        if not targeted:
            p.untargeted_seconds += seconds * share
            p.untargeted_busy_seconds += busy * share
            if cost is not None:
                p.untargeted_cost_usd = (p.untargeted_cost_usd or Decimal(0)) + parts[pod]


def _exact_parts(cost: Decimal | None, split: Mapping[PodKey, float]) -> dict[PodKey, Decimal]:
    if cost is None or not split:
        return {}
    pods = sorted(split)
    out = {pod: (cost * Decimal(repr(split[pod]))).quantize(CENT_OF_NANO) for pod in pods[:-1]}
    out[pods[-1]] = cost.quantize(CENT_OF_NANO) - sum(out.values(), Decimal(0))
    return out
