"""Per model, the latency histograms' bucket increases over a window, from the rollups: what
the report's quantiles and objectives (agent.reporting) and the objectives' /metrics gauge
(:mod:`agent.cost.slo_signals`) read."""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Collection

from sqlalchemy import Connection, select

from agent.cost.split import Split, series_ranges
from agent.storage import rolled_up
from agent.storage.buckets import increase_sums
from migrations.schema import histogram_rollups, series

TTFT, E2E, ITL, QUEUE = rolled_up.rolled_up(
    rolled_up.TTFT, rolled_up.E2E, rolled_up.ITL, rolled_up.QUEUE
)
KINDS = {TTFT: "ttft", E2E: "e2e", ITL: "itl", QUEUE: "queue"}
Buckets = dict[tuple[str, str], dict[float, float]]


def latency_buckets(
    conn: Connection,
    split: Split,
    hosts: Collection[str] = (),
    model_ok: Callable[[str], bool] = lambda _: True,
) -> Buckets:
    """(model, kind) -> le -> the window's increase (kind: ttft, e2e, itl or queue), summed
    over the model's targets (of ``hosts``; empty: every host) and the histogram rows (each
    holds every bound of its layout)."""
    query = select(series.c.id, series.c.host, series.c.metric, series.c.labels).where(
        series.c.metric.in_(tuple(KINDS))
    )
    if hosts:
        query = query.where(series.c.host.in_(sorted(hosts)))
    meta: dict[int, tuple[str, str]] = {}  # series id -> (model, kind)
    owners: dict[int, str] = {}
    for sid, host, metric, labels in conn.execute(query):
        model = json.loads(labels).get("model", "")
        if model_ok(model):
            meta[sid] = (model, KINDS[metric])
            owners[sid] = host
    buckets: Buckets = defaultdict(lambda: defaultdict(float))
    for sid, le, increase in increase_sums(conn, series_ranges(split, owners, histogram_rollups)):
        buckets[meta[sid]][float(le)] += increase
    return buckets
