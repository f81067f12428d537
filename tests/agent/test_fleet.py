"""Several `gpuwatch run` processes on one real PostgreSQL: exactly one leads the fleet work at a
time, and killing the leader (SIGKILL, no goodbye) hands the lead to another within a minute."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import pytest

from agent.config.settings import load_config
from agent.daemon.app import App
from agent.daemon.leader import AlwaysLeader, leadership_for
from agent.storage.db import open_database, upgrade_database
from collectors.base import Sample
from tests.agent.daemon_harness import RunningDaemon, free_port, start_daemon
from tests.alerts.notifiers.conftest import Loopback, Reply, loopback  # noqa: F401

LEADER = re.compile(r'^gpuwatch_fleet_leader\{host="([^"]+)"\} (\S+)$', re.MULTILINE)


def leaders(daemons: dict[str, RunningDaemon]) -> dict[str, bool]:
    """Each live daemon's own answer on /metrics (absent while it has not checked yet)."""
    out = {}
    for host, daemon in daemons.items():
        if daemon.proc.poll() is not None:
            continue
        try:
            text = daemon.metrics()
        except httpx.HTTPError:
            continue
        found = LEADER.search(text)
        if found:
            out[host] = float(found.group(2)) == 1.0
    return out


def wait_for_one_leader(daemons: dict[str, RunningDaemon], timeout: float, among: set[str]) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        seen = leaders(daemons)
        leading = [h for h, lead in seen.items() if lead]
        assert len(leading) <= 1, f"two leaders at once: {leading}"
        if leading and set(seen) >= among:
            return leading[0]
        time.sleep(0.2)
    logs = "\n".join(f"--- {h}\n{d.log()[-2000:]}" for h, d in daemons.items())
    raise AssertionError(f"no single leader among {sorted(among)} within {timeout} s\n{logs}")


HOOK = "/services/TF/BF/fleetsecret"


def digest_due_now() -> str:
    """A [digest] whose send time was an hour ago: due at once, whatever day the test runs."""
    at = datetime.now(UTC) - timedelta(hours=1)
    day = at.strftime("%A").lower()
    return f'[digest]\nweekday = "{day}"\nat = "{at:%H:%M}"\ngrace = "6h"\n'


@pytest.fixture
def fleet(
    tmp_path: Path,
    pg_url: str,
    loopback: Loopback,  # noqa: F811
) -> Iterator[dict[str, RunningDaemon]]:
    upgrade_database(pg_url)  # PostgreSQL is only ever upgraded on purpose
    loopback.reply(HOOK, Reply(200, "ok"))
    daemons = {}
    for host in ("gpu-a", "gpu-b", "gpu-c"):
        folder = tmp_path / host
        folder.mkdir()
        port = free_port()
        config = folder / "gpuwatch.toml"
        config.write_text(
            f'host = "{host}"\n[daemon]\ninterval_seconds = 1\n'
            f'metrics_listen = "127.0.0.1:{port}"\n'
            '[notify.slack]\nwebhook_url_env = "HOOK"\n' + digest_due_now()
        )
        env = {"GPUWATCH_DATABASE_URL": pg_url, "HOOK": loopback.url + HOOK}
        daemons[host] = start_daemon(config, folder, port, env)
    try:
        yield daemons
    finally:
        for daemon in daemons.values():
            daemon.kill()


def test_one_leader_at_a_time_and_the_lead_moves_when_the_leader_dies(
    fleet: dict[str, RunningDaemon],
    loopback: Loopback,  # noqa: F811
) -> None:
    first = wait_for_one_leader(fleet, timeout=30, among=set(fleet))
    time.sleep(2)
    assert sum(leaders(fleet).values()) == 1  # still the same single leader
    assert leaders(fleet)[first]

    fleet[first].kill()  # SIGKILL: its session ends without unlocking anything
    killed_at = time.monotonic()
    rest = set(fleet) - {first}
    second = wait_for_one_leader(fleet, timeout=60, among=rest)
    assert second != first
    assert time.monotonic() - killed_at < 60
    assert "leads the fleet work now" in fleet[second].log()

    # The week's digest went out once, from the first leader; the second finds it sent.
    time.sleep(3)
    texts = [r.json()["text"] for r in loopback.requests]
    digests = [t for t in texts if t.startswith("GPU weekly digest")]
    assert len(digests) == 1, texts
    assert "fleetsecret" not in "".join(d.log() for d in fleet.values())


