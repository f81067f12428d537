"""Storage: the database opens right, a round is one transaction, and nothing stored is lost."""

from __future__ import annotations

import stat
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import IntegrityError

from agent.collect.runner import CollectorRunner
from agent.storage.db import open_database, upgrade_database
from agent.storage.store import INSERT_BATCH, Store
from collectors.base import CollectError, Sample
from migrations.runner import SchemaError, head_revision

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


class Scripted:
    """A collector whose output the test sets; stands for the outside world, not for our code."""

    def __init__(self, name: str, values: dict[str, float]) -> None:
        self.name = name
        self.values = values
        self.fail: str | None = None

    def collect(self, now: datetime) -> Iterable[Sample]:
        if self.fail:
            raise CollectError(self.fail)
        return [
            Sample(metric=m, value=v, labels={"host": "h1", "gpu_index": "0"}, ts=now)
            for m, v in self.values.items()
        ]


def test_sqlite_is_private_in_wal_mode_and_upgraded_on_first_start(tmp_path: Path) -> None:
    path = tmp_path / "state" / "gpuwatch.db"
    engine = open_database(f"sqlite:///{path}")
    with engine.connect() as conn:
        assert conn.execute(text("PRAGMA journal_mode")).scalar() == "wal"
        assert (
            conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
            == head_revision()
        )
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    engine.dispose()


def test_postgresql_is_never_upgraded_implicitly(pg_url: str) -> None:
    with pytest.raises(SchemaError, match="run `gpuwatch db upgrade`"):
        open_database(pg_url)
    engine = create_engine(pg_url)
    with engine.connect() as conn:  # nothing was created behind the operator's back
        assert conn.execute(text("SELECT to_regclass('public.samples')")).scalar() is None
    engine.dispose()


def _open(db_url: str) -> Store:
    upgrade_database(db_url)
    return Store(open_database(db_url), "h1")


def test_a_round_is_stored_with_exact_values_and_utc_times(db_url: str) -> None:
    store = _open(db_url)
    gpu = Scripted(
        "nvml",
        {"gpuwatch_gpu_utilization_ratio": 0.97, "gpuwatch_gpu_memory_used_bytes": 75161927680.0},
    )
    runner = CollectorRunner("h1", [gpu])
    store.write_round(runner.run(T0))
    store.write_round(runner.run(T0 + timedelta(seconds=10)))
    rows = store.samples("gpuwatch_gpu_memory_used_bytes")
    assert [(r.ts, r.value, r.labels) for r in rows] == [
        (T0, 75161927680.0, {"gpu_index": "0", "host": "h1"}),
        (T0 + timedelta(seconds=10), 75161927680.0, {"gpu_index": "0", "host": "h1"}),
    ]
    health = store.samples("gpuwatch_collector_success")
    assert [r.value for r in health] == [1.0, 1.0]
    runs = store.collector_runs("nvml")
    assert [(r["success"], r["samples"]) for r in runs] == [(1, 2), (1, 2)]
    store.engine.dispose()


def test_a_failed_collector_is_recorded_with_its_reason(db_url: str) -> None:
    store = _open(db_url)
    gpu = Scripted("nvml", {"gpuwatch_gpu_utilization_ratio": 0.5})
    runner = CollectorRunner("h1", [gpu])
    gpu.fail = "NVML Shared Library Not Found"
    store.write_round(runner.run(T0))
    (run,) = store.collector_runs()
    assert run["success"] == 0 and run["error"] == "NVML Shared Library Not Found"
    assert store.samples("gpuwatch_gpu_utilization_ratio") == []  # unknown, not zero
    store.engine.dispose()


def test_a_failed_write_keeps_what_was_stored_and_the_next_round_works(db_url: str) -> None:
    store = _open(db_url)
    gpu = Scripted("nvml", {"gpuwatch_gpu_utilization_ratio": 0.25})
    runner = CollectorRunner("h1", [gpu])
    store.write_round(runner.run(T0))
    gpu.values = {"gpuwatch_gpu_power_watts": 300.0, "gpuwatch_gpu_utilization_ratio": 0.5}
    with pytest.raises(
        IntegrityError
    ):  # same instant again: the primary key refuses the whole round
        store.write_round(runner.run(T0))
    assert [r.value for r in store.samples("gpuwatch_gpu_utilization_ratio")] == [0.25]
    assert store.samples("gpuwatch_gpu_power_watts") == []
    store.write_round(runner.run(T0 + timedelta(seconds=10)))  # the id cache was not poisoned
    assert [r.value for r in store.samples("gpuwatch_gpu_power_watts")] == [300.0]
    store.engine.dispose()


def test_two_daemons_share_series_rows_without_conflict(db_url: str) -> None:
    first, second = _open(db_url), Store(open_database(db_url), "h1")
    gpu = Scripted("nvml", {"gpuwatch_gpu_temperature_celsius": 71.0})
    first.write_round(CollectorRunner("h1", [gpu]).run(T0))
    second.write_round(CollectorRunner("h1", [gpu]).run(T0 + timedelta(seconds=1)))
    assert len(first.samples("gpuwatch_gpu_temperature_celsius")) == 2
    first.engine.dispose()
    second.engine.dispose()


def _wide(count: int) -> Scripted:
    """A collector with ``count`` series: a round several insert batches long."""
    return Scripted("nvml", {f"gpuwatch_test_{i:04d}": float(i) for i in range(count)})


def test_a_round_larger_than_an_insert_batch_is_stored_whole_and_replayed_once(
    db_url: str,
) -> None:
    store = _open(db_url)
    count = 3 * INSERT_BATCH + 7
    runner = CollectorRunner("h1", [_wide(count)])
    round_ = runner.run(T0)
    rows = len(list(round_.tagged_samples()))  # with the run's own health samples
    assert rows > count
    assert store.write_round(round_) == rows
    assert store.write_rounds([round_], replay=True) == rows
    stored = {r.metric: r.value for r in store.samples() if r.metric.startswith("gpuwatch_test_")}
    assert stored == {f"gpuwatch_test_{i:04d}": float(i) for i in range(count)}
    assert len(store.samples("gpuwatch_test_0000")) == 1  # the replay doubled nothing
    store.engine.dispose()


def test_a_conflict_in_a_rounds_last_insert_batch_stores_none_of_its_first(db_url: str) -> None:
    store = _open(db_url)
    count = 3 * INSERT_BATCH
    last = f"gpuwatch_test_{count - 1:04d}"
    store.write_round(CollectorRunner("h1", [Scripted("nvml", {last: -1.0})]).run(T0))
    with pytest.raises(IntegrityError):  # the last series was stored at T0 already
        store.write_round(CollectorRunner("h1", [_wide(count)]).run(T0))
    assert store.samples("gpuwatch_test_0000") == []
    assert [r.value for r in store.samples(last)] == [-1.0]
    store.engine.dispose()
