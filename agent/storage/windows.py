"""Questions over a time window, answered from stored raw samples, restart-safe.

The store keeps every scrape's raw counter values and cumulative buckets; this module rebuilds
the series (with their ``_created`` companions, when the engine exposes them) and hands them to
the pure arithmetic of :mod:`agent.storage.series_math`.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Protocol

from agent.storage.series_math import (
    HistogramPoint,
    Point,
    Segment,
    bucket_increases,
    coarsened_buckets,
    histogram_quantile,
    increase_many,
)
from agent.storage.store import Store

QUANTILES = (0.5, 0.95, 0.99)
Window = dict[str, list[tuple[datetime, float]]]  # canonical labels JSON -> points


class WindowSource(Protocol):
    """Where windows of raw points come from: the store, or the alert rules' memory of an
    outage (agent.alerting.recent)."""

    def window(
        self, metric: str, start: datetime, end: datetime, match: Mapping[str, str] = ...
    ) -> dict[str, list[tuple[datetime, float]]]: ...


@dataclass(frozen=True, slots=True)
class HistogramWindow:
    """A histogram over a window: observations, quantiles and the bucket segments behind them.

    ``segments`` has one entry per run of one bucket set; quantiles are computed on the
    boundaries all segments share, so differing bucket sets are never mixed.
    """

    count: float
    quantiles: Mapping[float, float | None]
    segments: tuple[Segment, ...]


class ReadOnce:
    """One evaluation's window reads over a host: each metric's series are listed once (and
    their labels decoded once), then each window reads only its own series' points.

    The alert inputs ask per target and model (a histogram window each); listing and decoding
    every series of the metric per pair made a tick's cost grow with the pairs times the series
    ever stored. The points are still read per pair, so the memory a tick peaks at stays one
    pair's window, not the host's."""

    def __init__(self, source: WindowSource, host: str) -> None:
        self.source = source
        self.host = host
        self._series: dict[str, dict[int, tuple[str, dict[str, str]]]] = {}

    def window(
        self, metric: str, start: datetime, end: datetime, match: Mapping[str, str] = {}
    ) -> Window:
        return self.windows((metric,), start, end, match)[0]

    def windows(
        self, metrics: Sequence[str], start: datetime, end: datetime, match: Mapping[str, str]
    ) -> list[Window]:
        """``window`` of each of ``metrics`` (a histogram's buckets and ``_created`` series),
        their points read together: one set of queries instead of one per metric."""
        store = self.source
        if match.get("host") != self.host or not isinstance(store, Store):
            return [store.window(m, start, end, match) for m in metrics]  # memory, other host
        wanted = [self._matching(store, metric, match) for metric in metrics]
        points = store.points_of([sid for ids in wanted for sid in ids], start, end)
        return [{lj: points[sid] for sid, lj in ids.items() if sid in points} for ids in wanted]

    def _matching(self, store: Store, metric: str, match: Mapping[str, str]) -> dict[int, str]:
        if metric not in self._series:
            self._series[metric] = store.series_of(metric, self.host)
        return {
            sid: lj
            for sid, (lj, labels) in self._series[metric].items()
            if all(labels.get(k) == v for k, v in match.items())
        }


def _windows(
    store: WindowSource,
    metrics: Sequence[str],
    start: datetime,
    end: datetime,
    match: Mapping[str, str],
) -> list[Window]:
    if isinstance(store, ReadOnce):
        return store.windows(metrics, start, end, match)
    return [store.window(m, start, end, match) for m in metrics]


def counter_increase(
    store: WindowSource, metric: str, start: datetime, end: datetime, match: Mapping[str, str] = {}
) -> float | None:
    """Increase of a counter over (start, end], summed over matching series; None if no data."""
    values, created = _windows(store, (metric, _created(metric)), start, end, match)
    series = []
    for labels, points in values.items():
        history = _points(points, created.get(labels, []))
        born = _appeared_after_scrape(store, json.loads(labels), history[0].ts, start)
        series.append([Point(born, 0.0), *history] if born else history)
    return increase_many(series, start, end)


def histogram_window(
    store: WindowSource,
    metric: str,
    start: datetime,
    end: datetime,
    match: Mapping[str, str] = {},
    quantiles: Sequence[float] = QUANTILES,
) -> HistogramWindow:
    """Bucket increases and quantiles of a histogram over (start, end] (``metric`` without
    ``_bucket``), over every matching series (several targets serving one model add up)."""
    buckets, created = _windows(store, (metric + "_bucket", metric + "_created"), start, end, match)
    segments: list[Segment] = []
    for key, history in _histories(buckets, created).items():
        born = _appeared_after_scrape(store, json.loads(key), history[0].ts, start)
        if born:
            zeros = tuple((le, 0.0) for le in history[0].les)
            history = [HistogramPoint(born, zeros), *history]
        segments.extend(bucket_increases(history, start, end))
    merged = coarsened_buckets(segments) if segments else ()
    count = merged[-1][1] if merged else 0.0
    return HistogramWindow(
        count=count,
        quantiles={q: histogram_quantile(q, merged) if merged else None for q in quantiles},
        segments=tuple(segments),
    )


def _appeared_after_scrape(
    store: WindowSource, labels: Mapping[str, str], first: datetime, start: datetime
) -> datetime | None:
    """When a series first shows up inside the window although its target was scraped
    successfully in the window before that, the instant of that scrape; else None.

    Engines create a label child lazily, on its first event (vLLM V0's histograms and finish
    reasons, SGLang): absent from a good scrape, it had counted nothing yet. Treating that
    scrape as a 0 lets the child's first increments count instead of becoming its baseline.
    """
    if first <= start or "target" not in labels:
        return None  # it has a baseline: it is not new in this window
    up = store.window("gpuwatch_target_up", start, first, _scrape_labels(labels))
    good = [ts for points in up.values() for ts, value in points if start <= ts < first and value]
    return max(good) if good else None


def _scrape_labels(labels: Mapping[str, str]) -> dict[str, str]:
    return {k: labels[k] for k in ("host", "target") if k in labels}


def _created(metric: str) -> str:
    return metric.removesuffix("_total") + "_created"


def _points(
    points: Iterable[tuple[datetime, float]], created: Iterable[tuple[datetime, float]]
) -> list[Point]:
    born = dict(created)
    return [Point(ts, value, born.get(ts)) for ts, value in points]


def _histories(
    buckets: Mapping[str, list[tuple[datetime, float]]],
    created: Mapping[str, list[tuple[datetime, float]]],
) -> dict[str, list[HistogramPoint]]:
    """Per histogram series (labels without ``le``), its snapshots in time order.

    Series whose ``le`` spell one bound differently ("0.2", "2e-1", "2.0e-1": stored by another
    version, or forwarded from another host) are one bucket, their counts summed, as PromQL's
    histogram_quantile coalesces buckets with the same upper bound."""
    grouped: dict[str, dict[datetime, dict[float, float]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(float))
    )
    for labels_json, points in buckets.items():
        labels = json.loads(labels_json)
        le = float(labels.pop("le"))
        key = json.dumps(labels, sort_keys=True, separators=(",", ":"))
        for ts, count in points:
            grouped[key][ts][le] += count
    out: dict[str, list[HistogramPoint]] = {}
    for key, by_ts in grouped.items():
        born = dict(created.get(key, []))
        out[key] = [
            HistogramPoint(ts, tuple(sorted(by_le.items())), born.get(ts))
            for ts, by_le in sorted(by_ts.items())
        ]
    return out
