"""Raw Prometheus text read independently of gpuwatch's mappers: every sample by name and
labels, sums over a family's children, histogram buckets, and ``histogram_quantile`` as
Prometheus computes it (promql/quantile.go, bucketQuantile), written out here so that the
test's expectations do not come from the code under test."""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping

from prometheus_client.parser import text_string_to_metric_families

Key = tuple[str, frozenset[tuple[str, str]]]
Raw = dict[Key, float]


def parse(text: str) -> Raw:
    return {
        (s.name, frozenset(s.labels.items())): float(s.value)
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def rows(raw: Raw, name: str, **where: str) -> list[tuple[dict[str, str], float]]:
    return [
        (dict(labels), value)
        for (n, labels), value in raw.items()
        if n == name and all(dict(labels).get(k) == v for k, v in where.items())
    ]


def total(raw: Raw, name: str, **where: str) -> float | None:
    """The sum over every child of ``name`` matching ``where``; None when none is there."""
    found = rows(raw, name, **where)
    return sum(v for _, v in found) if found else None


def highest(raw: Raw, name: str, **where: str) -> float | None:
    found = rows(raw, name, **where)
    return max(v for _, v in found) if found else None


def buckets(raw: Raw, base: str) -> dict[float, float]:
    """Cumulative count per upper bound, summed over the children (one engine here)."""
    out: dict[float, float] = defaultdict(float)
    for labels, value in rows(raw, base + "_bucket"):
        out[float(labels["le"])] += value
    return dict(out)


def add(*histograms: Mapping[float, float]) -> dict[float, float]:
    out: dict[float, float] = defaultdict(float)
    for h in histograms:
        for le, n in h.items():
            out[le] += n
    return dict(out)


def subtract(later: Mapping[float, float], earlier: Mapping[float, float]) -> dict[float, float]:
    return {le: n - earlier.get(le, 0.0) for le, n in later.items()}


def quantile(q: float, by_le: Mapping[float, float]) -> float | None:
    """Prometheus' bucketQuantile: linear interpolation inside the bucket that holds the
    rank; the +Inf bucket answers the highest finite bound. None where Prometheus gives NaN."""
    ordered: list[tuple[float, float]] = sorted(by_le.items())
    if len(ordered) < 2 or not math.isinf(ordered[-1][0]):
        return None
    observations = ordered[-1][1]
    if observations == 0:
        return None
    rank = q * observations
    b = next((i for i, (_, n) in enumerate(ordered[:-1]) if n >= rank), len(ordered) - 1)
    if b == len(ordered) - 1:
        return ordered[-2][0]
    if b == 0 and ordered[0][0] <= 0:
        return ordered[0][0]
    start, end, count = 0.0, ordered[b][0], ordered[b][1]
    if b > 0:
        start = ordered[b - 1][0]
        count -= ordered[b - 1][1]
        rank -= ordered[b - 1][1]
    return start + (end - start) * (rank / count)


def families(text: str) -> set[str]:
    """The family names as exposed (``# TYPE`` lines), e.g. ``vllm:prompt_tokens_total``."""
    return {line.split(" ")[2] for line in text.splitlines() if line.startswith("# TYPE ")}


def all_equal(pairs: Iterable[tuple[str, float | None, float | None]]) -> list[str]:
    """The lines where the two sides differ (exactly: these are counts and copies)."""
    return [f"{what}: gpuwatch {ours} != raw {theirs}" for what, ours, theirs in pairs
            if ours != theirs]  # fmt: skip
