"""Summing stored histogram rows: what a report's latency quantiles stand on, on both databases."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from sqlalchemy import Engine, insert

from agent.storage.buckets import increase_sums, pack
from migrations.schema import histogram_layouts, histogram_rollups, series

T0 = datetime(2026, 11, 1, tzinfo=UTC)
HOUR = 3600


def _fill(engine: Engine) -> tuple[int, int]:
    """Two histograms; the first changed its layout (a bound added) after two hours."""
    old = {"0.1": 1.0, "1": 2.0, "+Inf": 3.0}
    new = {"0.1": 4.0, "0.5": 0.5, "1": 6.0, "+Inf": 7.25}
    with engine.begin() as conn:
        ids = [
            conn.execute(
                insert(series)
                .values(host="h", collector="rollup", metric="m", labels=labels)
                .returning(series.c.id)
            ).scalar_one()
            for labels in ('{"model":"a"}', '{"model":"b"}')
        ]
        layouts = {}
        for by_le in (old, new):
            bounds, _ = pack(by_le)
            layouts[bounds] = conn.execute(
                insert(histogram_layouts).values(bounds=bounds).returning(histogram_layouts.c.id)
            ).scalar_one()
        rows = []
        for sid, hour, by_le in [
            (ids[0], 0, old), (ids[0], 1, old), (ids[0], 2, new), (ids[1], 0, new),
        ]:  # fmt: skip
            bounds, increases = pack(by_le)
            rows.append({"series_id": sid, "resolution": HOUR, "layout_id": layouts[bounds],
                         "start": T0 + timedelta(hours=hour), "increases": increases})  # fmt: skip
        conn.execute(insert(histogram_rollups), rows)
    return ids[0], ids[1]


def test_rows_are_summed_per_series_and_bound_across_layouts(db: Engine) -> None:
    first, second = _fill(db)
    h = histogram_rollups.c
    where = [h.series_id == first, h.series_id == second]
    with db.connect() as conn:
        sums = {(sid, le): total for sid, le, total in increase_sums(conn, where)}
    assert sums == {
        (first, "0.1"): 1 + 1 + 4.0,
        (first, "1"): 2 + 2 + 6.0,
        (first, "+Inf"): 3 + 3 + 7.25,
        (first, "0.5"): 0.5,
        (second, "0.1"): 4.0,
        (second, "0.5"): 0.5,
        (second, "1"): 6.0,
        (second, "+Inf"): 7.25,
    }


def test_only_the_rows_the_conditions_select(db: Engine) -> None:
    first, _ = _fill(db)
    h = histogram_rollups.c
    where = [(h.series_id == first) & (h.start < T0 + timedelta(hours=1))]
    with db.connect() as conn:
        assert sorted(increase_sums(conn, where)) == sorted(
            [(first, "0.1", 1.0), (first, "1", 2.0), (first, "+Inf", 3.0)]
        )
        assert increase_sums(conn, []) == []
