"""The fleet's side of a daemon: the ``[fleet]`` section, the forward in the minute job, and the
fleet-wide cost signals computed once by the leader and read by every host."""

from __future__ import annotations

import socket
from dataclasses import replace
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import Engine

from agent.config.settings import BudgetConfig, Config, ConfigError, load_config
from agent.cost import fleet_signals
from agent.cost.signals import host_samples
from agent.daemon.app import App
from agent.daemon.leader import AdvisoryLockLeader, AlwaysLeader
from agent.storage.db import open_database, upgrade_database
from tests.agent import fleet_helpers as F

PER_M = "gpuwatch_cost_per_million_tokens_usd"


def write(tmp_path: Path, body: str) -> str:
    path = tmp_path / "gpuwatch.toml"
    path.write_text(f'host = "a"\ndatabase_url = "sqlite:///{tmp_path}/a.db"\n{body}')
    return str(path)


# -- [fleet] ---------------------------------------------------------------------------------------


def test_the_central_url_comes_from_the_environment_or_a_file(tmp_path: Path) -> None:
    url = "postgresql+psycopg://gw:hunter2@central/gw"
    config = load_config(write(tmp_path, '[fleet]\ncentral_url_env = "CENTRAL"\ntimeout = "5s"\n'),
                         {"CENTRAL": url})  # fmt: skip
    assert config.fleet.central_url is not None and config.fleet.central_url.reveal() == url
    assert config.fleet.timeout_seconds == 5 and "hunter2" not in repr(config)
    (tmp_path / "central").write_text(url + "\n")
    from_file = load_config(
        write(tmp_path, f'[fleet]\ncentral_url_file = "{tmp_path}/central"\n'), {}
    )
    assert from_file.fleet.central_url == config.fleet.central_url
    assert not load_config(write(tmp_path, ""), {}).fleet.forwarding


def test_every_fleet_problem_is_listed_with_its_key_and_no_secret(tmp_path: Path) -> None:
    body = '[fleet]\ncentral_url = "postgresql://gw:hunter2@x/gw"\ncentral_url_env = "C"\n'
    with pytest.raises(ConfigError) as caught:
        load_config(write(tmp_path, body + 'timeout = "soon"\n'), {"C": "mysql://gw:hunter2@x/gw"})
    problems = "\n".join(caught.value.problems)
    assert "fleet.central_url: unknown key" in problems  # a URL never goes in the TOML itself
    assert "fleet.central_url: expected a postgresql+psycopg:// URL" in problems
    assert "fleet.timeout" in problems
    assert "hunter2" not in str(caught.value)


# -- the minute job --------------------------------------------------------------------------------


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def fleet_config(tmp_path: Path, central: str) -> Config:
    path = write(tmp_path, '[fleet]\ncentral_url_env = "CENTRAL"\ntimeout = "2s"\n'
                           "[budget]\nmonthly_usd = 1000\n")  # fmt: skip
    return load_config(path, {"CENTRAL": central})


def test_a_central_database_that_is_away_stops_nothing(tmp_path: Path) -> None:
    config = fleet_config(tmp_path, f"postgresql+psycopg://gw@127.0.0.1:{closed_port()}/gw")
    app = App.open(config, [])  # the daemon starts: nothing connects to the central database
    try:
        assert isinstance(app.leader, AdvisoryLockLeader)  # the fleet's lock is the central one
        assert app.check_leadership(F.START).value == 0.0
        exposed = {s.metric: s for s in app.roll_up(F.START)}
        assert exposed["gpuwatch_fleet_forward_success"].value == 0.0
        assert "gpuwatch_spend_usd_total" in exposed  # the host's own figures still come
    finally:
        app.close()


def test_the_minute_job_forwards_and_the_leader_publishes(tmp_path: Path, pg_url: str) -> None:
    upgrade_database(pg_url)
    config = fleet_config(tmp_path, pg_url)
    app = App.open(config, [])
    try:
        F.fill(app.engine, ("a",))
        assert app.check_leadership(F.AFTER).value == 1.0
        exposed = app.roll_up(F.AFTER)
    finally:
        app.close()
    by = {(s.metric, s.labels.get("scope")): s for s in exposed}
    assert by[("gpuwatch_fleet_forward_success", None)].value == 1.0
    assert by[("gpuwatch_budget_used_ratio", "fleet")].labels["host"] == "a"
    # The central database now answers for host a: its report is the box's.

    center, local = open_database(pg_url), open_database(config.database_url)
    try:
        assert F.own(center, "a") == F.own(local, "a")
    finally:
        center.dispose()
        local.dispose()


# -- fleet-wide cost signals -----------------------------------------------------------------------


@pytest.fixture
def two_hosts(db: Engine) -> Engine:
    F.fill(db, F.HOSTS)
    return db


def config_of(host: str) -> Config:
    return Config(host=host, database_url="", timezone=F.M.ZONE,
                  budget=BudgetConfig(Decimal(1000)))  # fmt: skip


def test_each_host_computes_its_own_figures_only(two_hosts: Engine) -> None:
    mine = host_samples(two_hosts, config_of("a"), F.AFTER)
    models = {s.labels["model"] for s in mine if s.metric == PER_M}
    assert models == {"llama-8b"}  # host b's models are b's, and the fleet's
    assert {s.labels["host"] for s in mine} == {"a"}
    assert {s.labels["scope"] for s in mine if s.metric == PER_M} == {"host"}


def test_the_leader_computes_the_fleet_figures_once_and_every_host_reads_them(
    two_hosts: Engine,
) -> None:
    assert fleet_signals.publish(two_hosts, config_of("a"), F.AFTER) > 0
    read_by_b = fleet_signals.read(two_hosts, "b", F.AFTER + timedelta(minutes=1))
    models = {s.labels["model"] for s in read_by_b if s.metric == PER_M}
    assert models == {"llama-8b", "qwen-7b", "mistral-7b"}
    assert {(s.labels["host"], s.labels["scope"]) for s in read_by_b} == {("b", "fleet")}
    assert any(s.metric == "gpuwatch_budget_used_ratio" for s in read_by_b)
    # No leader for a while: the figures go, rather than stand as current.
    assert fleet_signals.read(two_hosts, "b", F.AFTER + timedelta(minutes=11)) == []


def test_a_lone_box_leads_itself_and_shows_both_scopes(tmp_path: Path) -> None:
    app = App.open(replace(load_config(write(tmp_path, ""), {}), timezone=F.M.ZONE), [])
    try:
        assert isinstance(app.leader, AlwaysLeader)
        F.fill(app.engine, ("a",))
        app.check_leadership(F.AFTER)
        exposed = app.roll_up(F.AFTER)
    finally:
        app.close()
    scopes = {s.labels["scope"] for s in exposed if s.metric == PER_M}
    assert scopes == {"host", "fleet"}
