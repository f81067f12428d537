"""Keeps the engine simulator's /metrics renders cheap over hours of traffic (bench/storage.py).

The simulator recounts every histogram from every request served so far on each render, which
makes a render over a few thousand requests take seconds. Between two renders a histogram's
observations only grow at the end (requests are appended in serve order and nothing restarts
in this bench), so :func:`incremental_counts` counts only the new tail onto the counts of the
longest earlier call whose values are an exact prefix (checked element by element, so a
histogram that does not extend a known one is simply counted in full). The result is the same
tuple :func:`agent.sim.traffic.cumulative_counts` returns; :func:`install` asserts that on a
sample before swapping it into the renderer.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import agent.sim.expo as expo
from agent.sim.traffic import cumulative_counts

HEAD = 8  # values that key the memo: histograms starting alike are few


@dataclass(eq=False)  # entries are told apart by identity: comparing values costs a scan
class _Memo:
    values: tuple[float, ...]
    counts: tuple[int, ...]


_memo: dict[tuple[tuple[float, ...], tuple[float, ...]], list[_Memo]] = {}
_lock = threading.Lock()  # each target's server renders in its own thread


def incremental_counts(values: Iterable[float], bounds: Sequence[float]) -> tuple[int, ...]:
    vals = tuple(values)
    with _lock:
        return _counts(vals, tuple(bounds))


def _counts(vals: tuple[float, ...], bounds: tuple[float, ...]) -> tuple[int, ...]:
    key = (bounds, vals[:HEAD])
    entries = _memo.setdefault(key, [])
    best: _Memo | None = None
    for entry in entries:
        n = len(entry.values)
        if n <= len(vals) and (best is None or n > len(best.values)) and vals[:n] == entry.values:
            best = entry
    if best is None:
        counts = cumulative_counts(vals, bounds)
    else:
        tail = cumulative_counts(vals[len(best.values) :], bounds)
        counts = tuple(a + b for a, b in zip(best.counts, tail, strict=True))
        entries.remove(best)  # its values are a prefix of these: this entry supersedes it
    entries.append(_Memo(vals, counts))
    return counts


def install() -> None:
    """Render the simulator's histograms with :func:`incremental_counts` from now on."""
    bounds = (0.1, 0.5, 1.0)
    for values in ((), (0.1, 0.2), (0.1, 0.2, 0.5, 2.0, 0.05)):
        assert incremental_counts(values, bounds) == cumulative_counts(values, bounds)
    _memo.clear()
    expo.cumulative_counts = incremental_counts
