"""What a series' minute rows read of other series: the ``_created`` values beside each
counter (restarts) and each target's successful scrapes (births, agent.storage.buckets._birth).

Few series hold it (one ``_created`` series per counter child, one ``gpuwatch_target_up`` per
target), so the minute job reads them first and the other series a batch at a time
(agent.storage.minute_batches).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from agent.storage.points import Points, SeriesMeta

TARGET_UP = "gpuwatch_target_up"
# The series a ``_created`` series dates: its counter, or its histogram's parts.
CREATED_OF = ("_total", "_bucket", "_count", "_sum")


@dataclass(frozen=True, slots=True)
class MinuteContext:
    """The context of a span's minute rows, taken from the points of its series."""

    created: dict[tuple[str, str], dict[datetime, float]]  # (counter, labels) -> {ts: created}
    scrapes: dict[tuple[str, str], list[datetime]]  # (host, target) -> good scrapes

    @classmethod
    def of(cls, meta: SeriesMeta, points: Points) -> MinuteContext:
        """The context in ``points`` (the series of :func:`context_input` among them)."""
        return cls(_created_index(meta, points), _good_scrapes(meta, points))


def context_input(metric: str) -> bool:
    """Whether other series' minute rows read ``metric``'s points (:class:`MinuteContext`)."""
    return metric == TARGET_UP or metric.endswith("_created")


def scrape_key(labels: Mapping[str, str]) -> tuple[str, str]:
    return labels.get("host", ""), labels.get("target", "")


def _good_scrapes(meta: SeriesMeta, points: Points) -> dict[tuple[str, str], list[datetime]]:
    """When each target was scraped successfully, from its gpuwatch_target_up series."""
    out: dict[tuple[str, str], list[datetime]] = {}
    for sid, (metric, labels) in meta.items():
        if metric == TARGET_UP:
            out[scrape_key(labels)] = [ts for ts, up in points.get(sid, []) if up]
    return out


def _created_index(
    meta: SeriesMeta, points: Points
) -> dict[tuple[str, str], dict[datetime, float]]:
    """(counter metric, labels) -> {ts: created} from the ``_created`` series beside it."""
    out: dict[tuple[str, str], dict[datetime, float]] = {}
    for sid, (metric, labels) in meta.items():
        if not metric.endswith("_created"):
            continue
        base = metric.removesuffix("_created")
        births = dict(points.get(sid, []))
        key_labels = json.dumps(labels, sort_keys=True)
        for name in (base + suffix for suffix in CREATED_OF):
            out[(name, key_labels)] = births
    return out
