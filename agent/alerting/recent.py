"""The alert rules' windows from memory, while the database is away.

During an outage the tick spools its rounds (agent.storage.spool) and the database answers
nothing, yet the host's rules must keep evaluating: a GPU that overheats during a PostgreSQL
outage is exactly what an operator wants to hear about. The rules read a few metrics over a few
minutes (target up, queue depth, the latency histograms); this module keeps those, and only
those, from the rounds of the outage, for as long as the longest window, and answers the same
``window`` question the store does. It starts empty when the outage starts (what the database
held before is out of reach), so the first minutes of an outage see shorter windows; it is
emptied when the database takes rounds again, so a healthy daemon holds nothing here.
"""

from __future__ import annotations

import json
from collections import defaultdict, deque
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta

from collectors.base import Sample

Point = tuple[datetime, float]


class RecentWindows:
    """The last ``horizon`` of the samples of ``metrics``, per series, oldest first."""

    def __init__(self, metrics: Iterable[str], horizon: timedelta) -> None:
        self.metrics = frozenset(metrics)
        self.horizon = horizon
        # metric -> canonical labels JSON -> points; the labels are kept decoded beside them
        # so that matching a window does not decode JSON per series per tick.
        self._points: dict[str, dict[str, deque[Point]]] = defaultdict(dict)
        self._labels: dict[str, dict[str, str]] = {}
        self._latest: datetime | None = None

    @property
    def empty(self) -> bool:
        return self._latest is None

    def add(self, samples: Iterable[Sample], now: datetime) -> None:
        """Keep the wanted ``samples`` of a round taken at ``now``; forget what is older than
        the horizon (one point before it is kept: the baseline an increase starts from)."""
        for s in samples:
            if s.metric not in self.metrics:
                continue
            key = json.dumps(s.labels, sort_keys=True, separators=(",", ":"))
            self._labels.setdefault(key, dict(s.labels))
            self._points[s.metric].setdefault(key, deque()).append((s.ts, s.value))
        self._latest = now
        self._forget(now - self.horizon)

    def clear(self) -> None:
        self._points.clear()
        self._labels.clear()
        self._latest = None

    def window(
        self, metric: str, start: datetime, end: datetime, match: Mapping[str, str] = {}
    ) -> dict[str, list[Point]]:
        """As :meth:`agent.storage.store.Store.window`: per series, its points in (start, end]
        after its last point at or before ``start``, oldest first."""
        out: dict[str, list[Point]] = {}
        for key, points in self._points.get(metric, {}).items():
            labels = self._labels[key]
            if any(labels.get(k) != v for k, v in match.items()):
                continue
            before = [p for p in points if p[0] <= start][-1:]
            inside = [p for p in points if start < p[0] <= end]
            if before or inside:
                out[key] = before + inside
        return out

    def _forget(self, cutoff: datetime) -> None:
        for by_series in self._points.values():
            for points in by_series.values():
                while len(points) > 1 and points[1][0] <= cutoff:
                    points.popleft()
