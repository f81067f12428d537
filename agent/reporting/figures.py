"""A window's figures under the report's filters: which GPUs and targets count, and what each
model (or host) cost, kept busy and produced.

``hosts`` restricts every figure to those hosts (the reads already do). ``models`` restricts to
those models: their tokens, cost and latency; the targets that reported them (the ``model``
label on the token series); and the GPUs allocated to those targets in the period
(``gpu_allocations``). GPU-level figures (spend, GPU-hours, idle cost, the GPU rows and daily
series) count those GPUs whole, because a GPU is rented whole: a GPU shared with a model outside
the filter shows in full, while the model rows carry only their share. Alerts are kept when
their ``model``, ``target`` or ``gpu_uuid`` label is among the selected ones
(:meth:`agent.reporting.queries.Wanted.keeps_alert`, given :attr:`Figures.targets` and
:attr:`Figures.gpus`).

Cost per million useful tokens (useful by ``cost.useful_tokens``: "output", or "output+prompt"
with computed prompt tokens): per model, its targets' allocated cost (``gpu_allocations``) shared
among the models a target served by their useful tokens (as ``summarize``); per host and for the
fleet, the metered cost of the GPUs over their useful tokens.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from functools import cached_property

from agent.cost.summarize import MILLION, TokenKey, Tokens, model_shares
from agent.cost.teams import cost_unknown, idle_usd
from agent.reporting.ledger_sums import Allocated, Usage
from agent.reporting.queries import GpuKey, TargetKey, Wanted, Window
from agent.storage.buckets import sum_opt

HOUR = 3600


@dataclass(frozen=True)  # no slots: the per-target sums below are cached on the instance
class Figures:
    """A window after the filters: the GPUs and targets kept, and their sums."""

    window: Window
    rule: str
    gpus: frozenset[GpuKey]
    targets: frozenset[TargetKey]
    wanted: Wanted
    all_tokens: Mapping[TokenKey, Tokens]  # every model the hosts served (for cost shares)
    tokens: Mapping[TokenKey, Tokens]  # the wanted models'
    usage: Mapping[GpuKey, Usage]  # per kept GPU, over the window

    @classmethod
    def of(cls, window: Window, wanted: Wanted, rule: str) -> Figures:
        all_tokens = _sum_days(window.tokens.values())
        if wanted.models:
            targets = frozenset(
                {(h, t) for h, t, m in all_tokens if m in wanted.models}
                | {(h, t) for h, _, t in window.allocations if t in wanted.models}
            )
            gpus = frozenset(
                (h, g)
                for (h, g, t), days in window.allocations.items()
                if (h, t) in targets and sum(a.seconds for a in days.values()) > 0
            )
        else:
            targets = frozenset(
                {(h, t) for h, t, _ in all_tokens} | {(h, t) for h, _, t in window.allocations}
            )
            gpus = frozenset(window.usage)
        usage = {
            key: sum(days.values(), Usage()) for key, days in window.usage.items() if key in gpus
        }
        tokens = {k: t for k, t in all_tokens.items() if wanted.model(k[2])}
        return cls(window, rule, gpus, targets, wanted, all_tokens, tokens, usage)

    @property
    def total(self) -> Usage:
        return sum(self.usage.values(), Usage())

    @property
    def produced(self) -> Tokens:
        return sum(self.tokens.values(), Tokens())

    def allocated(self) -> Allocated:
        """Every target's allocation on the kept GPUs (a GPU counts whole)."""
        return sum(
            (
                a
                for (h, g, _), days in self.window.allocations.items()
                if (h, g) in self.gpus
                for a in days.values()
            ),
            Allocated(),
        )

    def target_totals(self, day: int | None = None) -> Mapping[TargetKey, Allocated]:
        if day is not None:
            return self._target_days.get(day, {})
        return self._target_totals

    @cached_property
    def _target_totals(self) -> dict[TargetKey, Allocated]:
        # Several sections ask; a fleet's month is ~60 k allocation rows to add up.
        return _totals(
            ((h, t), a)
            for (h, _, t), days in self.window.allocations.items()
            for a in days.values()
        )

    @cached_property
    def _target_days(self) -> dict[int, dict[TargetKey, Allocated]]:
        """Day -> each target's allocation that day, in one pass over the rows (a month's
        daily series asked per day walked every day's rows once per day)."""
        per_day: dict[int, list[tuple[TargetKey, Allocated]]] = defaultdict(list)
        for (h, _, t), days in self.window.allocations.items():
            for d, a in days.items():
                per_day[d].append(((h, t), a))
        return {d: _totals(rows) for d, rows in per_day.items()}

    def model_sums(self, day: int | None = None) -> dict[str, Share]:
        """The wanted models' cost, busy time and tokens (over one day, or the window): each
        target's allocated cost and busy GPU time shared among its models as agent.cost.summarize
        shares cost (by useful tokens)."""
        tokens = self.all_tokens if day is None else _sum_days([self.window.tokens.get(day, {})])
        targets = self.target_totals(day)
        shares = model_shares(targets, tokens, self.rule)
        out: dict[str, Share] = defaultdict(Share)
        for key, a in targets.items():
            for model, share in shares[key].items():
                part = float(share)
                out[model] = out[model] + Share(
                    a.cost * share,
                    a.busy * part,
                    seconds=a.seconds * part,
                    unpriced=a.unpriced * part,
                    idle=idle_usd(a) * share,
                    energy=None if a.energy is None else a.energy * part,
                    co2=None if a.co2 is None else a.co2 * part,
                )
        for (_, _, model), t in tokens.items():
            out[model] = out[model] + Share(tokens=t)
        return {m: out[m] for m in sorted(out) if self.wanted.model(m)}


