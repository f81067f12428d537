"""The minute rollup a batch of series at a time: the same rows as all series at once (restarts,
births, histograms, the ledger, the carried baselines), and batches that keep together what is
rolled up together."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from sqlalchemy import Engine, Table, select

from agent.storage.buckets import family
from agent.storage.minute_batches import minute_batches
from collectors.base import CollectError, Sample
from migrations.schema import (
    gpu_allocations,
    gpu_usage,
    histogram_layouts,
    histogram_rollups,
    rollup_carry,
    rollups,
    series,
)
from tests.agent.rollup_helpers import Box, GiB, Gpu, alternating, at, rollup

TTFT = "gpuwatch_engine_ttft_seconds"
TOKENS = "gpuwatch_engine_generation_tokens_total"
BOUNDS = ("0.1", "1", "+Inf")


@dataclass
class Scrape:
    """One target's scrape: tokens and a TTFT histogram per model, with their ``_created``
    series. A model appears at its first tick (a birth after a good scrape without it); from
    ``restart`` on the counters restart *higher* than they were, so only ``_created`` tells."""

    target: str
    host: str
    models: dict[str, int] = field(default_factory=dict)  # model -> first tick it is seen
    restart: int = 10**6
    down: frozenset[int] = frozenset()
    tick: int = 0

    @property
    def name(self) -> str:
        return f"scrape:{self.target}"

    def counter(self, model: str) -> float:
        t = self.tick
        return len(model) + (25.0 * t if t < self.restart else 1000.0 + 25.0 * (t - self.restart))

    def collect(self, now: datetime) -> Iterable[Sample]:
        if self.tick in self.down:
            raise CollectError("connection refused")
        created = 1000.0 if self.tick < self.restart else 2000.0
        out = []
        for model, first in self.models.items():
            if self.tick < first:
                continue
            labels = {"host": self.host, "target": self.target, "engine": "vllm", "model": model}
            value = self.counter(model)
            out += [
                Sample(metric=TOKENS, value=value, labels=labels, ts=now),
                Sample(metric=f"{TOKENS.removesuffix('_total')}_created", value=created,
                       labels=labels, ts=now),
                Sample(metric=f"{TTFT}_created", value=created, labels=labels, ts=now),
            ]  # fmt: skip
            out += [
                Sample(metric=f"{TTFT}_bucket", value=value * (k + 1) / 4, ts=now,
                       labels={**labels, "le": le})
                for k, le in enumerate(BOUNDS)
            ]  # fmt: skip
        return out


def box_of(host: str, db: Engine) -> tuple[Box, list[Gpu], list[Scrape]]:
    """Two GPUs shared 3:1 by targets a and b; a is down at ticks 9-10, gains a model at
    tick 14 and restarts at tick 20."""
    gpus = [
        Gpu(
            host=host,
            uuid=f"GPU-{i}",
            index=str(i),
            name=f"nvml-{i}",
            memory={"a": 3.0 * GiB, "b": 1.0 * GiB},
        )
        for i in range(2)
    ]
    scrapes = [
        Scrape("a", host, {"llama": 0, "qwen": 14}, restart=20, down=frozenset({9, 10})),
        Scrape("b", host, {"mistral": 3}),
    ]
    return Box(db, [*gpus, *scrapes], host=host), gpus, scrapes


def run_host(db: Engine, host: str, batch_points: int, ticks: int = 40) -> None:
    """Ticks every 10 s from T+10, the minute job after each whole minute."""
    box, gpus, scrapes = box_of(host, db)
    job = rollup(db, host=host, batch_points=batch_points)
    for i in range(1, ticks + 1):
        for g in gpus:
            g.utilization = alternating(i)
            g.energy = 1000.0 + 90.0 * i
        for s in scrapes:
            s.tick = i
        box.tick(at(10 * i))
        if i % 6 == 0:
            job.run(at(10 * i + 130))  # past the settle time of the minute before


def keyed(db: Engine, host: str) -> dict[str, list[tuple[Any, ...]]]:
    """Everything the minute job wrote for ``host``, series named by metric and labels (without
    the host), so two hosts' rows compare."""
    with db.connect() as conn:
        names = {
            sid: (metric, json.dumps({k: v for k, v in json.loads(lj).items() if k != "host"}))
            for sid, metric, lj in conn.execute(
                select(series.c.id, series.c.metric, series.c.labels).where(series.c.host == host)
            )
        }
        layouts = {
            i: b
            for i, b in conn.execute(select(histogram_layouts.c.id, histogram_layouts.c.bounds))
        }
        out: dict[str, list[tuple[Any, ...]]] = {}
        for table in (rollups, histogram_rollups, rollup_carry):
            rows = conn.execute(select(table).where(table.c.series_id.in_(list(names)))).mappings()
            out[table.name] = sorted((_named(dict(r), names, layouts) for r in rows), key=repr)
        for ledger in (gpu_usage, gpu_allocations):
            out[ledger.name] = _ledger_rows(conn, ledger, host)
    return out


