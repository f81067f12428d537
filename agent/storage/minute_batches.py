"""The minute rollup's input series, in batches read and rolled up one after the other.

What the minute job holds at once is one batch's points, not the box's. At 1 s ticks a box's
inputs (8 GPUs, two vLLM targets: about 320 series of 120 points each, the minute and the
largest gap on either side) read at once are megabytes of Python objects every minute, beside
the tick's own; Python keeps the arenas such a peak opened while any object in them lives,
so the peak would become the daemon's level.

A series' rows read other series in three ways, so those go together:
- the ``_created`` series and ``gpuwatch_target_up`` (restarts and births) are read first,
  in a batch of their own, and handed to every batch (``minute_context.MinuteContext``);
- the cost ledger reads the metered series together (one GPU's readings across metrics);
- a histogram's ``_bucket`` series make one row together.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass

from agent.storage.buckets import family
from agent.storage.minute_context import context_input
from agent.storage.points import SeriesMeta

# Points per batch: about 0.5 MB of Python objects (a point is ~90 bytes). At 10 s ticks a
# box's inputs fit in one or two batches; at 1 s ticks a minute takes about ten.
BATCH_POINTS = 5_000


@dataclass(frozen=True, slots=True)
class Batch:
    """Series read and rolled up together."""

    ids: list[int]
    metered: bool = False  # the ledger's series: it meters their points


def minute_batches(
    meta: SeriesMeta,
    ids: list[int],
    points_per_series: float,
    metered: Callable[[str], bool],
    limit: int = BATCH_POINTS,
) -> list[Batch]:
    """``ids`` in batches of about ``limit`` points each (a single histogram may be more).
    The first batch holds the context's series and the second the metered ones, even when
    there are none: the ledger is written whether or not it metered anything."""
    context = [sid for sid in ids if context_input(meta[sid][0])]
    taken = set(context)
    ledger = [sid for sid in ids if sid not in taken and metered(meta[sid][0])]
    taken.update(ledger)
    groups: dict[Hashable, list[int]] = {}
    for sid in ids:
        if sid not in taken:
            metric, labels = meta[sid]
            groups.setdefault(family(metric, labels) or sid, []).append(sid)
    per_batch = max(1, int(limit // max(points_per_series, 1.0)))
    batches = [Batch(context), Batch(ledger, metered=True)]
    current: list[int] = []
    for group in groups.values():
        if current and len(current) + len(group) > per_batch:
            batches.append(Batch(current))
            current = []
        current.extend(group)
    if current:
        batches.append(Batch(current))
    return batches
