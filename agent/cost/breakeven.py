"""Pod vs serverless vs API break-even: pure Decimal arithmetic, no I/O.

The three cost models (reference: economics.md, "Pod (dedicated) vs serverless vs API"):

- pod: billed 24 hours a day whatever the load, so ``rate x 24`` per GPU, for as many whole GPUs
  as the load needs at a target utilization (:mod:`agent.cost.sizing`), or for a given number
  of GPUs (the report's "what the model's GPUs cost now");
- serverless: billed only while a container runs: the busy GPU-seconds of the requests plus, for
  every burst (traffic resuming after an idle long enough to scale to zero), the cold start and the
  idle window before scale-down, both billed;
- API: billed per token, nothing to run.

Rounding. Every figure here is exact Decimal arithmetic (products are formed before the single
division, so terminating results such as 47,001.6 come out exact). Two things are rounded:

- ``crossover_requests_per_day`` is floored: it is the largest whole number of requests per day at
  which serverless still costs no more than the pods; pods pay off above it (with right-sized
  pods, for good: see :mod:`agent.cost.sizing`). ``one_pod_crossover_requests_per_day`` is the
  classic figure for one always-on pod: the worked figure 2.72 x 24 / (2 / 3600 x 2.50) =
  47,001.6 gives 47,001 (47,001 requests cost $65.279 on serverless, 47,002 cost $65.281), a
  load that one pod cannot carry at a 70 % target (94,002 busy GPU-seconds a day).
- The printing helpers (``cents``, ``usd``) round half up, as a bill does: $0.2778 -> $0.28,
  $4.1667 -> $4.17, $4.0002/h -> $4.00/h. Callers keep the exact figures for arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from decimal import ROUND_HALF_UP, Decimal

from agent.cost.sizing import (
    TARGET_UTILIZATION,
    classic_crossover,
    pods_needed,
    right_sized_crossover,
)
from foundation.errors import GpuwatchError

SECONDS_PER_HOUR = Decimal(3600)
SECONDS_PER_DAY = Decimal(86400)
HOURS_PER_DAY = Decimal(24)
MILLION = Decimal(1_000_000)
_ZERO = Decimal(0)

# Billing units -> hours' worth of that unit. The aliases are the spellings providers publish.
_UNITS_PER_HOUR = {
    "second": Decimal(3600),
    "s": Decimal(3600),
    "minute": Decimal(60),
    "min": Decimal(60),
    "hour": Decimal(1),
    "h": Decimal(1),
}
# Lambda publishes whole cents per hour for the whole instance.
CENTS_PER_HOUR_INSTANCE = "cents_per_hour_instance"

OPTIONS = ("pod", "serverless", "api")
_LABELS = {"pod": "pod", "serverless": "serverless", "api": "API"}


class BreakevenError(GpuwatchError, ValueError):
    """Figures the break-even cannot use: negative, not finite, or an unknown billing unit."""


def _check_figures(obj: Workload | Prices) -> None:
    """Every field of a value dataclass is a finite Decimal >= 0, or None."""
    for field in fields(obj):
        value = getattr(obj, field.name)
        if value is None:
            continue
        if not isinstance(value, Decimal) or not value.is_finite() or value < 0:
            raise BreakevenError(f"{field.name} must be a finite Decimal >= 0, got {value!r}")


@dataclass(frozen=True, slots=True)
class Workload:
    """A day of traffic.

    ``bursts_per_day`` is how many times a day traffic starts after an idle period long enough for
    serverless to scale to zero; None counts no cold start (nothing is guessed).
    """

    requests_per_day: Decimal
    gpu_seconds_per_request: Decimal
    tokens_per_request: Decimal | None = None
    bursts_per_day: Decimal | None = None

    def __post_init__(self) -> None:
        _check_figures(self)

    @property
    def busy_gpu_seconds_per_day(self) -> Decimal:
        return self.requests_per_day * self.gpu_seconds_per_request

    @property
    def tokens_per_day(self) -> Decimal | None:
        if self.tokens_per_request is None:
            return None
        return self.requests_per_day * self.tokens_per_request


@dataclass(frozen=True, slots=True)
class Prices:
    """Rates in USD per GPU-hour (see ``per_hour`` to normalise published units)."""

    pod_usd_per_hour: Decimal
    serverless_usd_per_hour: Decimal
    api_usd_per_million_tokens: Decimal | None = None
    cold_start_seconds: Decimal = _ZERO
    scaledown_seconds: Decimal = _ZERO

    def __post_init__(self) -> None:
        _check_figures(self)


@dataclass(frozen=True, slots=True)
class Breakeven:
    """The comparison; money exact (round only when printing). None: not computable from inputs.

    ``pods`` is how many GPUs the pod option pays for: right-sized to the load at
    ``target_utilization`` (None when the count was given, as deployed). ``duty_cycle`` is busy
    GPU-seconds per day / 86,400 (it exceeds 1 when the work needs more than one GPU).
    ``crossover_utilization`` is the duty cycle of the crossover load. ``cheapest`` is one of
    OPTIONS; ties go to the first in that order.
    """

    workload: Workload
    prices: Prices
    pods: int
    target_utilization: Decimal | None
    pod_usd_per_day: Decimal
    serverless_usd_per_day: Decimal
    api_usd_per_day: Decimal | None
    pod_usd_per_million_tokens: Decimal | None
    serverless_usd_per_million_tokens: Decimal | None
    api_usd_per_million_tokens: Decimal | None
    duty_cycle: Decimal
    crossover_requests_per_day: int | None
    crossover_utilization: Decimal | None
    one_pod_crossover_requests_per_day: int | None
    cheapest: str
    recommendation: str

    def usd_per_day(self, option: str) -> Decimal | None:
        return {
            "pod": self.pod_usd_per_day,
            "serverless": self.serverless_usd_per_day,
            "api": self.api_usd_per_day,
        }[option]

    def usd_per_million_tokens(self, option: str) -> Decimal | None:
        return {
            "pod": self.pod_usd_per_million_tokens,
            "serverless": self.serverless_usd_per_million_tokens,
            "api": self.api_usd_per_million_tokens,
        }[option]

    @property
    def pod_capacity_requests_per_day(self) -> Decimal | None:
        """The requests one pod carries a day at the target utilization (None: no target, or
        no GPU time per request)."""
        u, g = self.target_utilization, self.workload.gpu_seconds_per_request
        if u is None or g == 0:
            return None
        return SECONDS_PER_DAY * u / g


def compare(
    workload: Workload,
    prices: Prices,
    *,
    target_utilization: Decimal = TARGET_UTILIZATION,
    pods: int | None = None,
) -> Breakeven:
    """Pod vs serverless vs API for the workload: the pod option right-sized to the load at
    ``target_utilization`` (0 < u <= 1), or ``pods`` GPUs as deployed when given."""
    if pods is not None and pods < 1:
        raise BreakevenError(f"pods must be >= 1, got {pods}")
    if not (target_utilization.is_finite() and 0 < target_utilization <= 1):
        raise BreakevenError(f"target utilization must be in (0, 1], got {target_utilization}")
    sized = pods_needed(workload.busy_gpu_seconds_per_day, target_utilization)
    sized = sized if pods is None else pods
    pod = prices.pod_usd_per_hour * HOURS_PER_DAY * sized
    serverless = serverless_usd_per_day(workload, prices)
    api = api_usd_per_day(workload, prices)
    duty = workload.busy_gpu_seconds_per_day / SECONDS_PER_DAY
    crossover = (
        crossover_requests_per_day(workload, prices, pods)
        if pods is not None
        else right_sized_crossover(
            prices.pod_usd_per_hour,
            prices.serverless_usd_per_hour,
            workload.gpu_seconds_per_request,
            overhead_seconds_per_day(workload, prices),
            target_utilization,
        )
    )
    costs = {"pod": pod, "serverless": serverless}
    if api is not None:
        costs["api"] = api
    cheapest = min(costs, key=costs.__getitem__)
    return Breakeven(
        workload=workload,
        prices=prices,
        pods=sized,
        target_utilization=None if pods is not None else target_utilization,
        pod_usd_per_day=pod,
        serverless_usd_per_day=serverless,
        api_usd_per_day=api,
        pod_usd_per_million_tokens=_per_million(pod, workload),
        serverless_usd_per_million_tokens=_per_million(serverless, workload),
        api_usd_per_million_tokens=prices.api_usd_per_million_tokens,
        duty_cycle=duty,
        crossover_requests_per_day=crossover,
        crossover_utilization=(
            None
            if crossover is None
            else crossover * workload.gpu_seconds_per_request / SECONDS_PER_DAY
        ),
        one_pod_crossover_requests_per_day=crossover_requests_per_day(workload, prices),
        cheapest=cheapest,
        recommendation=_recommendation(
            workload,
            costs,
            cheapest,
            duty,
            crossover,
            sized,
            pods,
            prices.serverless_usd_per_hour * workload.gpu_seconds_per_request,
        ),
    )


def overhead_seconds_per_day(workload: Workload, prices: Prices) -> Decimal:
    """Billed serverless seconds that serve no request: cold start plus idle window, per burst."""
    bursts = workload.bursts_per_day or _ZERO
    return bursts * (prices.cold_start_seconds + prices.scaledown_seconds)


def serverless_usd_per_day(workload: Workload, prices: Prices) -> Decimal:
    billed = workload.busy_gpu_seconds_per_day + overhead_seconds_per_day(workload, prices)
    return billed * prices.serverless_usd_per_hour / SECONDS_PER_HOUR


def api_usd_per_day(workload: Workload, prices: Prices) -> Decimal | None:
    tokens = workload.tokens_per_day
    if tokens is None or prices.api_usd_per_million_tokens is None:
        return None
    return tokens * prices.api_usd_per_million_tokens / MILLION


def _per_million(usd_per_day: Decimal, workload: Workload) -> Decimal | None:
    tokens = workload.tokens_per_day
    if not tokens:  # None or zero: no tokens to spread the cost over
        return None
    return usd_per_day * MILLION / tokens


def crossover_requests_per_day(workload: Workload, prices: Prices, pods: int = 1) -> int | None:
    """The largest whole requests/day at which serverless costs no more than ``pods`` always-on
    pods (floored): the classic break-even. 0 when the burst overhead alone already costs more
    than the pods; None when serverless costs nothing per request, so the pods never pay off.

    Kept in dollar-seconds (x 3600) so it is one exact division.
    """
    q = prices.serverless_usd_per_hour
    return classic_crossover(
        pods,
        prices.pod_usd_per_hour * HOURS_PER_DAY * SECONDS_PER_HOUR,
        overhead_seconds_per_day(workload, prices) * q,
        q * workload.gpu_seconds_per_request,
    )


def _recommendation(
    workload: Workload,
    costs: dict[str, Decimal],
    cheapest: str,
    duty: Decimal,
    crossover: int | None,
    pods: int,
    given: int | None,
    serverless_per_request: Decimal,
) -> str:
    def label(name: str) -> str:
        if name != "pod" or given is not None:
            return _LABELS[name]
        return f"{pods:,} pod{'s' if pods != 1 else ''}"

    others = " and ".join(
        f"{label(name)} {usd(cost)}/day"
        for name, cost in sorted(costs.items(), key=lambda item: item[1])
        if name != cheapest
    )
    # Free serverless (or requests that take no GPU time) has no step to size: one flat pod.
    flat = given is not None or serverless_per_request == 0
    if crossover is None and flat:
        pays_off = "serverless stays cheaper than a pod at any request count"
    elif crossover is None:
        pays_off = "serverless stays cheaper than right-sized pods at some load however high"
    elif not flat:
        pays_off = f"right-sized pods pay off above {crossover:,} requests/day"
    else:
        pays_off = f"a pod pays off above {crossover:,} requests/day"
    return (
        f"{label(cheapest)}: {usd(costs[cheapest])}/day vs {others} at "
        f"{count(workload.requests_per_day)} requests/day (duty cycle {percent(duty)}); {pays_off}"
    )


def cost_per_million_tokens(
    usd_per_hour: Decimal, tokens_per_second: Decimal, utilization: Decimal = Decimal(1)
) -> Decimal:
    """USD per million tokens of a GPU billed by the hour, busy ``utilization`` of the time.

    The L4 figure: $0.50/h at 500 tokens/s -> 0.2778 (prints $0.28); at 10 % busy -> 2.7778.
    """
    if tokens_per_second <= 0 or not 0 < utilization <= 1:
        raise BreakevenError(
            "tokens_per_second must be > 0 and utilization in (0, 1], "
            f"got {tokens_per_second} and {utilization}"
        )
    return usd_per_hour * MILLION / (tokens_per_second * SECONDS_PER_HOUR * utilization)


def per_hour(amount: Decimal, unit: str, gpus: int = 1) -> Decimal:
    """A published price in USD per GPU-hour, exact.

    ``unit``: "second"/"s", "minute"/"min", "hour"/"h" (USD per that unit), or
    "cents_per_hour_instance" (whole cents per hour for an instance). ``gpus`` is how many GPUs the
    price pays for: Lambda's 1592 cents for an 8-GPU instance -> 15.92 with gpus=1, 1.99 with 8.
    """
    if gpus < 1:
        raise BreakevenError(f"gpus must be >= 1, got {gpus}")
    if unit == CENTS_PER_HOUR_INSTANCE:
        return amount / (100 * gpus)
    try:
        factor = _UNITS_PER_HOUR[unit]
    except KeyError:
        accepted = ", ".join([*_UNITS_PER_HOUR, CENTS_PER_HOUR_INSTANCE])
        raise BreakevenError(f"unknown billing unit {unit!r} (accepted: {accepted})") from None
    return amount * factor / gpus


# Printing helpers: the only place figures are rounded.


def cents(amount: Decimal) -> Decimal:
    """Rounded half up to cents, as a bill rounds."""
    return amount.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)


def usd(amount: Decimal) -> str:
    """'$4.17', '$1,234.50'."""
    return f"${cents(amount):,}"


def count(amount: Decimal) -> str:
    """A request count to the whole unit, with thousands separators: '3,000'."""
    return f"{amount.quantize(Decimal(1), rounding=ROUND_HALF_UP):,}"


def percent(ratio: Decimal) -> str:
    """A ratio as a percentage to one decimal: '6.9 %'."""
    return f"{(ratio * 100).quantize(Decimal('0.1'), rounding=ROUND_HALF_UP):,} %"


def figure(value: Decimal) -> str:
    """A measured quantity for people: '2', '2.5', '1,234.5', '0.309' (three significant
    digits under one), never a 28-digit Decimal or an exponent."""
    if value == 0:
        return "0"
    if abs(value) >= 1:
        rounded = value.quantize(Decimal("0.01"), rounding=ROUND_HALF_UP)
        text = f"{rounded:,f}"
        return text.rstrip("0").rstrip(".") if "." in text else text
    digits = max(0, 2 - value.adjusted())  # three significant digits
    rounded = value.quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP)
    text = f"{rounded:f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def hours(value: float | Decimal) -> str:
    """An observed time: '0.2 h', '745.0 h', '1,440.0 h' (one decimal)."""
    return f"{Decimal(repr(float(value))).quantize(Decimal('0.1'), rounding=ROUND_HALF_UP):,} h"
