"""Shared by the engine simulator's tests: a settable clock, traffic on it, and reading
rendered text back (samples by name and labels, families by # TYPE, histograms checked
against the traffic's truth)."""

from __future__ import annotations

import math
import re

import pytest
from prometheus_client.parser import text_string_to_metric_families

from agent.sim.traffic import Traffic, cumulative_counts

T0 = 1_796_037_041.5
Labels = tuple[tuple[str, str], ...]
Samples = dict[tuple[str, Labels], float]


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def traffic(models: tuple[str, ...] = ("llama-8b",), engines: int = 1, gpus: int = 1) -> Traffic:
    return Traffic(models, engines, gpus=gpus, clock=Clock())


def samples(text: str) -> Samples:
    """Every sample as prometheus_client's parser reads it, keyed by name and sorted labels."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def families(text: str) -> dict[str, tuple[str, int]]:
    """Exposed family name (as in # TYPE) -> (type, number of samples)."""
    out: dict[str, tuple[str, int]] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            out[name] = (kind, 0)
        elif line and not line.startswith("#"):
            name = re.split(r"[{ ]", line, maxsplit=1)[0]
            fam = next(f for f in (name, *_stems(name)) if f in out)
            out[fam] = (out[fam][0], out[fam][1] + 1)
    return out


def _stems(name: str) -> list[str]:
    return [name.removesuffix(s) for s in ("_bucket", "_count", "_sum") if name.endswith(s)]


def value(s: Samples, name: str, **labels: str) -> float:
    return s[(name, tuple(sorted(labels.items())))]


def assert_histogram(s: Samples, name: str, observed: tuple[float, ...], **labels: str) -> None:
    """Bucket counts, _count and _sum equal the truth, for whatever le set was printed."""
    key = tuple(sorted(labels.items()))
    buckets = {
        float(dict(ls)["le"]): v
        for (n, ls), v in s.items()
        if n == f"{name}_bucket" and tuple(p for p in ls if p[0] != "le") == key
    }
    bounds = sorted(b for b in buckets if not math.isinf(b))
    assert buckets, f"no buckets for {name}{labels}"
    expected = cumulative_counts(observed, bounds)
    assert tuple(buckets[b] for b in [*bounds, math.inf]) == expected
    assert s[(f"{name}_count", key)] == len(observed)
    assert s[(f"{name}_sum", key)] == pytest.approx(sum(observed))
