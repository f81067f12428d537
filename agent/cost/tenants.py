"""Who pays behind a gateway: each model's real cost split among the gateway's tenants (API
keys, users, teams) by their share of the model's useful tokens. docs/tenants.md.

The rule, per model over a window:
- the model's cost (busy and idle GPU time, as allocated to its targets: ``Summary.models``)
  and its idle dollars are split by ``tenant tokens / D``, where ``D`` is the larger of the
  model's useful tokens as gpuwatch counts them (the engines' counters) and the sum of its
  tenants' tokens as the gateway counts them (``[cost] useful_tokens`` decides which: output,
  or output and prompt). The gateway gives the shares; gpuwatch's count says how much of the
  model went through no tenant at all;
- what no tenant accounts for (traffic that bypassed the gateway, requests without a key) is
  the line :data:`UNATTRIBUTED`;
- each tenant's share is rounded to the step its output shows money in (the micro-dollar in
  ``gpuwatch cost``, the cent in the report); the split starts from the model's cost as shown
  (rounded to that step), and the rounding remainder goes to the unattributed line when there
  is one (it holds what the shares do not), else to the largest tenant line, so the lines add
  up to the model's shown cost exactly.
A model whose cost is unknown (no rate for some of its GPU time) leaves its tenants' cost
unknown (None), never 0. Gateway models no GPU of the fleet served (an API model routed by the
same gateway) have no real cost here and are listed apart.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from decimal import ROUND_HALF_EVEN, Decimal

from agent.cost.summarize import MILLION, Summary, model_shares
from agent.cost.teams import idle_usd
from agent.cost.tenant_reads import TenantKey, TenantUse

UNATTRIBUTED = "(unattributed)"
MICRO = Decimal("0.000001")


@dataclass(frozen=True, slots=True)
class ModelCost:
    """What a model cost over a window, as the output that splits it shows it."""

    name: str
    cost_usd: Decimal
    useful_tokens: float
    idle_usd: Decimal
    cost_unknown: str | None = None  # set: its tenants' cost is unknown too


@dataclass(frozen=True, slots=True)
class TenantModel:
    """A tenant's part of one model over a window."""

    tenant: str
    model: str
    tokens: float  # useful tokens as the gateway counts them; unattributed: the model's rest
    share: Decimal  # of the model's cost
    cost_usd: Decimal | None  # rounded to the output's step; None: the model's cost is unknown
    idle_usd: Decimal | None
    list_usd: Decimal | None  # the gateway's list-price spend; None where it gave none
    # The share unrounded: what cost per million tokens and the idle share are computed from
    # (a cent-rounded line of a few cents would make them jump by a third).
    exact_cost: Decimal | None = None
    exact_idle: Decimal | None = None


@dataclass(frozen=True, slots=True)
class TenantLine:
    """A tenant over every model it used."""

    name: str
    parts: tuple[TenantModel, ...]

    @property
    def tokens(self) -> float:
        return sum(p.tokens for p in self.parts)

    @property
    def cost_usd(self) -> Decimal | None:
        return _sum([p.cost_usd for p in self.parts])

    @property
    def idle_usd(self) -> Decimal | None:
        return _sum([p.idle_usd for p in self.parts])

    @property
    def idle_share(self) -> Decimal | None:
        cost = _sum([p.exact_cost for p in self.parts])
        idle = _sum([p.exact_idle for p in self.parts])
        return None if cost is None or idle is None or cost <= 0 else idle / cost

    @property
    def per_million(self) -> Decimal | None:
        cost = _sum([p.exact_cost for p in self.parts])
        if cost is None or self.tokens <= 0:
            return None
        return cost / Decimal(repr(self.tokens)) * MILLION

    @property
    def list_usd(self) -> Decimal | None:
        """The gateway's list-price spend over the models whose real cost is known."""
        return _sum([p.list_usd for p in self.parts])

    @property
    def overcharged_usd(self) -> Decimal | None:
        """List price minus real cost: above 0, the gateway's price charges the tenant more
        than its GPU time cost; below 0, less. None where either is unknown."""
        cost, listed = self.cost_usd, self.list_usd
        return None if cost is None or listed is None else listed - cost


@dataclass(frozen=True, slots=True)
class Tenants:
    lines: tuple[TenantLine, ...]  # by name, the unattributed line last
    models: tuple[str, ...]  # the fleet's models the gateways reported tenants for
    unserved: tuple[str, ...]  # gateway models no GPU of the fleet served


