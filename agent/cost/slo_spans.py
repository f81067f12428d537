"""Per model, the requests (and their output tokens) judged from their own OTLP spans over a
window: the objectives' exact basis (collectors.otlp), read from the counters' rollups.

Only requests judged by the model's *current* objective count: the counters carry the
thresholds they were judged by (``objective="e2e<=1s"``), and a request judged by another
threshold says nothing about this one.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable, Collection
from dataclasses import dataclass

from sqlalchemy import Connection, func, select, union_all

from agent.cost.split import Split, series_ranges
from agent.storage import rolled_up
from migrations.schema import rollups, series

REQUESTS, TOKENS = rolled_up.rolled_up(
    rolled_up.SLO_SPAN_REQUESTS, rolled_up.SLO_SPAN_OUTPUT_TOKENS
)


@dataclass(frozen=True, slots=True)
class SpanCounts:
    """Requests within (met) and outside (missed) the objective, and their output tokens; a
    token count is None when no span of the model carried one."""

    met: float
    missed: float
    met_tokens: float | None
    missed_tokens: float | None

    @property
    def requests(self) -> float:
        return self.met + self.missed

    @property
    def attainment(self) -> float | None:
        return self.met / self.requests if self.requests > 0 else None


Counts = dict[tuple[str, str], SpanCounts]  # (model, objective key) -> counts


def span_counts(
    conn: Connection,
    split: Split,
    hosts: Collection[str] = (),
    model_ok: Callable[[str], bool] = lambda _: True,
) -> Counts:
    """(model, objective key) -> the window's counts, summed over targets and hosts."""
    query = select(series.c.id, series.c.host, series.c.metric, series.c.labels).where(
        series.c.metric.in_((REQUESTS, TOKENS))
    )
    if hosts:
        query = query.where(series.c.host.in_(sorted(hosts)))
    meta: dict[int, tuple[str, str, str, str]] = {}  # id -> (metric, model, objective, result)
    owners: dict[int, str] = {}
    for sid, host, metric, labels in conn.execute(query):
        parsed = json.loads(labels)
        model = parsed.get("model", "")
        if model_ok(model):
            meta[sid] = (metric, model, parsed.get("objective", ""), parsed.get("result", ""))
            owners[sid] = host
    sums: dict[tuple[str, str], dict[tuple[str, str], float]] = defaultdict(dict)
    r = rollups.c
    parts = [
        select(r.series_id, func.sum(r.increase)).where(condition).group_by(r.series_id)
        for condition in series_ranges(split, owners)
    ]
    for sid, increase in conn.execute(union_all(*parts)).all() if parts else ():
        metric, model, objective, result = meta[sid]
        cell = sums[(model, objective)]
        cell[(metric, result)] = cell.get((metric, result), 0.0) + float(increase or 0.0)
    return {key: _counts(cell) for key, cell in sums.items()}


def _counts(cell: dict[tuple[str, str], float]) -> SpanCounts:
    def tokens(result: str) -> float | None:
        if not any(metric == TOKENS for metric, _ in cell):
            return None
        return cell.get((TOKENS, result), 0.0)

    return SpanCounts(
        met=cell.get((REQUESTS, "met"), 0.0),
        missed=cell.get((REQUESTS, "missed"), 0.0),
        met_tokens=tokens("met"),
        missed_tokens=tokens("missed"),
    )
