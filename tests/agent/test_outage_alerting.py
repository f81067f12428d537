"""Alerts during a database outage: the host's rules keep evaluating from memory, Slack keeps
hearing about them, and when the database returns it gets the outage's history and outbox with
nothing sent twice. Real pynvml over the fake libnvidia-ml, a vLLM simulator, a loopback Slack
through slack_sdk, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from sqlalchemy import select, text

from agent.alerting import store as alert_store
from agent.alerting.recent import RecentWindows
from agent.cli.main import main
from agent.collect.runner import CollectorRunner
from agent.config.settings import load_config
from agent.daemon.app import App
from agent.storage.store import Store
from migrations.schema import alert_history
from migrations.schema import samples as samples_table
from tests.agent.test_alerting_app import GPU, HOOK, T0, Box, hardware, open_box
from tests.agent.test_store import Scripted
from tests.alerts.notifiers.conftest import Loopback, Reply, loopback  # noqa: F401
from tests.conftest import FakeNvml
from tests.fakenvml.build import FakeGpu, FakeNvmlConfig, FakeProcess, GiB

DOWN = "CollectorDown"
HOT = "GpuHot"


@pytest.fixture
def box(
    tmp_path: Path,
    db_url: str,
    fake_nvml: FakeNvml,
    loopback: Loopback,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Box]:
    monkeypatch.setenv("STATE_DIRECTORY", str(tmp_path / "state"))  # PostgreSQL's spool
    monkeypatch.setenv("HOOK", loopback.url + HOOK)  # for the CLI, which reads the same file
    loopback.reply(HOOK, Reply(200, "ok"))
    fake_nvml.write(hardware(util=85))
    notify = '[notify.slack]\nwebhook_url_env = "HOOK"\n'
    env = {"HOOK": loopback.url + HOOK, "STATE_DIRECTORY": str(tmp_path / "state")}
    for opened in open_box(tmp_path, db_url, notify, env, T0):
        opened.sink = loopback
        yield opened


def break_database(app: App) -> None:
    """The store stops taking rounds (as a refused or full database does); the alert tables
    stay, so what reaches them afterwards can be checked."""
    with app.engine.begin() as conn:
        conn.execute(text("DROP TABLE samples"))


def mend_database(app: App) -> None:
    samples_table.create(app.engine)
    while not app.spool.empty:
        app.drain()


def outbox(app: App) -> list[alert_store.OutboxRow]:
    with app.engine.connect() as conn:
        return alert_store.outbox_rows(conn)


def hot(celsius: int) -> FakeNvmlConfig:
    return FakeNvmlConfig(
        gpus=(FakeGpu(uuid=GPU, util=85, used=60 * GiB, temp_c=celsius),),
        processes=(FakeProcess(gpu=0, pid=100, mem=60 * GiB),),
    )


def test_a_gpu_that_overheats_during_an_outage_reaches_slack_then_the_database_once(
    box: Box, fake_nvml: FakeNvml, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    box.run(timedelta(minutes=2))
    break_database(box.app)
    fake_nvml.write(hot(95))  # during the outage, the GPU overheats
    box.run(timedelta(minutes=3))

    assert box.app.spool.stats().rounds == 18
    fired = [t for t in box.texts() if HOT in t]
    assert len(fired) == 1 and "95 C" in fired[0]  # heard during the outage (for: 2m)
    local = box.app.alerting.local
    assert local is not None and local.path.exists()
    assert main(["alerts", "--config", str(tmp_path / "gpuwatch.toml")]) == 0
    shown = capsys.readouterr().out
    assert "host box is spooling: 18 round(s) since 2026-11-02 08:02:00 UTC (" in shown
    assert "0 notification(s) queued locally" in shown  # the one queued was delivered

    mend_database(box.app)
    box.run(timedelta(minutes=1))  # the first evaluations that reach the database

    assert sum(HOT in t for t in box.texts()) == 1  # not sent again
    rows = outbox(box.app)
    assert [(r.status, HOT in r.payload) for r in rows] == [("delivered", True)]
    assert box.app.alerting.unsaved == 0 and not local.path.exists()
    with box.app.engine.connect() as conn:
        history = conn.execute(select(alert_history.c.rule, alert_history.c.fired_at)).all()
    assert history == [(HOT, T0 + timedelta(minutes=4))]  # two minutes into the outage

    fake_nvml.write(hot(40))
    box.run(timedelta(minutes=5))  # a resolution waits for the group's interval (5m)
    resolved = [t for t in box.texts() if HOT in t and t.startswith("[RESOLVED")]
    assert len(resolved) == 1
    with box.app.engine.connect() as conn:
        (ended,) = conn.execute(select(alert_history.c.resolved_at)).scalars().all()
    assert ended is not None


def test_an_alert_that_resolves_during_an_outage_is_not_resolved_twice(
    box: Box, fake_nvml: FakeNvml
) -> None:
    fake_nvml.write(hot(95))
    box.run(timedelta(minutes=3))  # GpuHot fires with the database there
    break_database(box.app)
    fake_nvml.write(hot(40))
    box.run(timedelta(minutes=5))  # a resolution waits for the group's interval (5m)
    during = [t for t in box.texts() if HOT in t]
    mend_database(box.app)
    box.run(timedelta(minutes=2))

    texts = [t for t in box.texts() if HOT in t]
    assert len(texts) == 2 and texts[1].startswith("[RESOLVED")
    assert during == texts  # the resolution went out during the outage, and only then
    assert [r.status for r in outbox(box.app)] == ["delivered", "delivered"]
    with box.app.engine.connect() as conn:
        ((resolved_at,),) = conn.execute(select(alert_history.c.resolved_at)).all()
    assert resolved_at == T0 + timedelta(minutes=3)  # the outage's first evaluation


def test_a_notification_queued_during_an_outage_survives_a_restart(
    tmp_path: Path,
    db_url: str,
    fake_nvml: FakeNvml,  # no driver written: NVML is blind from the start
    loopback: Loopback,  # noqa: F811
) -> None:
    loopback.reply(HOOK, Reply(503, "busy"))  # Slack is away too
    notify = '[notify.slack]\nwebhook_url_env = "HOOK"\n'
    env = {"HOOK": loopback.url + HOOK, "STATE_DIRECTORY": str(tmp_path / "state")}
    now = T0
    for box in open_box(tmp_path, db_url, notify, env, now):
        break_database(box.app)
        box.run(timedelta(minutes=1))  # CollectorDown fires; Slack refuses it, it is retried
        now = box.now
    refused = len(loopback.requests)
    assert refused >= 1 and all(DOWN in r.json()["text"] for r in loopback.requests)

    loopback.reply(HOOK, Reply(200, "ok"))
    for box in open_box(tmp_path, db_url, notify, env, now + timedelta(minutes=1)):
        box.run(timedelta(seconds=20))  # less than the rule's `for`: only the old row is due
        local = box.app.alerting.local
        assert local is not None
        assert [r["status"] for r in local.rows()] == ["delivered"]
    (sent,) = loopback.requests[refused:]  # the new process sent what the old one queued, once
    assert DOWN in sent.json()["text"]


def test_the_rules_memory_answers_windows_as_the_store_does(tmp_path: Path) -> None:
    env = {"GPUWATCH_DATABASE_URL": f"sqlite:///{tmp_path / 'gw.db'}"}
    app = App.open(load_config(None, env), collectors=[])
    store: Store = app.store
    memory = RecentWindows({"q"}, horizon=timedelta(minutes=2))
    collector = Scripted("scrape:a", {"q": 0.0})
    runner = CollectorRunner("h1", [collector])
    try:
        for i in range(30):
            collector.values = {"q": float(i % 7)}
            round_ = runner.run(T0 + timedelta(seconds=10 * i))
            store.write_round(round_)
            memory.add((s for _, s in round_.tagged_samples()), round_.ts)
        end = T0 + timedelta(seconds=290)
        for back in (0, 15, 60, 110):
            start = end - timedelta(seconds=back)
            assert memory.window("q", start, end) == store.window("q", start, end)
            assert memory.window("q", start, end, {"gpu_index": "0"}) == store.window(
                "q", start, end, {"gpu_index": "0"}
            )
        assert memory.window("q", end, end, {"gpu_index": "9"}) == {}
        memory.clear()
        assert memory.empty and memory.window("q", T0, end) == {}
    finally:
        app.close()
