"""Timing helpers shared by the benchmarks."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable


def timed(fn: Callable[[int], object], rounds: int) -> list[float]:
    """Seconds per call of ``fn(i)`` for i in range(rounds), after one warm-up call ``fn(-1)``.

    The warm-up keeps first-call costs (symbol lookups, caches, statement compilation) out of
    the steady-state figures.
    """
    fn(-1)
    out = []
    for i in range(rounds):
        start = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - start)
    return out


def ms(values: list[float]) -> str:
    """Median and 95th percentile in milliseconds, aligned for side-by-side reading."""
    q = statistics.quantiles(values, n=20)
    return f"median {statistics.median(values) * 1e3:7.3f} ms   p95 {q[18] * 1e3:7.3f} ms"
