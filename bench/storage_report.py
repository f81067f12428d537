"""The figures of bench/storage.py, printed next to their baseline and targets."""

from __future__ import annotations

from collections.abc import Sequence

from bench.storage_prom import Blocks, Export
from bench.storage_scenario import ENGINES, GPUS, MODELS, TARGETS, VERSION, Checkpoint, Run
from bench.storage_sizes import RAW, Sizes
from bench.storage_steady import Projection, Retention, project, total

DAY_FRACTION = 1 / 86400  # seconds to days
STEADY_TARGET = 1.5e9  # bytes per box at defaults (issue 11)
RATIO_TARGET = 4.0  # gpuwatch's bytes per raw sample over Prometheus'


def report(
    url: str,
    run: Run,
    points: Sequence[tuple[Checkpoint, Sizes]],
    export: Export,
    blocks: Blocks,
    wall: float,
) -> None:
    (pa, a), (pb, b) = points[0], points[-1]
    step = run.config.daemon.interval_seconds
    span = (pb.ticks - pa.ticks) * step
    elapsed = pb.ticks * step  # the ticks so far cover [T0, T0 + elapsed)
    keep = Retention.of(run.config.retention)
    projections = project(a, b, span, elapsed, keep)
    backend = "SQLite" if url.startswith("sqlite") else "PostgreSQL"
    _header(run, backend, keep, wall, elapsed)
    _tables(projections, b, pb.ticks - pa.ticks, span)
    per_sample = _raw(projections, a, b, (pa, pb), export, span * DAY_FRACTION / keep.raw)
    _rollups(b)
    _steady(projections, backend)
    _prometheus(blocks, export, per_sample)


def _header(run: Run, backend: str, keep: Retention, wall: float, elapsed: float) -> None:
    step = run.config.daemon.interval_seconds
    print()
    print(f"box: {GPUS} GPUs (fake NVML), {TARGETS} x {VERSION} targets of {len(MODELS)} models x "
          f"{ENGINES} data-parallel engines; {backend}")  # fmt: skip
    print(f"{run.ticks} ticks every {step:g} s ({elapsed / 3600:g} simulated hours), "
          f"{run.rollups} rollup runs; retention from the config: raw {keep.raw:g} d, "
          f"minute {keep.minute:g} d, hour {keep.hour:g} d")  # fmt: skip
    print(f"wall: {wall:.0f} s (ticks {run.tick_seconds:.0f} s, rollups "
          f"{run.rollup_seconds:.0f} s, measuring and export the rest)")  # fmt: skip


def _tables(projections: list[Projection], b: Sizes, ticks: int, span: float) -> None:
    print()
    print("per table, indexes included (growth measured from the first checkpoint to the end):")
    head = f"{'table':<22}{'group':<8}{'kept':<13}{'rows':>10}{'bytes':>13}{'B/row':>8}"
    print(head + f"{'rows/tick':>11}{'steady state':>15}")
    per_day_ticks = ticks / span * 86400 if span else 0.0
    for p in sorted(projections, key=lambda p: -p.steady_bytes):
        if not p.rows and not p.bytes:
            continue
        per_tick = p.rows_per_day / per_day_ticks if per_day_ticks else 0.0
        print(f"{p.table:<22}{p.group:<8}{p.kinds:<13}{p.rows:>10,}{p.bytes:>13,}"
              f"{p.bytes_per_row:>8.1f}{per_tick:>11.1f}{_mb(p.steady_bytes):>15}"
              + (f"  ({p.note})" if p.note else ""))  # fmt: skip
    rows_per_tick = sum(p.rows_per_day for p in projections) / per_day_ticks if ticks else 0.0
    print(f"rows per tick, all tables: {rows_per_tick:.1f}")
    if b.file_bytes is not None:
        free = b.file_bytes - b.total
        unknown = "" if b.exact else "; no dbstat in this SQLite: per-table bytes unknown"
        print(f"SQLite file: {b.file_bytes:,} bytes ({free:,} in no table: free pages){unknown}")


