"""bench/packing_memory.py: its controller puts the packed hour back, and its report reads the
levels between packings, not during them."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from agent.storage.db import upgrade_database
from bench import packing_memory as pm

HOUR = pm.FILLED_FROM_US
LATER = HOUR + 2 * 3600 * 10**6  # a block the controller must leave alone


def _box(tmp_path: Path) -> sqlite3.Connection:
    """The schema at head, the filled hour kept aside, and the state a packing leaves: the
    hour's rows gone from the head, its chunks written, its watermark set."""
    upgrade_database(f"sqlite:///{tmp_path}/gw.db")
    conn = sqlite3.connect(tmp_path / "gw.db", isolation_level=None)
    conn.execute("ATTACH ? AS saved", (str(tmp_path / "saved.db"),))
    conn.execute("CREATE TABLE saved.rows (series_id INTEGER, ts BIGINT, value DOUBLE)")
    kept = [(sid, HOUR + s * 10**6, float(s)) for sid in (1, 2, 3) for s in range(0, 3600, 60)]
    conn.executemany("INSERT INTO saved.rows VALUES (?, ?, ?)", kept)
    conn.execute("INSERT INTO samples VALUES (1, ?, 7.0)", (LATER,))  # a live row
    for sid in (1, 2, 3):
        conn.execute("INSERT INTO sample_chunks VALUES (?, ?, 60, x'00')", (sid, HOUR))
    conn.execute("INSERT INTO sample_chunks VALUES (1, ?, 1, x'00')", (LATER,))
    for job in ("compact", "minute"):
        conn.execute(
            "INSERT INTO rollup_state VALUES ('bench-box', ?, '2026-12-01 00:00:00.000000')",
            (job,),
        )
    return conn


def test_the_controller_puts_the_packed_hour_back_for_the_next_packing(tmp_path: Path) -> None:
    conn = _box(tmp_path)

    pm.restore(conn, [1, 2, 3])

    head = conn.execute("SELECT series_id, ts, value FROM samples WHERE ts < ?", (LATER,))
    assert sorted(head) == sorted(conn.execute("SELECT * FROM saved.rows"))
    assert conn.execute("SELECT count(*) FROM samples WHERE ts = ?", (LATER,)).fetchone() == (1,)
    chunks = conn.execute("SELECT series_id, start FROM sample_chunks").fetchall()
    assert chunks == [(1, LATER)]  # the hour's chunks gone, any other block's kept
    jobs = [job for (job,) in conn.execute("SELECT job FROM rollup_state")]
    assert jobs == ["minute"]  # the packing starts from the head's first row again


def _readings(spans: list[tuple[float, float, float]]) -> list[pm.Reading]:
    """A reading every 5 s of (from, to, level)."""
    return [
        pm.Reading(t, level, 0.0, 0.0)
        for start, end, level in spans
        for t in range(int(start), int(end), 5)
    ]


def test_levels_are_read_between_packings_not_during_them() -> None:
    # 10 minutes at 50 MB; packing 1 at 600-615 s (RSS 60 during it), 52 after; packing 2 at
    # 700-715, 52.5 after.
    readings = _readings(
        [(0, 600, 50.0), (600, 625, 60.0), (625, 700, 52.0), (700, 725, 61.0), (725, 800, 52.5)]
    )
    marks = [pm.Packing(602, 615, 625), pm.Packing(702, 715, 725)]

    levels = pm.levels(readings, marks)

    assert levels == [50.0, 52.0, 52.5]


@pytest.mark.parametrize(
    ("step", "verdict", "slope"),
    [
        (lambda n: 0.3 * n, "still adding up", "+0.300"),  # each packing 0.3 MB on the last
        (lambda n: 0.3 * min(n, 3), "levelled off", "+0.000"),  # three steps, then none
    ],
)
def test_the_report_says_whether_the_steps_level_off(
    capsys: pytest.CaptureFixture[str], step: Callable[[int], float], verdict: str, slope: str
) -> None:
    spans, marks, at = [(0.0, 600.0, 50.0)], [], 600.0
    for n in range(1, 9):
        marks.append(pm.Packing(at + 2, at + 15, at + 25))
        spans += [(at, at + 25, 70.0), (at + 25, at + 60, 50.0 + step(n))]
        at += 60

    pm.report(_readings(spans), marks)

    out = capsys.readouterr().out
    assert f"{slope} MB per packing" in out
    assert verdict in out


def test_the_drift_over_time_leaves_the_packings_themselves_out() -> None:
    # 1 MB an hour outside the packings, 20 MB more during each (left out), from 600 s on.
    marks = [pm.Packing(at + 2, at + 15, at + 25) for at in range(600, 3600, 60)]

    def level(t: int) -> float:
        packing = any(m.started - 2 <= t < m.restored for m in marks)
        return 50.0 + t / 3600 + (20.0 if packing else 0.0)

    readings = [pm.Reading(t, level(t), 0.0, 0.0) for t in range(0, 3600, 5)]

    drift = pm.time_slope(readings, marks)

    assert drift.slope == pytest.approx(1.0, abs=1e-6)
