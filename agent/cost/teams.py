"""Cost per team and per project: the targets' allocated cost and useful tokens rolled up by
their configured labels (:mod:`agent.config.teams`).

A target's cost is what the cost ledger allocated to it (``gpu_allocations``); it is shared
among the models it served by their useful tokens exactly as a model's cost is
(:func:`agent.cost.summarize.model_shares`), so a team's figures are the sum of its targets'
model figures, and with a model filter only the wanted models' shares count. Idle dollars
are the target's allocated GPU time that was not busy, priced at what that time cost
(cost x (seconds - busy) / seconds). Unallocated GPU time (no target held the GPU) belongs
to no team and shows as :data:`NO_TARGET` where the fleet's total is known. A cost with
unpriced time in it is unknown, and so are its cost per million tokens and its idle dollars.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Protocol

from agent.config.teams import Labels
from agent.cost.summarize import MILLION, TokenKey, Tokens, model_shares

NO_TARGET = "(no target)"  # GPU time no serving target held: billed, and nobody's
HOUR = 3600

TargetKey = tuple[str, str]  # (host, target)


class Allocation(Protocol):
    """A target's sums from the cost ledger over a window (``gpu_allocations``)."""

    @property
    def cost(self) -> Decimal: ...
    @property
    def seconds(self) -> float: ...
    @property
    def busy(self) -> float: ...
    @property
    def unpriced(self) -> float: ...


@dataclass(frozen=True, slots=True)
class GroupLine:
    """A team's (or a project's) cost, GPU time and tokens over a window."""

    name: str
    cost_usd: Decimal = Decimal(0)
    idle_usd: Decimal = Decimal(0)
    seconds: float = 0.0  # allocated GPU time
    busy_seconds: float = 0.0
    unpriced_seconds: float = 0.0
    tokens: Tokens = Tokens()
    targets: frozenset[str] = frozenset()  # "host/target"

    def __add__(self, other: GroupLine) -> GroupLine:
        return GroupLine(
            self.name,
            self.cost_usd + other.cost_usd,
            self.idle_usd + other.idle_usd,
            self.seconds + other.seconds,
            self.busy_seconds + other.busy_seconds,
            self.unpriced_seconds + other.unpriced_seconds,
            self.tokens + other.tokens,
            self.targets | other.targets,
        )

    @property
    def cost_unknown(self) -> str | None:
        return cost_unknown(self.seconds, self.unpriced_seconds, self.tokens)

    def useful(self, rule: str) -> float:
        return self.tokens.useful(rule)

    def per_million(self, rule: str) -> Decimal | None:
        useful = self.useful(rule)
        if self.cost_unknown is not None or useful <= 0:
            return None
        return self.cost_usd / Decimal(repr(useful)) * MILLION

    @property
    def utilization(self) -> float | None:
        return self.busy_seconds / self.seconds if self.seconds > 0 else None


def cost_unknown(seconds: float, unpriced: float, tokens: Tokens) -> str | None:
    """Why a share of GPU time's cost is not known: no rate for some of that time, or tokens
    with no GPU time beside them (a collector off, a GPU not found). Unknown is never zero."""
    if unpriced > 0:
        return f"no rate for {unpriced / HOUR:.2f} of its {seconds / HOUR:.2f} GPU-hours"
    if seconds <= 0 and tokens.generated + tokens.prompt > 0:
        return "no GPU time observed for it"
    return None


def idle_usd(a: Allocation) -> Decimal:
    """What the allocated time that was not busy cost, at the time's own price."""
    if a.seconds <= 0:
        return Decimal(0)
    idle = max(a.seconds - a.busy, 0.0)
    return a.cost * Decimal(repr(idle)) / Decimal(repr(a.seconds))


def roll_up(
    group_of: Callable[[str, str], str],
    targets: Mapping[TargetKey, Allocation],
    tokens: Mapping[TokenKey, Tokens],
    rule: str,
    wanted: Callable[[str], bool] = lambda model: True,
) -> tuple[GroupLine, ...]:
    """Per group (``group_of(host, target)``), the wanted models' shares of its targets'
    allocations, and their tokens; sorted by name, the unlabelled last."""
    shares = model_shares(targets, tokens, rule)
    out: dict[str, GroupLine] = {}

    def add(host: str, target: str, line: GroupLine) -> None:
        name = group_of(host, target)
        out[name] = out.get(name, GroupLine(name)) + line

    for (host, target), a in targets.items():
        for model, share in shares[(host, target)].items():
            if not wanted(model):
                continue
            part = float(share)
            line = GroupLine(
                "",
                a.cost * share,
                idle_usd(a) * share,
                a.seconds * part,
                a.busy * part,
                a.unpriced * part,
                targets=_named(host, target),
            )
            add(host, target, line)
    for (host, target, model), t in tokens.items():
        if wanted(model):
            add(host, target, GroupLine("", tokens=t, targets=_named(host, target)))
    return tuple(sorted(out.values(), key=lambda g: (g.name.startswith("("), g.name)))


def _named(host: str, target: str) -> frozenset[str]:
    return frozenset({f"{host}/{target}"})


def no_target(
    cost: Decimal, seconds: float, unpriced: float, targets: Mapping[TargetKey, Allocation]
) -> GroupLine:
    """The GPU time (and its cost) no target held: the fleet's minus every allocation, all of
    it idle; its cost unknown where some of that time was unpriced."""
    allocated_cost = sum((a.cost for a in targets.values()), Decimal(0))
    left = max(cost - allocated_cost, Decimal(0))
    seconds_left = max(seconds - sum(a.seconds for a in targets.values()), 0.0)
    unpriced_left = max(unpriced - sum(a.unpriced for a in targets.values()), 0.0)
    return GroupLine(NO_TARGET, left, left, seconds_left, 0.0, unpriced_left)


def teams(
    labels: Labels,
    targets: Mapping[TargetKey, Allocation],
    tokens: Mapping[TokenKey, Tokens],
    rule: str,
    wanted: Callable[[str], bool] = lambda model: True,
) -> tuple[GroupLine, ...]:
    return roll_up(labels.team, targets, tokens, rule, wanted)


def projects(
    labels: Labels,
    targets: Mapping[TargetKey, Allocation],
    tokens: Mapping[TokenKey, Tokens],
    rule: str,
    wanted: Callable[[str], bool] = lambda model: True,
) -> tuple[GroupLine, ...]:
    return roll_up(labels.project, targets, tokens, rule, wanted)


def team_costs(labels: Labels, targets: Mapping[TargetKey, Decimal]) -> dict[str, Decimal]:
    """Each team's allocated cost from per-target costs (a budget's month to date)."""
    out: dict[str, Decimal] = defaultdict(Decimal)
    for (host, target), cost in targets.items():
        out[labels.team(host, target)] += cost
    return dict(out)
