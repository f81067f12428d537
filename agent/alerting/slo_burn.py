"""SloBurnRate: multiwindow, multi-burn-rate alerts on the ``[[slo]]`` latency objectives.

Per model with an objective (``objective_for``) and per pair of windows of the SRE Workbook's
Table 5-8 (agent.cost.slo_math.WORKBOOK_WINDOWS: 1h/5m x14.4 and 6h/30m x6 page, 3d/6h x1
ticket), the condition holds when both windows burn the error budget faster than the pair's
factor (``fires``). Where the model's requests in a window were judged from their own OTLP spans
(agent.cost.slo_spans: by this very objective), the window's bad fraction is the missed share of
them, exact (basis "spans"). Otherwise it is 1 - the LOWER bound of the joint attainment of the
objective's thresholds over the model's histograms in that window (basis "histograms"): the
worst case the buckets allow, so a threshold between bucket bounds or several thresholds never
understate the burn. An unknown burn (no observations, or a threshold whose histogram the
model's engine does not export) never fires.

Cost. Reading 6 h (or 3 d) of raw buckets every tick would cost more than the rest of the
evaluation together, so each window is read from the histogram rollups (minute rows at its
edges, hour and day rows inside, as reports read them: agent.cost.split) up to the host's
minute watermark, plus the raw samples after that watermark (a minute or two). The rollup part
only changes when the watermark moves or a window's start crosses a minute, so it is read at
most once a minute (:class:`SloCache`) and every other tick reads only the raw tail.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from sqlalchemy import select

from agent.config.slo import SloConfig, objective_for
from agent.cost.latency import KINDS as LATENCY_KINDS
from agent.cost.latency import latency_buckets
from agent.cost.slo_math import WORKBOOK_WINDOWS, BurnWindow, attainment, burn_rate, joint
from agent.cost.slo_spans import REQUESTS as SPAN_REQUESTS
from agent.cost.slo_spans import SpanCounts, span_counts
from agent.cost.split import MINUTE, Split
from agent.storage.series_math import coarsened_buckets
from agent.storage.store import Store
from agent.storage.windows import ReadOnce, WindowSource, counter_increase, histogram_window
from alerts.duration import format_duration
from migrations.schema import rollup_state

BASIS, SPANS_BASIS = "histograms", "spans"
# The histograms the rollups keep (agent.storage.rolled_up): every kind an objective names.
# A model whose engine does not export one has no burn for that objective.
KINDS = {kind: metric for metric, kind in LATENCY_KINDS.items()}  # kind -> metric
# A minute watermark further back than this means the rollup is behind (or has not run yet):
# the raw tail would grow without bound, so the windows are unknown until it catches up.
MAX_TAIL = timedelta(minutes=15)
WINDOW_SECONDS = tuple(
    sorted({s for w in WORKBOOK_WINDOWS for s in (w.long_seconds, w.short_seconds)})
)

Buckets = dict[float, float]  # le -> increase over the window
BucketKey = tuple[str, str, float]  # (model, kind, window seconds)
Judged = dict[tuple[str, float], tuple[float, float]]  # (model, window s) -> (met, missed)


@dataclass(frozen=True, slots=True)
class Burn:
    """One model's burn rates over one workbook pair (None: unknown)."""

    model: str
    window: BurnWindow
    long: float | None
    short: float | None
    slo: SloConfig
    basis: str = BASIS  # "spans" when both windows' bad fractions came from request spans


@dataclass
class SloCache:
    """The rollup part of the windows, kept until the minute watermark moves, a window's
    start crosses a minute or the objectives change."""

    key: tuple[object, ...] | None = None
    rolled: dict[BucketKey, Buckets] = field(default_factory=dict)
    judged: Judged = field(default_factory=dict)  # requests judged from spans, rollup part


def window_label(window: BurnWindow) -> str:
    return format_duration(window.long_seconds)


def read_burns(
    store: WindowSource,
    host: str,
    slos: Iterable[SloConfig],
    models: Iterable[str],
    now: datetime,
    cache: SloCache | None = None,
) -> tuple[Burn, ...] | None:
    """Every (model, workbook pair)'s burn rates at ``now``; None when they cannot be read this
    round (the database is away, or the rollup is behind): the rule then keeps its alerts."""
    base = store.source if isinstance(store, ReadOnce) else store
    slos = tuple(slos)
    wanted = {m: slo for m in sorted(set(models)) if (slo := objective_for(slos, m)) is not None}
    if not wanted:
        return ()
    if not isinstance(base, Store):
        return None
    with base.engine.connect() as conn:
        mark = conn.execute(
            select(rollup_state.c.watermark).where(
                rollup_state.c.host == host, rollup_state.c.job == "minute"
            )
        ).scalar()
    if mark is None or now - mark > MAX_TAIL:
        return None
    cache = cache or SloCache()
    starts = tuple(_ceil_minute(now - timedelta(seconds=s)) for s in WINDOW_SECONDS)
    key = (host, mark, starts, tuple(sorted(wanted.items(), key=lambda i: i[0])))
    if cache.key != key:
        cache.rolled, cache.judged = _rolled(base, host, wanted, mark, starts)
        cache.key = key
    tail = _tails(store, host, wanted, mark, now)
    judged_tail = _judged_tails(store, host, wanted, mark, now)
    out = []
    for model, slo in wanted.items():
        burns = {
            seconds: _spans_burn(slo, model, seconds, cache.judged, judged_tail)
            or (_burn(slo, model, seconds, cache.rolled, tail, mark, now), BASIS)
            for seconds in WINDOW_SECONDS
        }
        for w in WORKBOOK_WINDOWS:
            (long, long_basis), (short, short_basis) = burns[w.long_seconds], burns[w.short_seconds]
            basis = SPANS_BASIS if long_basis == short_basis == SPANS_BASIS else BASIS
            out.append(Burn(model, w, long, short, slo, basis))
    return tuple(out)