@dataclass(frozen=True, slots=True)
class Share:
    """What a model (or a host) cost, kept busy and produced."""

    cost: Decimal = Decimal(0)
    busy: float = 0.0
    tokens: Tokens = Tokens()
    seconds: float = 0.0  # the GPU time behind the cost
    unpriced: float = 0.0  # of which no rate priced
    idle: Decimal = Decimal(0)  # what its allocated time that was not busy cost
    energy: float | None = None  # joules: its targets' share of their GPUs' energy
    co2: float | None = None  # grams

    def __add__(self, other: Share) -> Share:
        return Share(
            self.cost + other.cost,
            self.busy + other.busy,
            self.tokens + other.tokens,
            self.seconds + other.seconds,
            self.unpriced + other.unpriced,
            self.idle + other.idle,
            sum_opt(self.energy, other.energy),
            sum_opt(self.co2, other.co2),
        )

    @property
    def cost_unknown(self) -> str | None:
        return cost_unknown(self.seconds, self.unpriced, self.tokens)

    def per_million(self, rule: str) -> Decimal | None:
        if self.cost_unknown is not None:
            return None
        return per_million(self.cost, self.tokens.useful(rule))


def _totals(rows: Iterable[tuple[TargetKey, Allocated]]) -> dict[TargetKey, Allocated]:
    """Allocations summed per target, in plain numbers: a fleet's month is ~60 k rows, and
    adding frozen values made one object per row."""
    cost: dict[TargetKey, Decimal] = defaultdict(Decimal)
    seconds: dict[TargetKey, float] = defaultdict(float)
    busy: dict[TargetKey, float] = defaultdict(float)
    unpriced: dict[TargetKey, float] = defaultdict(float)
    energy: dict[TargetKey, float | None] = defaultdict(lambda: None)
    co2: dict[TargetKey, float | None] = defaultdict(lambda: None)
    for key, a in rows:
        cost[key] += a.cost
        seconds[key] += a.seconds
        busy[key] += a.busy
        unpriced[key] += a.unpriced
        energy[key] = sum_opt(energy[key], a.energy)
        co2[key] = sum_opt(co2[key], a.co2)
    return {
        key: Allocated(cost[key], seconds[key], busy[key], unpriced[key], energy[key], co2[key])
        for key in cost
    }


def _sum_days(days: Iterable[Mapping[TokenKey, Tokens]]) -> dict[TokenKey, Tokens]:
    out: dict[TokenKey, Tokens] = defaultdict(Tokens)
    for day in days:
        for key, t in day.items():
            out[key] = out[key] + t
    return dict(out)


def per_million(cost: Decimal, tokens: float) -> Decimal | None:
    if tokens <= 0:
        return None
    return cost / Decimal(repr(tokens)) * MILLION


def hours(seconds: float) -> float:
    return seconds / HOUR