def _raw(
    projections: list[Projection],
    a: Sizes,
    b: Sizes,
    points: tuple[Checkpoint, Checkpoint],
    export: Export,
    span_in_retentions: float,
) -> float:
    """Prints and returns the bytes per raw sample at steady state: the raw tables' projected
    size over the samples a raw retention holds (what a head not yet packed adds included)."""
    pa, pb = points
    raw = [p.table for p in projections if p.group == RAW]
    series = [p.table for p in projections if p.group == "series"]
    bytes_b = sum(b.tables[t].bytes for t in raw)
    bytes_a = sum(a.tables[t].bytes for t in raw if t in a.tables)
    # Samples stored at the first checkpoint, in proportion to the samples written by then.
    stored_a = export.samples * pa.samples_written / max(pb.samples_written, 1)
    added = export.samples - stored_a
    overall = bytes_b / export.samples if export.samples else 0.0
    marginal = (bytes_b - bytes_a) / added if added else 0.0
    label_bytes = sum(b.tables[t].bytes for t in series)
    print()
    print(f"raw samples: {export.samples:,} stored over {export.series:,} series "
          f"({pb.samples_written:,} written); tables {', '.join(raw)}")  # fmt: skip
    print(f"  bytes per raw sample, all raw storage / samples stored: {overall:7.1f}"
          f"   (with the series table, {label_bytes:,} B: "
          f"{(bytes_b + label_bytes) / max(export.samples, 1):.1f})")  # fmt: skip
    print(f"  bytes per raw sample added after the first checkpoint:  {marginal:7.1f}"
          "   (the growth alone: a head not yet packed is not in it)")  # fmt: skip
    held = added / span_in_retentions if span_in_retentions else 0.0
    steady = sum(p.steady_bytes for p in projections if p.group == RAW) / held if held else 0.0
    print(f"  at steady state, raw tables / samples a raw retention holds: {steady:5.1f}"
          f"   ({held:,.0f} samples)")  # fmt: skip
    return steady


def _rollups(b: Sizes) -> None:
    print()
    print("rows by resolution (tables with one), bytes per row:")
    for t in b.tables.values():
        if not t.by_resolution:
            continue
        counts = ", ".join(f"{n:,} at {r} s" for r, n in sorted(t.by_resolution.items()))
        print(f"  {t.name:<20} {counts}; {t.bytes_per_row:.1f} B/row")


def _steady(projections: list[Projection], backend: str) -> None:
    size = total(projections)
    groups: dict[str, float] = {}
    for p in projections:
        groups[p.group] = groups.get(p.group, 0.0) + p.steady_bytes
    parts = ", ".join(f"{g} {_mb(v)}" for g, v in sorted(groups.items(), key=lambda kv: -kv[1]))
    verdict = "OK" if size <= STEADY_TARGET else "OVER TARGET"
    print()
    print(f"steady state per box at the default retentions ({backend}): {size / 1e9:.2f} GB "
          f"({parts})")  # fmt: skip
    print(f"target: <= {STEADY_TARGET / 1e9:.1f} GB -> {verdict}")


def _prometheus(blocks: Blocks, export: Export, ours: float) -> None:
    print()
    print(f"Prometheus TSDB (promtool create-blocks-from openmetrics), same {export.samples:,} "
          f"samples: {blocks.blocks} blocks, {blocks.samples:,} samples in meta.json")  # fmt: skip
    if blocks.samples != export.samples:
        print(f"  WARNING: the blocks hold {blocks.samples:,} samples, {export.samples:,} exported")
    print(f"  chunks {blocks.chunk_bytes:,} B + index {blocks.index_bytes:,} B + meta "
          f"{blocks.other_bytes:,} B = {blocks.bytes:,} B: {blocks.bytes_per_sample:.2f} B/sample "
          f"(chunks alone {blocks.chunk_bytes / max(blocks.samples, 1):.2f})")  # fmt: skip
    ratio = ours / blocks.bytes_per_sample
    verdict = "OK" if ratio <= RATIO_TARGET else "OVER TARGET"
    print(f"gpuwatch {ours:.1f} B per raw sample = {ratio:.1f} x Prometheus' "
          f"{blocks.bytes_per_sample:.2f}; target <= {RATIO_TARGET:g} x -> {verdict}")  # fmt: skip


def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"