def _ceil_minute(at: datetime) -> datetime:
    floor = at.replace(second=0, microsecond=0)
    return floor if floor == at else floor + timedelta(seconds=MINUTE)


def _rolled(
    store: Store,
    host: str,
    wanted: Mapping[str, SloConfig],
    mark: datetime,
    starts: tuple[datetime, ...],
) -> tuple[dict[BucketKey, Buckets], Judged]:
    """Per (model, kind, window), the bucket increases of the rollup rows in [start, mark);
    per (model, window), the requests judged from spans by the model's objective there."""
    out: dict[BucketKey, Buckets] = {}
    judged: Judged = {}
    with store.engine.connect() as conn:
        for seconds, start in zip(WINDOW_SECONDS, starts, strict=True):
            if start >= mark:
                continue
            split = Split.read(conn, start, mark)
            found = latency_buckets(conn, split, (host,), wanted.__contains__)
            for (model, kind), buckets in found.items():
                out[(model, kind, seconds)] = buckets
            counted = span_counts(conn, split, (host,), wanted.__contains__)
            for model, slo in wanted.items():
                c = counted.get((model, slo.key), SpanCounts(0.0, 0.0, None, None))
                judged[(model, seconds)] = (c.met, c.missed)
    return out, judged


def _judged_tails(
    store: WindowSource, host: str, wanted: Mapping[str, SloConfig], mark: datetime, now: datetime
) -> dict[str, tuple[float, float]]:
    """Per model, the requests judged from spans after the watermark: (met, missed)."""
    out: dict[str, tuple[float, float]] = {}
    for model, slo in wanted.items():
        match = {"host": host, "model": model, "objective": slo.key}
        met, missed = (
            counter_increase(store, SPAN_REQUESTS, mark, now, match | {"result": result}) or 0.0
            for result in ("met", "missed")
        )
        out[model] = (met, missed)
    return out


def _spans_burn(
    slo: SloConfig,
    model: str,
    seconds: float,
    judged: Judged,
    tail: Mapping[str, tuple[float, float]],
) -> tuple[float | None, str] | None:
    """The window's burn from its requests' spans, exact; None where it has none."""
    met, missed = judged.get((model, seconds), (0.0, 0.0))
    tail_met, tail_missed = tail.get(model, (0.0, 0.0))
    met, missed = met + tail_met, missed + tail_missed
    if met + missed <= 0:
        return None
    return burn_rate(missed / (met + missed), slo.objective), SPANS_BASIS


def _tails(
    store: WindowSource, host: str, wanted: Mapping[str, SloConfig], mark: datetime, now: datetime
) -> dict[tuple[str, str], Buckets]:
    """Per (model, kind), the raw increases after the watermark (every window holds them)."""
    out: dict[tuple[str, str], Buckets] = {}
    for model, slo in wanted.items():
        for kind in slo.thresholds():
            if kind in KINDS:
                match = {"host": host, "model": model}
                found = histogram_window(store, KINDS[kind], mark, now, match, quantiles=())
                out[(model, kind)] = dict(coarsened_buckets(found.segments))
    return out


def _burn(
    slo: SloConfig,
    model: str,
    seconds: float,
    rolled: Mapping[BucketKey, Buckets],
    tail: Mapping[tuple[str, str], Buckets],
    mark: datetime,
    now: datetime,
) -> float | None:
    """The window's burn rate: 1 - the lower bound of the joint attainment, over the error
    budget; None when a threshold is unmeasured or has no observation in the window."""
    parts = []
    for kind, threshold in slo.thresholds().items():
        if kind not in KINDS:
            return None
        buckets: Buckets = defaultdict(float)
        for le, n in rolled.get((model, kind, seconds), {}).items():
            buckets[le] += n
        # A window shorter than the watermark's lag (5 m behind a 6 m lag) is the raw tail
        # alone; the raw read then covers a little more than the window, never less.
        for le, n in tail.get((model, kind), {}).items():
            buckets[le] += n
        found = attainment(buckets, threshold)
        if found is None:
            return None
        parts.append(found)
    if len(parts) == 1 and parts[0].exact:
        bad = parts[0].bad_fraction  # from counts: 1 of 10 is 0.1 exactly
    else:
        bad = min(1.0, max(0.0, 1.0 - joint(parts).lower))
    return burn_rate(bad, slo.objective)
