"""Local-first fleet: boxes forward what reports read from their own databases to one central
PostgreSQL, and the report made there is the fleet's.

Two boxes (hosts a and b of tests/agent/report_month.py, two days and a bit, each in a local
database of its own, rolled up by the real rollup job every six simulated hours and forwarded
after each run, as the daemon does) against a reference database holding both hosts: the
central report must equal the reference's in every figure. Then the failures: a central
database that is down or refuses a batch leaves the watermarks where they were, and the next
forward sends it all again; a resend replaces, never doubles.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from dataclasses import replace
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import Engine, delete, func, select, text, update

from agent.storage.db import open_database, upgrade_database
from agent.storage.forward.job import Forwarder, central_engine, stream_names
from migrations.schema import (
    alert_history,
    cost_records,
    forward_state,
    gpu_usage,
    histogram_rollups,
    rollup_state,
    rollups,
    series,
)
from tests.agent import fleet_helpers as F
from tests.conftest import _admin_url, new_pg_database


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> str:
    """The report of one database that holds both hosts, as a direct-mode fleet would."""
    engine = F.sqlite_engine(tmp_path_factory.mktemp("reference"), "both")
    F.fill(engine, F.HOSTS)
    F.store_alerts(engine, ("a", "b", "fleet"))
    F.store_bills(engine)
    try:
        return F.report_json(engine)
    finally:
        engine.dispose()


@pytest.fixture
def central(pg_url: str) -> Iterator[str]:
    upgrade_database(pg_url)  # PostgreSQL is only ever upgraded on purpose
    yield pg_url


@pytest.fixture
def extra_pg() -> Iterator[str]:
    """A second PostgreSQL database: a box whose own store is PostgreSQL."""
    admin = _admin_url()
    assert admin is not None
    yield from new_pg_database(admin)


OPENED: list[Engine] = []  # every engine a test opens, disposed after it


@pytest.fixture(autouse=True)
def _dispose() -> Iterator[None]:
    yield
    while OPENED:
        OPENED.pop().dispose()


def opened(engine: Engine) -> Engine:
    OPENED.append(engine)
    return engine


def forwarder(local: Engine, url: str, host: str) -> Forwarder:
    return Forwarder(local, opened(central_engine(url, 10)), host)


def box(tmp_path: Path, host: str, url: str | None = None) -> Engine:
    """A box's local database with its alerts (and, on box a, the provider bills the leader
    fetched), before any rollup."""
    if url is None:
        engine = opened(F.sqlite_engine(tmp_path, host))
    else:
        upgrade_database(url)
        engine = opened(open_database(url))
    F.store_alerts(engine, (host,))
    if host == "a":
        F.store_bills(engine)
    return engine


def fill_and_forward(engine: Engine, fwd: Forwarder, host: str) -> None:
    def forward(now: F.datetime) -> None:
        assert fwd.run(now).ok

    F.fill(engine, (host,), after_rollup=forward)


@pytest.mark.parametrize("local", ["sqlite", "postgresql"])
def test_the_central_report_is_the_union_of_the_boxes(
    tmp_path: Path, central: str, reference: str, local: str, request: pytest.FixtureRequest
) -> None:
    url_a = request.getfixturevalue("extra_pg") if local == "postgresql" else None
    boxes = {"a": box(tmp_path, "a", url_a), "b": box(tmp_path, "b")}
    for host, engine in boxes.items():
        fill_and_forward(engine, forwarder(engine, central, host), host)
    center = opened(open_database(central))
    F.store_alerts(center, ("fleet",))  # the leader's budget alerts are written centrally
    assert F.report_json(center) == reference
    # Each host's own figures are its box's: the central report filtered to a host has that
    # box's own totals, models, hosts and GPUs (the budget is the fleet's: not compared).
    for host, engine in boxes.items():
        assert F.own(center, host) == F.own(engine, host)
    with center.connect() as conn:  # raw samples never cross the network
        assert conn.execute(text("SELECT count(*) FROM samples")).scalar() == 0


def counts(engine: Engine) -> dict[str, int]:
    tables = (series, rollups, histogram_rollups, gpu_usage, alert_history, cost_records)
    with engine.connect() as conn:
        return {t.name: conn.execute(select(func.count()).select_from(t)).scalar_one()
                for t in tables}  # fmt: skip


def test_a_resend_replaces_and_never_doubles(tmp_path: Path, central: str) -> None:
    engine = box(tmp_path, "a")
    fwd = forwarder(engine, central, "a")
    fill_and_forward(engine, fwd, "a")
    center = opened(open_database(central))
    before, report = counts(center), F.report_json(center)
    assert before["rollups"] and before["histogram_rollups"] and before["gpu_usage"]
    # A crash after the central commit, before the local watermarks moved: all is sent again.
    with engine.begin() as conn:
        conn.execute(delete(forward_state))
    fresh = forwarder(engine, central, "a")  # a restarted daemon: no id map cached
    result = fresh.run(F.AFTER)
    assert result.ok and result.rows > sum(before.values()) - before["series"]
    assert counts(center) == before
    assert F.report_json(center) == report


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def marks(engine: Engine) -> dict[str, object]:
    with engine.connect() as conn:
        return {r.stream: (r.until_ts, r.until_id) for r in conn.execute(select(forward_state))}


def test_a_central_database_that_is_down_keeps_the_watermarks(
    tmp_path: Path, central: str, caplog: pytest.LogCaptureFixture
) -> None:
    engine = box(tmp_path, "a")
    down = forwarder(engine, f"postgresql+psycopg://gw:secret@127.0.0.1:{closed_port()}/gw", "a")
    caplog.set_level(logging.INFO, logger="agent.storage.forward.job")
    F.fill(engine, ("a",), after_rollup=lambda now: None)
    first, second = down.run(F.AFTER), down.run(F.AFTER + F.timedelta(minutes=1))
    assert not first.ok and not second.ok and first.error
    assert marks(engine) == {}
    failures = [r for r in caplog.records if "central database failed" in r.message]
    assert len(failures) == 1  # once per outage, not every minute
    assert "secret" not in caplog.text  # the URL's password is never logged
    # The database is back (same box, same forwarder object): everything goes, from the start.
    down.central = opened(central_engine(central, 10))
    assert down.run(F.AFTER + F.timedelta(minutes=2)).ok
    assert "recovered" in caplog.text
    center = opened(open_database(central))
    assert F.own(center, "a") == F.own(engine, "a")
    assert {"rollups/60", "gpu_usage/60", "series"} <= set(marks(engine)) <= set(stream_names())


def test_a_refused_batch_keeps_the_watermarks_and_is_sent_again(
    tmp_path: Path, central: str
) -> None:
    engine = box(tmp_path, "a")
    F.fill(engine, ("a",))
    center = opened(open_database(central))
    with center.begin() as conn:  # the central database refuses every ledger row
        conn.execute(text("ALTER TABLE gpu_usage ADD CONSTRAINT refuse CHECK (false) NOT VALID"))
    fwd = forwarder(engine, central, "a")
    result = fwd.run(F.AFTER)
    assert not result.ok and "refuse" in (result.error or "")
    assert marks(engine) == {}
    assert counts(center)["rollups"] == 0  # one transaction: nothing of the batch stayed
    with center.begin() as conn:
        conn.execute(text("ALTER TABLE gpu_usage DROP CONSTRAINT refuse"))
    assert fwd.run(F.AFTER + F.timedelta(minutes=1)).ok
    assert F.own(center, "a") == F.own(engine, "a")


def test_an_alert_resolved_after_it_was_forwarded_is_updated_centrally(
    tmp_path: Path, central: str
) -> None:
    engine = box(tmp_path, "a")
    open_alert = {"scope": "a", "rule": "GpuIdle", "labels": '{"host":"a"}', "severity": "warning",
                  "fired_at": F.START, "resolved_at": None, "summary": "idle"}  # fmt: skip
    with engine.begin() as conn:
        conn.execute(alert_history.insert(), [open_alert])
    fwd = forwarder(engine, central, "a")
    assert fwd.run(F.START).ok
    center = opened(open_database(central))
    resolved = F.START + F.timedelta(hours=2)
    with engine.begin() as conn:
        conn.execute(
            update(alert_history)
            .where(alert_history.c.resolved_at.is_(None))
            .values(resolved_at=resolved)
        )
    assert fwd.run(F.START + F.timedelta(hours=3)).ok
    assert F.history(center) == F.history(engine)
    assert (F.START, resolved) in {(r[3], r[4]) for r in F.history(center)}
    # Nothing open any more: the next forward sends no alert again.
    assert fwd.run(F.START + F.timedelta(hours=4)).rows == 0


def test_only_the_box_own_rows_are_forwarded(tmp_path: Path, central: str) -> None:
    engine = opened(F.sqlite_engine(tmp_path, "both"))
    F.fill(engine, F.HOSTS)
    F.store_alerts(engine, ("a", "b", "fleet"))
    assert forwarder(engine, central, "a").run(F.AFTER).ok
    center = opened(open_database(central))
    with center.connect() as conn:
        hosts = set(conn.execute(select(series.c.host).distinct()).scalars())
        ledger = set(conn.execute(select(gpu_usage.c.host).distinct()).scalars())
        scopes = set(conn.execute(select(alert_history.c.scope).distinct()).scalars())
        state = {tuple(r) for r in conn.execute(select(rollup_state.c.host, rollup_state.c.job))}
    assert hosts == ledger == scopes == {"a"}
    assert state == {("a", "minute"), ("a", "hour"), ("a", "day")}


def test_a_box_forwards_within_its_time_budget_and_resumes(tmp_path: Path, central: str) -> None:
    engine = box(tmp_path, "a")
    F.fill(engine, ("a",))
    ticks = iter(range(0, 10_000, 30))  # every round "takes" 30 s of a 20 s budget
    fwd = replace(forwarder(engine, central, "a"), monotonic=lambda: float(next(ticks)))
    first = fwd.run(F.AFTER)
    assert first.ok and first.rounds == 1 and not first.caught_up
    while not (result := fwd.run(F.AFTER)).caught_up:
        assert result.ok
    center = opened(open_database(central))
    assert F.own(center, "a") == F.own(engine, "a")


def test_the_central_database_keeps_what_the_box_keeps(tmp_path: Path, central: str) -> None:
    """Each box trims its own forwarded rows centrally, once an hour, by its retention: the
    other hosts' rows stay."""
    boxes = {host: box(tmp_path, host) for host in ("a", "b")}
    for host, engine in boxes.items():
        fill_and_forward(engine, forwarder(engine, central, host), host)
    center = opened(open_database(central))
    before = counts(center)
    keep_minutes = timedelta(hours=2)
    trimmer = Forwarder(
        boxes["a"], opened(central_engine(central, 10)), "a",
        retention=(keep_minutes, timedelta(days=730)),
    )  # fmt: skip
    assert trimmer.run(F.AFTER).ok
    cutoff = F.AFTER - keep_minutes
    with center.connect() as conn:
        old = select(func.count()).where(gpu_usage.c.resolution == 60, gpu_usage.c.start < cutoff)
        assert conn.execute(old.where(gpu_usage.c.host == "a")).scalar_one() == 0
        assert conn.execute(old.where(gpu_usage.c.host == "b")).scalar_one() > 0
    after = counts(center)
    assert after["rollups"] < before["rollups"] and after["gpu_usage"] < before["gpu_usage"]
    assert trimmer.run(F.AFTER + timedelta(minutes=5)).ok  # within the hour: nothing to trim
    assert counts(center) == after
