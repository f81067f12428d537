"""Stored windows as PromQL reads them: cases of promql/promqltest/testdata (start_timestamps.test
and histograms.test, data/prometheus_promql.json), stored through the store on SQLite and
PostgreSQL and read back by the window arithmetic (agent.storage.windows) and the rollup.

Times are injected (the cases' own instants after T); nothing reads a clock.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine

from agent.storage.series_math import HistogramPoint, bucket_increases
from agent.storage.windows import counter_increase, histogram_window
from collectors.base import Sample
from tests.agent.rollup_helpers import TOKENS, Box, EngineScrape, T, rollup, series_rows

UPSTREAM = json.loads(
    (Path(__file__).parent / "data" / "prometheus_promql.json").read_text(encoding="utf-8")
)
CASES = [(block, name) for block in UPSTREAM["start_timestamps"] for name in block["series"]]
TTFT = "gpuwatch_engine_ttft_seconds"


def at(seconds: float) -> datetime:
    return T + timedelta(seconds=seconds)


def store_counters(db: Engine, block: dict[str, Any]) -> Box:
    """Each series of ``block`` as a model's token counter, its start timestamps as the
    counter's ``_created`` (absent where the case has none), scraped at the case's instants."""
    scrape = EngineScrape("a")
    box = Box(db, [scrape])
    instants = sorted({s[0] for series in block["series"].values() for s in series["samples"]})
    for now in instants:
        scrape.tokens, scrape.created = {}, {}
        for model, series in block["series"].items():
            for t, value, start in series["samples"]:
                if t == now:
                    scrape.tokens[model] = float(value)
                    if start is not None:
                        scrape.created[model] = at(start).timestamp()
        box.tick(at(now))
    return box


@pytest.mark.parametrize(
    ("block", "model"), CASES, ids=[name for _, name in CASES]
)  # fmt: skip
def test_start_timestamps_tell_restarts_as_prometheus_tells_them(
    db: Engine, block: dict[str, Any], model: str
) -> None:
    """Among them "invalid_prev_st": a ``_created`` later than its own sample is no start at all,
    so the next sample's start, which differs from it, is no restart (Prometheus: increase 0;
    before, gpuwatch counted a restart). Read from raw samples and from the minute rollup."""
    box = store_counters(db, block)
    expected = [float(e) for e in block["series"][model]["expected"]]
    raw = [
        counter_increase(box.store, TOKENS, at(start), at(end), {"model": model})
        for start, end in block["windows"]
    ]
    assert raw == expected

    last = max(end for _, end in block["windows"])
    rollup(db).run(at(last + 60))
    minutes = series_rows(db, TOKENS, model=model)
    rolled = [
        sum(row["increase"] for row_start, row in minutes.items() if at(a) <= row_start < at(b))
        for a, b in block["windows"]
    ]
    assert rolled == expected


def test_the_same_start_rule_holds_for_a_histograms_buckets() -> None:
    """gpuwatch's classic histograms read ``_created`` as its counters do (Prometheus' case is
    a float counter; its native histograms take the same rule)."""
    block = UPSTREAM["start_timestamps"][0]
    for name, series in block["series"].items():
        points = [
            HistogramPoint(
                at(t), ((0.1, v), (math.inf, v)), None if s is None else at(s).timestamp()
            )
            for t, v, s in series["samples"]
        ]
        (segment,) = bucket_increases(points, at(120), at(180))
        assert segment.increases[-1] == series["expected"][0], name


def series_values(spec: str, count: int) -> list[float]:
    """promqltest's "a+bxn" (a, a+b, ... n times after a), as many as ``count``."""
    start, rest = spec.split("+")
    step, _ = rest.split("x")
    return [float(start) + float(step) * i for i in range(count)]


class Buckets:
    """A scraped histogram's ``_bucket`` series, each ``le`` spelled as the case spells it."""

    name = "scrape:a"

    def __init__(self, histograms: dict[str, Any], count: int) -> None:
        self.now_index = 0
        self.values = {
            (instance, le): series_values(spec, count)
            for instance, case in histograms.items()
            for le, spec in case["buckets"].items()
        }

    def collect(self, now: datetime) -> list[Sample]:
        return [
            Sample(metric=TTFT + "_bucket", value=values[self.now_index], ts=now,
                   labels={"host": "box", "target": "a", "model": instance, "le": le})
            for (instance, le), values in self.values.items()
        ]  # fmt: skip


def test_one_bound_spelled_three_ways_in_a_stored_window_is_one_bucket(db: Engine) -> None:
    """le "0.2", "2e-1" and "2.0e-1" stored side by side (written by another version, or
    forwarded from another host): one bucket, their counts summed, as histogram_quantile
    coalesces them; before, reading such a window failed ("bucket bounds must be strictly
    increasing")."""
    case = UPSTREAM["same_upper_bound"]
    scrape = Buckets(case["histograms"], case["samples"])
    box = Box(db, [scrape])
    for i in range(case["samples"]):
        scrape.now_index = i
        box.tick(at(i * case["step"]))
    start, end = case["window"]
    for instance, expected in case["histograms"].items():
        qs = tuple(float(q) for q in expected["expected"])
        window = histogram_window(box.store, TTFT, at(start), at(end), {"model": instance}, qs)
        found = {f"{q:g}": v for q, v in window.quantiles.items()}
        assert found.keys() == expected["expected"].keys()
        for q, want in expected["expected"].items():  # NaN (null) is unknown: None here
            # promqltest compares with a relative tolerance; so does this.
            assert found[q] is None if want is None else found[q] == pytest.approx(want, rel=1e-12)