def test_the_advisory_lock_admits_one_and_a_clean_close_hands_it_over(pg_url: str) -> None:
    upgrade_database(pg_url)
    engine_a, engine_b = open_database(pg_url), open_database(pg_url)
    a, b = leadership_for(engine_a, "a"), leadership_for(engine_b, "b")
    try:
        assert a.held() and a.held()  # taken, then kept
        assert not b.held()
        a.close()
        assert b.held() and not a.held()
    finally:
        a.close()
        b.close()
        engine_a.dispose()
        engine_b.dispose()


def test_a_sqlite_daemon_is_always_its_own_leader(tmp_path: Path) -> None:
    engine = open_database(f"sqlite:///{tmp_path / 'gw.db'}")
    try:
        assert isinstance(leadership_for(engine, "solo"), AlwaysLeader)
        assert leadership_for(engine, "solo").held()
    finally:
        engine.dispose()


@dataclass
class BusyGpus:
    """Two half-busy GPUs of one host, as the NVML collector reports them."""

    host: str
    name: str = "nvml"

    def collect(self, now: datetime) -> list[Sample]:
        out = []
        for i in range(2):
            labels = {"host": self.host, "gpu_uuid": f"GPU-{self.host}-{i}", "gpu_index": str(i)}
            for metric, value in (
                ("gpuwatch_gpu_info", 1.0),
                ("gpuwatch_gpu_utilization_ratio", 0.5),
            ):
                out.append(Sample(metric=metric, value=value, labels=labels, ts=now))
        return out


def test_budget_alerts_survive_a_change_of_leader_without_repeating(
    tmp_path: Path,
    pg_url: str,
    loopback: Loopback,  # noqa: F811
) -> None:
    """Two daemons' Apps on one PostgreSQL on a simulated clock, each ticking and rolling up
    every minute; the leader evaluates the budget. The leader stops after the first budget
    notification; the other takes over from the stored states and notifies only what is new."""
    upgrade_database(pg_url)
    loopback.reply(HOOK, Reply(200, "ok"))
    apps = {}
    for host in ("gpu-a", "gpu-b"):
        path = tmp_path / f"{host}.toml"
        path.write_text(
            f'host = "{host}"\n[daemon]\ninterval_seconds = 60\n[budget]\nmonthly_usd = 2\n'
            '[[rates]]\ngpu = "*"\nusd_per_hour = 3.60\n'
            '[notify.slack]\nwebhook_url_env = "HOOK"\n[digest]\nenabled = false\n'
            "[alerts.rules.CollectorDown]\nenabled = false\n"
        )
        env = {"GPUWATCH_DATABASE_URL": pg_url, "HOOK": loopback.url + HOOK}
        apps[host] = App.open(load_config(str(path), env), collectors=[BusyGpus(host)])
    start = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
    try:
        assert apps["gpu-a"].check_leadership(start).value == 1.0
        assert apps["gpu-b"].check_leadership(start).value == 0.0
        live = dict(apps)
        for minute in range(40):
            now = start + timedelta(minutes=minute)
            for app in live.values():
                app.tick(now)
                app.check_leadership(now)
                app.roll_up(now + timedelta(seconds=30))
                app.deliver(now + timedelta(seconds=30))
            if len(loopback.requests) == 1 and "gpu-a" in live:
                live.pop("gpu-a").close()  # the leader goes away; its lock with it
    finally:
        for app in apps.values():
            app.close()
    heads = [r.json()["text"].split("\n")[0] for r in loopback.requests]
    assert heads, "no budget notification at all"
    assert all("BudgetThreshold" in h for h in heads)
    counts = [int(re.search(r"FIRING:(\d+)", h).group(1)) for h in heads]  # type: ignore[union-attr]
    assert counts == sorted(set(counts)) and counts[-1] == 3  # 50, 80, 100 %, none twice
    assert len(counts) >= 2  # the first from gpu-a, the rest from gpu-b after it took over
    assert apps["gpu-b"].leading
