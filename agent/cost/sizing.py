"""Right-sizing the pod option: how many whole GPUs a load needs, and where right-sized pods
start to cost less than serverless. Pure Decimal arithmetic, no I/O.

Pods needed (whole GPUs, at least one to serve anything)::

    pods = ceil(requests/day x GPU-seconds per request / (86,400 x target utilization))

The target utilization (default 0.7) leaves room for peaks: a pod run flat out queues its
requests (economics.md, "What operators watch").

The crossover, defined. With right-sized pods the pod cost is a step function of the load
(``pods(r) x the pod's day``) while serverless grows in a straight line, so the two can cross
many times: just past each step one more pod is paid for while serverless has grown by one
request. ``crossover_requests_per_day`` is the largest whole number of requests per day at
which serverless still costs no more than the right-sized pods, such that at every higher load
the pods cost strictly less: "pods pay off above it", for good. It exists only when a pod at the
target utilization costs less per busy GPU-hour than serverless (``pod rate < target x
serverless rate``); otherwise serverless stays cheaper (or level) at some load however high,
and there is none (None). With a fixed number of pods (the report's "what the model's GPUs
cost now") the pod cost is flat, and this is the classic break-even of economics.md
(2.72 x 24 / (2 / 3600 x 2.50) = 47,001 requests/day, floored).
"""

from __future__ import annotations

from decimal import ROUND_CEILING, ROUND_FLOOR, Decimal

SECONDS_PER_DAY = Decimal(86400)
SECONDS_PER_HOUR = Decimal(3600)
HOURS_PER_DAY = Decimal(24)
TARGET_UTILIZATION = Decimal("0.7")
# Stepping down from the bound below is exact but, when the pods' margin per request is tiny,
# could take very many steps; past this many the bound (a little high, never low) stands.
_MAX_STEPS = 10_000


def _floor(value: Decimal) -> int:
    return int(value.to_integral_value(rounding=ROUND_FLOOR))


def _ceil(value: Decimal) -> int:
    return int(value.to_integral_value(rounding=ROUND_CEILING))


def pods_needed(busy_gpu_seconds_per_day: Decimal, target_utilization: Decimal) -> int:
    """Whole GPUs that carry the busy time at the target utilization; at least one."""
    if busy_gpu_seconds_per_day <= 0:
        return 1
    return max(1, _ceil(busy_gpu_seconds_per_day / (SECONDS_PER_DAY * target_utilization)))


def classic_crossover(
    pods: int, pod_day: Decimal, overhead_usd: Decimal, serverless_usd_per_request: Decimal
) -> int | None:
    """The largest whole requests/day at which serverless (overhead plus the per-request price)
    costs no more than ``pods`` pods at ``pod_day`` each (floored): flat pod cost. 0 when the
    overhead alone costs more; None when serverless costs nothing per request."""
    numerator = pods * pod_day - overhead_usd
    if serverless_usd_per_request == 0:
        return None if numerator >= 0 else 0
    return max(0, _floor(numerator / serverless_usd_per_request))


def right_sized_crossover(
    pod_usd_per_hour: Decimal,
    serverless_usd_per_hour: Decimal,
    gpu_seconds_per_request: Decimal,
    overhead_seconds_per_day: Decimal,
    target_utilization: Decimal,
) -> int | None:
    """The crossover with right-sized pods, as defined in the module's docstring.

    In dollar-seconds (x 3600, so each test is one exact product): serverless costs
    ``(r x g + O) x q`` a day, ``n`` pods ``n x P`` with ``P = p x 24 x 3600``. Pods win
    strictly at ``r`` (with ``n = pods(r)``) when ``r x g x q > n x P - O x q``. One pod
    carries ``K = 86,400 x u / g`` requests; the loads it serves, pod count ``n``, are the
    interval ``((n-1) K, n K]`` (``[0, K]`` for one pod).
    """
    g, q, u = gpu_seconds_per_request, serverless_usd_per_hour, target_utilization
    pod = pod_usd_per_hour * HOURS_PER_DAY * SECONDS_PER_HOUR
    overhead = overhead_seconds_per_day * q
    if g == 0 or q == 0:  # no load to size for, or free serverless: one flat pod
        return classic_crossover(1, pod, overhead, g * q)
    per_pod = SECONDS_PER_DAY * u * q  # what serverless bills for one pod's full load
    if pod > per_pod or (pod == per_pod and overhead < pod):
        return None  # past every step serverless catches up again: no crossover for good

    def first(n: int) -> int:  # the lowest whole load that needs n pods
        return 0 if n == 1 else _floor((n - 1) * SECONDS_PER_DAY * u / g) + 1

    def won(n: int) -> bool:  # pods strictly cheaper over the whole interval
        return first(n) * g * q > n * pod - overhead

    # A bound: interval n is won when (n-1) K >= n a - o, i.e. n (per_pod - pod) >=
    # per_pod - overhead (in dollar-seconds); then every later one is too.
    margin = per_pod - pod
    start = 2 if margin == 0 else max(2, _ceil((per_pod - overhead) / margin))
    n = start
    while n > 1 and start - n < _MAX_STEPS and won(n - 1):
        n -= 1
    last_lost = n - 1  # the highest interval not wholly won (0: none)
    if last_lost == 0:
        return 0
    top = _floor(last_lost * SECONDS_PER_DAY * u / g)
    return min(top, max(0, _floor((last_lost * pod - overhead) / (g * q))))
