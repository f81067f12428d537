"""The spool: rounds the database cannot take wait in a local file and are forwarded, oldest
first, once it can, with nothing lost or doubled; the log says so once, not every tick."""

from __future__ import annotations

import logging
import threading
import tracemalloc
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, text

from agent.collect.runner import CollectorRun, CollectorRunner, Round
from agent.config.settings import ConfigError, load_config
from agent.daemon.app import DRAIN_BATCH, App
from agent.daemon.deadline import Deadline, DeadlineExceeded
from agent.daemon.outage import OutageLog
from agent.storage.spool import Spool, decode, encode
from collectors.base import Sample
from migrations.schema import rollup_state
from migrations.schema import samples as samples_table
from tests.agent.test_store import Scripted

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
POWER = "gpuwatch_gpu_power_watts"


def round_at(i: int, value: float = 99.0) -> Round:
    return CollectorRunner("h1", [Scripted("nvml", {POWER: value})]).run(T0 + timedelta(seconds=i))


# -- the file ------------------------------------------------------------------------------------


def test_a_round_comes_back_from_the_spool_exactly_as_it_went_in() -> None:
    failing = Scripted("scrape:a", {})
    failing.fail = "connection refused"
    # A value no float text format rounds back by accident (NaN never reaches the spool: the
    # runner drops it, collectors.values).
    round_ = CollectorRunner("h1", [Scripted("nvml", {POWER: 0.1 + 0.2}), failing]).run(T0)

    again = decode(encode(round_))

    assert again.ts == round_.ts
    assert [(r.collector, r.success, r.error, r.ts) for r in again.runs] == [
        (r.collector, r.success, r.error, r.ts) for r in round_.runs
    ]
    assert again.runs[0].samples[0].labels == {"host": "h1", "gpu_index": "0"}
    assert again.runs[0].samples[0].value == 0.1 + 0.2
    assert again.derived == round_.derived


def test_the_spool_keeps_order_across_a_restart_and_forgets_only_what_was_removed(
    tmp_path: Path,
) -> None:
    spool = Spool(tmp_path / "spool.db", max_bytes=10**6)
    for i in range(5):
        spool.append(round_at(i))
    first = spool.oldest(2)
    spool.remove([s.seq for s in first])
    spool.close()

    reopened = Spool(tmp_path / "spool.db", max_bytes=10**6)

    left = [s.round().ts for s in reopened.oldest(10)]
    assert left == [T0 + timedelta(seconds=i) for i in (2, 3, 4)]
    stats = reopened.stats()
    assert (stats.rounds, stats.oldest, stats.dropped) == (3, T0 + timedelta(seconds=2), 0)
    assert (tmp_path / "spool.db").stat().st_mode & 0o777 == 0o600


