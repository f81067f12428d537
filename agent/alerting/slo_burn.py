"""SloBurnRate: multiwindow, multi-burn-rate alerts on the ``[[slo]]`` latency objectives.

Per model with an objective (``objective_for``) and per pair of windows of the SRE Workbook's
Table 5-8 (agent.cost.slo_math.WORKBOOK_WINDOWS: 1h/5m x14.4 and 6h/30m x6 page, 3d/6h x1
ticket), the condition holds when both windows burn the error budget faster than the pair's
factor (``fires``). A window's bad fraction is 1 - the LOWER bound of the joint attainment of
the objective's thresholds over the model's histograms in that window (basis "histograms"): the
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
from agent.cost.split import MINUTE, Split
from agent.storage.series_math import coarsened_buckets
from agent.storage.store import Store
from agent.storage.windows import ReadOnce, WindowSource, histogram_window
from alerts.duration import format_duration
from migrations.schema import rollup_state

BASIS = "histograms"
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


@dataclass(frozen=True, slots=True)
class Burn:
    """One model's burn rates over one workbook pair (None: unknown)."""

    model: str
    window: BurnWindow
    long: float | None
    short: float | None
    slo: SloConfig


@dataclass
class SloCache:
    """The rollup part of the windows, kept until the minute watermark moves, a window's
    start crosses a minute or the objectives change."""

    key: tuple[object, ...] | None = None
    rolled: dict[BucketKey, Buckets] = field(default_factory=dict)


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
        cache.rolled, cache.key = _rolled(base, host, set(wanted), mark, starts), key
    tail = _tails(store, host, wanted, mark, now)
    out = []
    for model, slo in wanted.items():
        burns = {
            seconds: _burn(slo, model, seconds, cache.rolled, tail, mark, now)
            for seconds in WINDOW_SECONDS
        }
        out += [
            Burn(model, w, burns[w.long_seconds], burns[w.short_seconds], slo)
            for w in WORKBOOK_WINDOWS
        ]
    return tuple(out)


def _ceil_minute(at: datetime) -> datetime:
    floor = at.replace(second=0, microsecond=0)
    return floor if floor == at else floor + timedelta(seconds=MINUTE)


def _rolled(
    store: Store, host: str, models: set[str], mark: datetime, starts: tuple[datetime, ...]
) -> dict[BucketKey, Buckets]:
    """Per (model, kind, window), the bucket increases of the rollup rows in [start, mark)."""
    out: dict[BucketKey, Buckets] = {}
    with store.engine.connect() as conn:
        for seconds, start in zip(WINDOW_SECONDS, starts, strict=True):
            if start >= mark:
                continue
            found = latency_buckets(
                conn, Split.read(conn, start, mark), (host,), models.__contains__
            )
            for (model, kind), buckets in found.items():
                out[(model, kind, seconds)] = buckets
    return out


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