def tenants(
    models: Iterable[ModelCost],
    use: Mapping[TenantKey, TenantUse],
    rule: str,
    step: Decimal = MICRO,
) -> Tenants:
    """Every model with tenants, split by :func:`split_model`; tenant lines over all models."""
    by_model: dict[str, dict[str, TenantUse]] = defaultdict(dict)
    for (model, tenant), u in use.items():
        by_model[model][tenant] = u
    lines = {m.name: m for m in models}
    parts: dict[str, list[TenantModel]] = defaultdict(list)
    for model, used in sorted(by_model.items()):
        if model not in lines:
            continue
        for part in split_model(lines[model], used, rule, step):
            parts[part.tenant].append(part)
    ordered = sorted(parts, key=lambda n: (n == UNATTRIBUTED, n))
    return Tenants(
        tuple(TenantLine(n, tuple(parts[n])) for n in ordered),
        tuple(m for m in sorted(by_model) if m in lines),
        tuple(m for m in sorted(by_model) if m not in lines),
    )


def summary_models(summary: Summary, rule: str) -> list[ModelCost]:
    """The models of a cost summary (``gpuwatch cost``), each with its idle dollars."""
    idle = model_idle(summary, rule)
    return [
        ModelCost(m.name, m.cost_usd, m.useful_tokens, idle.get(m.name, Decimal(0)), m.cost_unknown)
        for m in summary.models
    ]


def model_idle(summary: Summary, rule: str) -> dict[str, Decimal]:
    """Each model's idle dollars: its targets' idle time at its price, by the model's share
    of each target (the same shares its cost is split by)."""
    out: dict[str, Decimal] = defaultdict(Decimal)
    shares = model_shares(summary.targets, summary.tokens, rule)
    for key, use in summary.targets.items():
        for model, share in shares[key].items():
            out[model] += idle_usd(use) * share
    return dict(out)


def split_model(
    model: ModelCost, used: Mapping[str, TenantUse], rule: str, step: Decimal = MICRO
) -> list[TenantModel]:
    """One model's cost and idle dollars among its tenants (the module's rule)."""
    tokens = {t: u.useful(rule) for t, u in used.items() if u.useful(rule) > 0}
    denominator = max(model.useful_tokens, sum(tokens.values()))
    names = sorted(tokens, key=lambda t: (-tokens[t], t))
    shares = {t: Decimal(repr(tokens[t] / denominator)) for t in names} if denominator else {}
    unknown = model.cost_unknown is not None
    # Whether the tenants account for every token: then no unattributed line, the rounding
    # remainder goes to the largest tenant.
    whole = bool(names) and sum(tokens.values()) >= denominator
    costs = _portions(model.cost_usd.quantize(step, ROUND_HALF_EVEN), shares, names, whole, step)
    idles = _portions(model.idle_usd.quantize(step, ROUND_HALF_EVEN), shares, names, whole, step)

    def part(tenant: str, count: float, share: Decimal, listed: Decimal | None) -> TenantModel:
        if unknown:
            return TenantModel(tenant, model.name, count, share, None, None, listed)
        return TenantModel(tenant, model.name, count, share, costs[tenant], idles[tenant], listed,
                           model.cost_usd * share, model.idle_usd * share)  # fmt: skip

    out = [part(t, tokens[t], shares[t], _list_price(used[t])) for t in names]
    if not whole:
        rest = denominator - sum(tokens.values())
        share = Decimal(repr(rest / denominator)) if denominator else Decimal(1)
        out.append(part(UNATTRIBUTED, rest, share, None))
    return out


def _portions(
    total: Decimal, shares: Mapping[str, Decimal], names: Sequence[str], whole: bool, step: Decimal
) -> dict[str, Decimal]:
    """``total`` by ``shares``, each rounded to ``step``; the remainder to the
    largest share (``names[0]``) where the tenants are ``whole``, else to the unattributed
    line."""
    out = {t: (total * shares[t]).quantize(step, ROUND_HALF_EVEN) for t in names}
    remainder = total - sum(out.values(), Decimal(0))
    if whole:
        out[names[0]] += remainder
    else:
        out[UNATTRIBUTED] = remainder
    return out


def _list_price(u: TenantUse) -> Decimal | None:
    return None if u.spend_usd is None else Decimal(repr(u.spend_usd)).quantize(MICRO)


def _sum(values: Sequence[Decimal | None]) -> Decimal | None:
    if any(v is None for v in values):
        return None
    return sum((v for v in values if v is not None), Decimal(0))