def test_a_full_spool_drops_its_oldest_rounds_and_counts_them(tmp_path: Path) -> None:
    size = len(encode(round_at(0)))
    spool = Spool(tmp_path / "spool.db", max_bytes=3 * size + size // 2)

    for i in range(5):
        spool.append(round_at(i))

    stats = spool.stats()
    assert (stats.rounds, stats.dropped, stats.oldest) == (3, 2, T0 + timedelta(seconds=2))
    assert stats.bytes <= spool.max_bytes


# -- the daemon's tick and drain -------------------------------------------------------------


@pytest.fixture
def app(tmp_path: Path) -> Iterator[App]:
    env = {"GPUWATCH_DATABASE_URL": f"sqlite:///{tmp_path / 'gw.db'}"}
    opened = App.open(load_config(None, env), collectors=[Scripted("nvml", {POWER: 99.0})])
    yield opened
    opened.close()


def test_an_outage_spools_the_rounds_and_the_drain_stores_them_once(
    app: App, caplog: pytest.LogCaptureFixture
) -> None:
    assert app.spool.path.parent == Path(app.config.database_url.removeprefix("sqlite:///")).parent
    with app.engine.begin() as conn:
        conn.execute(text("DROP TABLE samples"))  # the store breaks under the daemon
    with caplog.at_level(logging.INFO, logger="agent.daemon.app"):
        rounds = [app.tick(T0 + timedelta(seconds=10 * i)) for i in range(3)]
        samples_table.create(app.engine)
        behind = app.tick(T0 + timedelta(seconds=30))  # back, but behind the spooled rounds

        assert app.spool.stats().rounds == 4
        assert app.store.samples(POWER) == []  # nothing of the outage written out of order
        assert app.drain() == 4
        app.drain()  # nothing left: a second run forwards nothing and doubles nothing
        app.tick(T0 + timedelta(seconds=40))

    assert all(r.runs[0].samples for r in rounds + [behind])  # collection (and /metrics) went on
    exposed = {s.metric: s.value for s in rounds[2].derived if s.metric.startswith("gpuwatch_sp")}
    assert exposed["gpuwatch_spool_rounds"] == 3.0
    assert exposed["gpuwatch_spool_oldest_age_seconds"] == 20.0
    assert exposed["gpuwatch_spool_bytes"] > 0
    assert exposed["gpuwatch_spool_dropped_rounds_total"] == 0.0
    stored = app.store.samples(POWER)
    assert [s.ts for s in stored] == [T0 + timedelta(seconds=10 * i) for i in range(5)]
    with app.engine.connect() as conn:
        runs = conn.execute(text("SELECT count(*) FROM collector_runs")).scalar()
    assert runs == 5  # the nvml collector's run, once per round
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 2, messages
    assert messages[0].startswith("storing rounds failed: no such table: samples")
    assert messages[0].endswith("; spooling them")
    assert messages[1].startswith("storing rounds recovered after")
    assert app.spool.stats().rounds == 0
    assert not app.spool.path.exists()  # an empty spool leaves no file (nor its page cache)


def test_a_drain_cut_short_after_its_commit_is_replayed_without_doubling(app: App) -> None:
    # kill -9 between the database's commit and the spool's delete: the same rounds again.
    rounds = [round_at(i) for i in range(3)]
    for r in rounds:
        app.spool.append(r)
    app.store.write_rounds(rounds[:2], replay=True)  # committed, then the crash

    assert app.drain() == 3

    assert [s.ts for s in app.store.samples(POWER)] == [r.ts for r in rounds]
    with app.engine.connect() as conn:
        count = conn.execute(text("SELECT count(*) FROM collector_runs")).scalar()
    assert count == len(rounds)


def test_a_drain_holds_one_decoded_round_at_a_time_not_its_whole_batch(app: App) -> None:
    # A decoded round of a busy box is a fraction of a megabyte of objects: a batch of them at
    # once is a peak Python's allocator keeps after every outage.
    rounds = [busy_round(i) for i in range(DRAIN_BATCH + 1)]
    app.store.write_round(rounds[0])  # its series exist from now on, as on a running box
    for r in rounds[2:]:
        app.spool.append(r)

    one = traced_peak(lambda: app.store.write_rounds([decode(encode(rounds[1]))], replay=True))
    batch = traced_peak(app.drain)

    assert app.spool.empty and len(app.store.samples(POWER)) == len(rounds) * 2000
    assert batch < 2 * one, (
        f"a drain of {DRAIN_BATCH} rounds peaked at {batch} B, one round {one} B"
    )


def busy_round(i: int) -> Round:
    ts = T0 + timedelta(seconds=i)
    samples = tuple(
        Sample(metric=POWER, value=float(g), ts=ts, labels={"host": "h1", "gpu_index": str(g)})
        for g in range(2000)
    )
    return Round(ts, (CollectorRun("nvml", ts, True, 0.01, samples),), ())


def traced_peak(work: Callable[[], object]) -> int:
    tracemalloc.start()
    try:
        work()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_the_rollup_waits_for_the_spooled_minutes(app: App) -> None:
    for i in range(0, 130, 10):
        app.tick(T0 + timedelta(seconds=i))
    app.spool.append(round_at(130))  # an outage from T0+130 s on: that round is not stored yet

    app.roll_up(T0 + timedelta(minutes=10))
    waiting = minute_watermark(app)
    app.drain()
    app.roll_up(T0 + timedelta(minutes=10))

    assert waiting is None or waiting <= T0 + timedelta(seconds=130)
    assert minute_watermark(app) == T0 + timedelta(minutes=2)


def minute_watermark(app: App) -> datetime | None:
    query = select(rollup_state.c.watermark).where(
        rollup_state.c.host == app.config.host, rollup_state.c.job == "minute"
    )
    with app.engine.connect() as conn:
        return conn.execute(query).scalar()


def test_a_hung_database_costs_the_tick_its_deadline_only() -> None:
    deadline = Deadline()
    release = threading.Event()

    with pytest.raises(DeadlineExceeded, match="within 0.05s"):
        deadline.call(release.wait, timeout=0.05)
    with pytest.raises(DeadlineExceeded, match="has not returned yet"):
        deadline.call(lambda: 1, timeout=5)  # refused at once while the first is stuck
    release.set()
    while deadline.busy:
        threading.Event().wait(0.01)
    assert deadline.call(lambda: 7, timeout=5) == 7
    with pytest.raises(ZeroDivisionError):
        deadline.call(lambda: 1 / 0, timeout=5)
    deadline.close()


def test_an_outage_is_logged_when_it_starts_once_a_minute_and_when_it_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [0.0]
    outage = OutageLog(
        "storing rounds", logging.getLogger("t"), then="spooling", clock=lambda: now[0]
    )
    with caplog.at_level(logging.INFO, logger="t"):
        for second in range(0, 150, 2):  # 75 failures at 2 s ticks
            now[0] = float(second)
            outage.failed("connection refused")
        now[0] = 150.0
        outage.ok()
        outage.ok()  # nothing to say twice

    still = "storing rounds still failing: 30 more failure(s) in the last 60 s; latest: "
    assert [r.getMessage() for r in caplog.records] == [
        "storing rounds failed: connection refused; spooling",
        still + "connection refused",
        still + "connection refused",
        "storing rounds recovered after 150 s and 75 failure(s)",
    ]


# -- configuration -------------------------------------------------------------------------


def test_the_spool_sits_beside_sqlite_or_in_the_state_directory_per_database(
    tmp_path: Path,
) -> None:
    sqlite = load_config(None, {"GPUWATCH_DATABASE_URL": f"sqlite:///{tmp_path / 'gw.db'}"})
    state = {"STATE_DIRECTORY": str(tmp_path / "state")}
    one = load_config(None, {**state, "GPUWATCH_DATABASE_URL": "postgresql+psycopg://u:pw@db/a"})
    two = load_config(None, {**state, "GPUWATCH_DATABASE_URL": "postgresql+psycopg://u:pw@db/b"})

    assert sqlite.spool.path == tmp_path / "gw.spool.db"
    assert one.spool.path is not None and one.spool.path.parent == tmp_path / "state"
    assert one.spool.path != two.spool.path  # one database's rounds never go to another
    assert "pw" not in str(one.spool.path)


def test_spool_and_deadline_settings_are_checked(tmp_path: Path) -> None:
    config = tmp_path / "gpuwatch.toml"
    config.write_text('[spool]\nmax_bytes = 1000\n[daemon]\ndatabase_timeout = "-1s"\n')
    with pytest.raises(ConfigError) as error:
        load_config(str(config), {})
    assert "spool.max_bytes: must be at least 1048576 (1 MiB), got 1000" in str(error.value)
    assert "daemon.database_timeout" in str(error.value)

    config.write_text("[spool]\nmax_bytes = 5e6\n[daemon]\ninterval_seconds = 1\n")
    loaded = load_config(str(config), {})
    assert loaded.spool.max_bytes == 5_000_000
    assert loaded.daemon.database_timeout == 1.0  # half of 1 s, but at least 1 s
    config.write_text('[daemon]\ninterval_seconds = 10\ndatabase_timeout = "3s"\n')
    assert load_config(str(config), {}).daemon.database_timeout == 3.0
    config.write_text("[daemon]\ninterval_seconds = 10\n")
    assert load_config(str(config), {}).daemon.database_timeout == 5.0


def test_a_second_spool_on_the_file_sees_what_the_first_appended(tmp_path: Path) -> None:
    # A reload opens the new App's spool while the old App may still spool a round.
    new = Spool(tmp_path / "spool.db", max_bytes=10**6)
    old = Spool(tmp_path / "spool.db", max_bytes=10**6)
    old.append(round_at(0))
    old.close()
    assert new.empty

    new.refresh()

    assert not new.empty and [s.round().ts for s in new.oldest(5)] == [T0]
