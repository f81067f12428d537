"""The report's recommendations, each with the numbers behind it (a month is 730 hours,
8,760 / 12).

Every per-day and per-month figure is scaled from the hours the GPUs were *observed* in the
period (:mod:`agent.reporting.observed`), not from the period's calendar length, and each
recommendation says how many hours it was measured over. Under ``[cost] min_observed``
(default 24 h) the per-day and per-month figures are withheld, with the reason: the advice then
gives what the observed time itself cost, and no saving.

- pod vs serverless vs API per model (:mod:`agent.cost.breakeven`) at the measured duty cycle:
  requests per day, busy GPU-seconds per request (the model's share of its GPUs' busy time) and
  output tokens per request over the observed hours, as ``gpuwatch breakeven`` measures them;
  the pod costs what the model's GPUs cost per observed hour, as deployed (not right-sized:
  the saving is against what is paid now). Serverless at $2.50 per GPU-hour and an API at $0.40
  per million tokens (economics.md's worked break-even figures) unless
  ``[alerts.rules.CostPerMtokHigh] api_usd_per_million`` names the API price to compare with.
  Cold starts are not counted (the burst count is not measured).
- a smaller GPU: a serving GPU whose VRAM peak plus a 20 % margin (economics.md keeps 15-20 %
  against out-of-memory; the safe end) fits a smaller card of :data:`CATALOG` that costs less
  per hour than the GPU's metered rate.
- consolidation: GPUs under 50 % busy; how many GPUs their busy time needs at a 70 % target
  utilisation, and what releasing the most expensive of the rest saves.
- a replica (:mod:`agent.reporting.replica_advice`): a model whose KV cache filled while
  requests waited; its GPUs are left out of consolidation, however idle they look.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from agent.config.settings import Config
from agent.cost.breakeven import (
    OPTIONS,
    Breakeven,
    Prices,
    Workload,
    compare,
    figure,
    percent,
    usd,
)
from agent.cost.breakeven import hours as observed_text
from agent.cost.measured import withheld_reason
from agent.cost.summarize import TokenKey
from agent.reporting.figures import HOUR, Figures, Share
from agent.reporting.model import GpuRow, Period, Recommendation
from agent.reporting.observed import model_observed_hours
from agent.reporting.replica_advice import replica_advice
from agent.reporting.serving_reads import TargetServing

GiB = 1 << 30
HOURS_PER_MONTH = Decimal(730)  # 8,760 / 12: what "a month" of savings means

# Prices the comparison uses when the configuration names none: economics.md, "Pod (dedicated)
# vs serverless vs API", worked break-even (a serverless A100 80GB at $2.50/h; a hosted token
# API at $0.40 per million tokens).
SERVERLESS_USD_PER_HOUR = Decimal("2.50")
API_USD_PER_MILLION = Decimal("0.40")
VRAM_MARGIN = Decimal("0.20")  # economics.md "Sizing facts": keep 15-20 % against OOM
LOW_UTILIZATION = 0.5  # below this a GPU is a consolidation candidate (economics.md: x2 cost)
TARGET_UTILIZATION = 0.7  # what consolidated GPUs may run at, leaving room for peaks


@dataclass(frozen=True, slots=True)
class CatalogGpu:
    name: str
    memory_gb: int  # as the vendors print it, in 10^9 bytes
    usd_per_hour: Decimal  # a typical on-demand price per GPU-hour
    source: str

    @property
    def memory_bytes(self) -> int:
        # Decimal GB are a little under what the cards report usable (an L4's 24 GB is 22.4 GiB,
        # NVML shows 22.5 GiB; an H200's 141 GB is 131 GiB of its 139.8): a fit here fits.
        return self.memory_gb * 10**9


# Smaller GPUs to suggest. Memory: economics.md "Sizing facts" (the rough catalogue). Prices:
# the project's reference notes, billing-apis.md section 5 "Rate-card defaults: published
# on-demand prices", which transcribe the vendors' pages with dates: Modal per-second prices
# (modal.com/pricing, via api-evangelist/modal-labs, 2026-07; techbytes.app 2026-05), Lambda
# (its /instance-types API, 2026-07-30; lambda.ai/instances, 2026-09-20), RunPod Secure Cloud
# (runpod.io/pricing, via datareceipts, 2026-11-09). Where several are listed, the higher, so
# that a saving is not overstated. Live prices differ: the recommendation names its source.
CATALOG = (
    CatalogGpu("T4 16GB", 16, Decimal("0.59"), "Modal $0.000164/s"),
    CatalogGpu("L4 24GB", 24, Decimal("0.80"), "Modal $0.000222/s"),
    CatalogGpu("A10 24GB", 24, Decimal("1.29"), "Lambda on-demand, 2026-07"),
    CatalogGpu("A100 40GB", 40, Decimal("1.99"), "Lambda on-demand, 2026-07"),
    CatalogGpu("A100 80GB", 80, Decimal("2.79"), "Lambda 8x SXM, 2026-09"),
    CatalogGpu("H100 80GB", 80, Decimal("3.99"), "RunPod Secure SXM, 2026-11"),
    CatalogGpu("H200 141GB", 141, Decimal("4.54"), "Modal $0.001261/s"),
    CatalogGpu("B200 180GB", 180, Decimal("6.69"), "Lambda 8x, 2026-09"),
)


def recommendations(
    f: Figures,
    gpus: Sequence[GpuRow],
    config: Config,
    period: Period,
    now: datetime,
    serving: Mapping[TokenKey, TargetServing] | None = None,
) -> tuple[Recommendation, ...]:
    least = config.cost.min_observed / HOUR
    replicas, held = replica_advice(f, gpus, serving or {})
    found = [
        *_deployment_advice(f, config, least),
        *_smaller_gpus(f, gpus, least),
        # A GPU whose model needs a replica is not spare, however idle it looks.
        *_consolidation([g for g in gpus if (g.host, g.gpu_uuid) not in held], least),
        *replicas,
    ]
    return tuple(
        sorted(
            found, key=lambda r: (r.saving_usd_per_month is None, -(r.saving_usd_per_month or 0))
        )
    )


def _api_price(config: Config) -> tuple[Decimal, str]:
    spec = config.alerts.rules.get("CostPerMtokHigh")
    configured = None if spec is None else spec.thresholds.get("api_usd_per_million")
    if configured is not None:
        return Decimal(
            repr(float(configured))
        ), "[alerts.rules.CostPerMtokHigh] api_usd_per_million"
    return API_USD_PER_MILLION, (
        "a typical hosted API's price; set [alerts.rules.CostPerMtokHigh] api_usd_per_million "
        "to compare with yours"
    )


def _deployment_advice(f: Figures, config: Config, least: float) -> list[Recommendation]:
    """Per model: pod (what its GPUs cost now) vs serverless vs API at its measured load."""
    api, api_source = _api_price(config)
    observed = model_observed_hours(f)
    out = []
    for model, m in f.model_sums().items():
        seen = observed.get(model, 0.0)
        if m.tokens.requests <= 0 or m.cost <= 0 or seen <= 0:
            continue
        seen_hours = Decimal(repr(seen))
        prices = Prices(
            pod_usd_per_hour=m.cost / seen_hours,
            serverless_usd_per_hour=SERVERLESS_USD_PER_HOUR,
            api_usd_per_million_tokens=api,
        )
        result = compare(_workload(m, seen_hours / 24), prices, pods=1)
        best = result.cheapest
        measured = (
            f"Measured over {observed_text(seen)} observed: {m.tokens.requests:,.0f} requests, "
            f"{m.busy / HOUR:,.1f} busy GPU-hours, {m.tokens.output:,.0f} output tokens"
        )
        pod = f"what the model's GPUs cost, {usd(prices.pod_usd_per_hour)}/h"
        prices_text = (
            f" Prices compared: serverless {usd(SERVERLESS_USD_PER_HOUR)} per GPU-hour (a typical "
            f"serverless A100 80GB, billed only while it runs), API {_rate(api)} per million "
            f"tokens ({api_source}); cold starts not counted."
        )
        reason = withheld_reason(seen, least)
        saving = None
        if reason is not None:
            spent = _over_observed(result, seen_hours, pod)
            detail = f"{measured}. {spent}{prices_text} {_cap(reason)}."
        else:
            detail = f"{result.recommendation}. {measured}; the pod is {pod}.{prices_text}"
            if best != "pod":
                cheapest = result.usd_per_day(best) or result.pod_usd_per_day
                saving = (result.pod_usd_per_day - cheapest) * HOURS_PER_MONTH / 24
                detail += f" Saving {usd(saving)} a month (730 h)."
        out.append(Recommendation(best, f"{model}: {_ADVICE[best]}", detail, saving))
    return out


def _over_observed(result: Breakeven, seen_hours: Decimal, pod: str) -> str:
    """What the observed time itself cost on each option (no scaling to a day)."""
    scale = seen_hours / 24
    cost = {name: day * scale for name in OPTIONS if (day := result.usd_per_day(name)) is not None}
    others = [f"{_LABEL[name]} {_money(cost[name])}" for name in cost if name != "pod"]
    return (
        f"Over that time the pod ({pod}) cost {_money(cost['pod'])}; it would have cost "
        f"{' and '.join(others)}."
    )


def _money(amount: Decimal) -> str:
    """Dollars for people; under a cent, three significant digits rather than "$0.00"."""
    return f"${figure(amount)}" if 0 < amount < Decimal("0.005") else usd(amount)


_LABEL = {"pod": "pod", "serverless": "serverless", "api": "API"}


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


_ADVICE = {
    "pod": "keep the dedicated GPU(s)",
    "serverless": "serverless GPUs would cost less than the dedicated ones",
    "api": "a token API would cost less than the dedicated GPU(s)",
}


def _workload(m: Share, days: Decimal) -> Workload:
    """The model's day, as `gpuwatch breakeven` measures it (agent.cli.cost.measured_workload):
    requests, busy GPU-seconds per request, output tokens per request."""
    requests = Decimal(repr(m.tokens.requests))
    output = Decimal(repr(m.tokens.output))
    return Workload(
        requests_per_day=requests / days,
        gpu_seconds_per_request=Decimal(repr(m.busy)) / requests,
        tokens_per_request=output / requests if output else None,
    )


def _rate(value: Decimal) -> str:
    """'$0.40', but '$0.125' rather than a rounded '$0.13'."""
    return usd(value) if value == value.quantize(Decimal("0.01")) else f"${value.normalize():f}"


def _paid_per_hour(g: GpuRow) -> Decimal | None:
    if g.observed_hours <= 0:
        return None
    return g.cost_usd / Decimal(repr(g.observed_hours))


def _smaller_gpus(f: Figures, gpus: Sequence[GpuRow], least: float) -> list[Recommendation]:
    """Serving GPUs whose VRAM peak plus the margin fits a cheaper, smaller card; grouped per
    host and card."""
    serving = {
        (h, g)
        for (h, g, _), days in f.window.allocations.items()
        if sum(a.seconds for a in days.values()) > 0
    }
    groups: dict[tuple[str, CatalogGpu], list[tuple[GpuRow, Decimal]]] = defaultdict(list)
    for g in gpus:
        paid = _paid_per_hour(g)
        card = None if paid is None else _smaller_card(g, paid)
        if paid is not None and card is not None and (g.host, g.gpu_uuid) in serving:
            groups[(g.host, card)].append((g, paid))
    out = []
    for (host, card), members in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1].name)):
        per_hour = sum((paid - card.usd_per_hour for _, paid in members), Decimal(0))
        seen = max(g.observed_hours for g, _ in members)
        saving, saves = _monthly(per_hour, seen, least)
        peak = max(g.vram_peak_bytes or 0.0 for g, _ in members)
        listed = ", ".join(
            f"GPU {g.gpu_index} ({g.gpu_name or 'unknown'}, {_gib(g.vram_peak_bytes)} of "
            f"{_gib(g.vram_total_bytes)} peak, {usd(paid)}/h)"
            for g, paid in members
        )
        detail = (
            f"{listed}. With a {_pct(VRAM_MARGIN)} margin against out-of-memory the highest peak "
            f"needs {_gib(peak * float(1 + VRAM_MARGIN))}, which fits one {card.name} at about "
            f"{usd(card.usd_per_hour)}/h ({card.source}). Measured over "
            f"{observed_text(seen)} observed. {saves}"
        )
        title = f"{host}: move {len(members)} GPU(s) to a smaller {card.name}"
        out.append(Recommendation("smaller_gpu", title, detail, saving))
    return out


def _smaller_card(g: GpuRow, paid: Decimal) -> CatalogGpu | None:
    """The cheapest card with less memory than ``g`` that holds its peak plus the margin and
    costs less than ``g`` does; None without one (or without VRAM figures)."""
    if g.vram_peak_bytes is None or g.vram_total_bytes is None:
        return None
    need = Decimal(repr(g.vram_peak_bytes)) * (1 + VRAM_MARGIN)
    total = g.vram_total_bytes
    fits = [c for c in CATALOG if need <= c.memory_bytes < total and c.usd_per_hour < paid]
    return min(fits, key=lambda c: (c.usd_per_hour, c.memory_gb), default=None)


def _pct(ratio: float | Decimal) -> str:
    return f"{float(ratio) * 100:g} %"


def _gib(value: float | None) -> str:
    return "?" if value is None else f"{value / GiB:,.1f} GiB"


def _activity(g: GpuRow) -> float | None:
    """How busy a GPU really was: SM activity where GPM or dcgm-exporter gave it (a GPU at
    100 % by NVML's flag may have most SMs waiting), else the flag."""
    return g.sm_active_ratio if g.sm_active_ratio is not None else g.utilization_ratio


def _basis(gpus: Sequence[GpuRow]) -> str:
    by_sm = sum(1 for g in gpus if g.sm_active_ratio is not None)
    if by_sm == len(gpus):
        return "busy by SM activity (GPM or dcgm-exporter)"
    if by_sm == 0:
        return "busy by NVML's utilization flag (no SM activity source)"
    return f"busy by SM activity for {by_sm}, by NVML's utilization flag for {len(gpus) - by_sm}"


def _consolidation(gpus: Sequence[GpuRow], least: float) -> list[Recommendation]:
    """Low-utilisation GPUs: how many their busy time needs at the target utilisation."""
    low = [
        g
        for g in gpus
        if (activity := _activity(g)) is not None
        and activity < LOW_UTILIZATION
        and _paid_per_hour(g) is not None
    ]
    if not low:
        return []
    busy = sum((_activity(g) or 0.0) * g.observed_hours for g in low)
    hours = sum(g.observed_hours for g in low) / len(low)  # the span each GPU ran, on average
    needed = math.ceil(busy / (hours * TARGET_UTILIZATION) - 1e-9) if hours > 0 else len(low)
    if needed >= len(low):
        return []
    # The most expensive first; at one price, the least busy (whose work is easiest to move).
    order = sorted(low, key=lambda g: (-(_paid_per_hour(g) or 0), _activity(g) or 0.0,
                                       g.host, g.gpu_uuid))  # fmt: skip
    released = order[: len(low) - needed]
    per_hour = sum((_paid_per_hour(g) or Decimal(0) for g in released), Decimal(0))
    saving, saves = _monthly(per_hour, max(g.observed_hours for g in low), least)
    listed = _some(
        f"{g.host}/{g.gpu_index} {percent(Decimal(repr(_activity(g) or 0.0)))}" for g in low
    )
    names = _some(f"{g.host}/{g.gpu_index}" for g in released)
    detail = (
        f"{len(low)} GPU(s) were busy less than {_pct(LOW_UTILIZATION)} of the time ({listed}; "
        f"{_basis(low)}): "
        f"{busy:,.1f} busy GPU-hours over {hours:,.1f} h each, which {needed} GPU(s) carry at a "
        f"{_pct(TARGET_UTILIZATION)} target utilization. Releasing {len(released)} ({names}; the "
        f"most expensive first, at one price the least busy) saves {usd(per_hour)}/h; the "
        f"models moved must fit the remaining GPUs' memory. Measured over "
        f"{observed_text(max(g.observed_hours for g in low))} observed. {saves}"
    )
    title = f"Consolidate {len(low)} low-utilization GPU(s) onto {needed}"
    return [Recommendation("consolidate", title, detail, saving)]


def _monthly(per_hour: Decimal, seen: float, least: float) -> tuple[Decimal | None, str]:
    """A saving per hour as a month's (730 h), and the sentence that says it; withheld (None,
    with the reason) when the GPUs were observed less than ``least`` hours."""
    reason = withheld_reason(seen, least)
    if reason is not None:
        return None, f"{_cap(reason)}."
    saving = per_hour * HOURS_PER_MONTH
    return saving, f"Saving {usd(saving)} a month (730 h)."


def _some(items: Iterable[str], shown: int = 8) -> str:
    """The first ``shown`` items, and how many more: a detail line stays readable for a fleet."""
    listed = list(items)
    more = f" and {len(listed) - shown} more" if len(listed) > shown else ""
    return ", ".join(listed[:shown]) + more