def _named(row: dict[str, Any], names: dict[int, Any], layouts: dict[int, str]) -> tuple[Any, ...]:
    row["series_id"] = names[row["series_id"]]
    if "layout_id" in row:
        row["layout_id"] = layouts[row["layout_id"]]
    return tuple(sorted(row.items(), key=lambda kv: kv[0]))


def _ledger_rows(conn: Any, table: Table, host: str) -> list[tuple[Any, ...]]:
    rows = conn.execute(select(table).where(table.c.host == host)).mappings()
    return sorted(
        (tuple(sorted((k, v) for k, v in r.items() if k != "host")) for r in rows), key=repr
    )


def test_batches_of_one_series_write_what_one_batch_writes(db: Engine) -> None:
    run_host(db, "whole", batch_points=10**9)
    run_host(db, "split", batch_points=1)  # each series (each histogram) a batch of its own

    whole, split = keyed(db, "whole"), keyed(db, "split")
    assert split == whole
    # And the scenario holds what batches could get wrong, each in the rows compared: a
    # restart only _created shows (minute 12:03 holds ticks 19-24: 25, then the 1005 after the
    # restart counted whole, then 4 x 25), a birth (qwen from tick 14, after a good scrape
    # without it: its 354 counted whole, then 4 x 25), the histograms, the ledger of both
    # GPUs, the baselines carried.
    increase = {(row["model"], row["start"]): row["increase"] for row in token_rows(whole)}
    assert increase[("llama", at(180))] == 25.0 + 1005.0 + 4 * 25.0
    assert increase[("qwen", at(120))] == 354.0 + 4 * 25.0
    assert len(whole["histogram_rollups"]) == 6 + 6 + 4  # llama, mistral, then qwen
    assert len(whole["gpu_usage"]) == 2 * 6
    assert len(whole["rollup_carry"]) >= 12


def token_rows(rows: dict[str, list[tuple[Any, ...]]]) -> list[dict[str, Any]]:
    out = []
    for row in rows["rollups"]:
        named = dict(row)
        metric, labels = named["series_id"]
        if metric == TOKENS:
            out.append({**named, "model": json.loads(labels)["model"]})
    return out


def test_the_context_comes_first_then_the_ledger_and_histograms_stay_whole() -> None:
    labels = {"host": "h", "target": "a", "model": "m"}
    meta = {
        1: ("gpuwatch_target_up", {"host": "h", "target": "a"}),
        2: (TOKENS, labels),
        3: (TOKENS.replace("_total", "_created"), labels),
        4: ("gpuwatch_gpu_utilization_ratio", {"host": "h", "gpu_uuid": "G"}),
        **{5 + k: (f"{TTFT}_bucket", {**labels, "le": le}) for k, le in enumerate(BOUNDS)},
        8: ("gpuwatch_engine_e2e_latency_seconds_bucket", {**labels, "le": "+Inf"}),
    }
    ids = sorted(meta)

    batches = minute_batches(meta, ids, 100, lambda m: m.startswith("gpuwatch_gpu_"), 250)

    assert [b.ids for b in batches[:2]] == [[1, 3], [4]]
    assert [b.metered for b in batches] == [False, True] + [False] * (len(batches) - 2)
    rest = [b.ids for b in batches[2:]]
    assert sorted(sid for ids_ in rest for sid in ids_) == [2, 5, 6, 7, 8]
    assert [5, 6, 7] in rest  # one histogram: 300 points, over the limit, but never split
    assert all(len(b) * 100 <= 250 or family(*meta[b[0]]) is not None for b in rest)


def test_without_a_ledger_or_context_the_first_two_batches_are_empty() -> None:
    meta = {sid: (TOKENS, {"host": "h", "target": "a", "model": f"m{sid}"}) for sid in range(5)}

    batches = minute_batches(meta, list(meta), 10, lambda _: False, 20)

    assert [b.ids for b in batches] == [[], [], [0, 1], [2, 3], [4]]
