"""Advice from observed time, on SQLite and PostgreSQL: 12 minutes of one H100 at $2.72/h.

The daemon's own path runs: the engine simulator serves /metrics, the fake NVML answers for one
GPU, App.tick stores a round every 10 s at an injected instant and the minute job runs after
each, as the daemon runs them. Then the report (month to date, the month begun days before the
box was installed), `gpuwatch breakeven` over 1 h and over 30 d, and the month-end forecast.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from agent.cli.main import main
from agent.config.settings import load_config
from agent.cost.billing import save_records
from agent.daemon.app import App
from agent.reporting.build import build_report
from agent.reporting.digest import digest_payload
from agent.reporting.model import Report
from agent.reporting.period import month_period
from agent.reporting.render.dispatch import render
from agent.sim.server import EngineServer
from agent.sim.traffic import Traffic
from agent.storage.db import upgrade_database
from collectors.billing.base import CostKind, CostRecord
from tests.conftest import FakeNvml
from tests.fakenvml.build import FakeGpu, FakeNvmlConfig, FakeProcess, GiB

GPU = "GPU-11111111-2222-3333-4444-555555555555"
MODEL = "llama-8b"
START = datetime(2026, 11, 4, 9, 0, tzinfo=UTC)  # the box is installed on the 4th
STEP = timedelta(seconds=10)
RATE = Decimal("2.72")


@dataclass
class Box:
    app: App
    traffic: Traffic
    config_path: Path
    requests: int = 0

    def run(self, minutes: int, first: datetime = START) -> datetime:
        """Ticks every 10 s for ``minutes`` from ``first``, the minute job after each; the last
        tick's instant."""
        now = first
        for i in range(minutes * 6 + 1):
            now = first + i * STEP
            if i:
                self.requests += len(self.traffic.serve(1 + i % 3))
            self.app.tick(now)
            self.app.roll_up(now)
        return now


@contextmanager
def opened_box(db_url: str, folder: Path, fake_nvml: FakeNvml) -> Iterator[Box]:
    # One engine process on the GPU: the host's only target is its user (agent.cost.allocation).
    processes = (FakeProcess(gpu=0, pid=100, mem=10 * GiB),)
    fake_nvml.write(FakeNvmlConfig(gpus=(FakeGpu(uuid=GPU, util=60),), processes=processes))
    traffic = Traffic(models=(MODEL,))
    with EngineServer("vllm-0.33", traffic) as server:
        path = folder / "gpuwatch.toml"
        path.write_text(
            f'host = "box"\ndatabase_url = "{db_url}"\ntimezone = "Europe/Madrid"\n'
            f"[daemon]\ninterval_seconds = 10\n"
            f'[[rates]]\ngpu = "{GPU}"\nusd_per_hour = {RATE}\n'
            f'[[targets]]\nname = "t1"\nurl = "{server.url}"\n'
            "[budget]\nmonthly_usd = 5000\n"
        )
        upgrade_database(db_url)
        app = App.open(load_config(str(path), {}))
        try:
            yield Box(app, traffic, path)
        finally:
            app.close()


@pytest.fixture
def box(db_url: str, tmp_path: Path, fake_nvml: FakeNvml) -> Iterator[Box]:
    with opened_box(db_url, tmp_path, fake_nvml) as opened:
        yield opened


@pytest.fixture(scope="module")
def twelve_minutes(
    module_db_url: str, tmp_path_factory: pytest.TempPathFactory, module_fake_nvml: FakeNvml
) -> Iterator[tuple[Box, datetime]]:
    """The box after 12 minutes from START, and its last tick's instant: built once per
    database for the tests that only read it (each run is seconds of ticks)."""
    folder = tmp_path_factory.mktemp("box")
    with opened_box(module_db_url, folder, module_fake_nvml) as opened:
        yield opened, opened.run(12)


def month_report(box: Box, now: datetime) -> Report:
    period = month_period(None, now, box.app.config.timezone)
    return build_report(box.app.engine, box.app.config, period, now=now)


def breakeven(
    box: Box, window: str, now: datetime, capsys: pytest.CaptureFixture[str], mp: pytest.MonkeyPatch
) -> dict[str, object]:
    """`gpuwatch breakeven --json` as users run it, in this process, its clock at ``now``."""
    mp.setattr("agent.cli.main.utc_now", lambda: now)
    # Serverless at $5/h: a pod at 70 % ($3.89 a busy hour) pays off at some load.
    argv = ["breakeven", "--json", "--window", window, "--pod-usd-per-hour", "2.72"]
    argv += ["--serverless-usd-per-hour", "5"]
    assert main([*argv, "--config", str(box.config_path)]) == 0
    payload: dict[str, object] = json.loads(capsys.readouterr().out)
    return payload


def test_twelve_minutes_give_advice_measured_over_0_2_h_and_no_saving(
    twelve_minutes: tuple[Box, datetime],
) -> None:
    box, end = twelve_minutes
    report = month_report(box, end)

    advice = [r for r in report.recommendations if r.title.startswith(MODEL)]
    assert advice, report.recommendations
    for r in report.recommendations:
        assert "measured over 0.2 h" in r.detail.lower(), r.detail
        assert r.saving_usd_per_month is None
        assert "a month" not in r.detail and "/day" not in r.detail
        assert "min_observed" in r.detail  # the reason, and the setting to change
    # What the 12 minutes cost, not a day's worth: the pod is the GPU's $2.72/h, not $0.02/h.
    (model,) = advice
    assert "$2.72/h" in model.detail
    assert "the pod (what the model's GPUs cost, $2.72/h) cost $0.54" in model.detail
    # Every format says it; the digest too, and with no monthly saving.
    for fmt in ("table", "markdown", "html", "csv", "json"):
        assert "0.2 h" in render(report, fmt), fmt
    payload = json.dumps(digest_payload(report, None))
    assert "0.2 h" in payload and "Saves about" not in payload


def test_enough_observed_time_gives_per_day_figures_from_that_time(
    twelve_minutes: tuple[Box, datetime],
) -> None:
    box, end = twelve_minutes
    config = replace(box.app.config, cost=replace(box.app.config.cost, min_observed=6 * 60.0))
    period = month_period(None, end, config.timezone)
    report = build_report(box.app.engine, config, period, now=end)
    (model,) = [r for r in report.recommendations if r.title.startswith(MODEL)]
    # One GPU at $2.72/h is $65.28 a day of observed time, whatever the month's calendar.
    assert "pod $65.28/day" in model.detail or "pod: $65.28/day" in model.detail, model.detail
    assert "measured over 0.2 h" in model.detail.lower()
    if model.kind != "pod":
        assert model.saving_usd_per_month is not None
        assert model.saving_usd_per_month <= RATE * 730  # never more than the GPU costs


def test_the_same_data_give_the_same_crossover_over_1h_and_30d(
    twelve_minutes: tuple[Box, datetime],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    box, end = twelve_minutes
    now = end + timedelta(seconds=30)  # asked right after: 1 h and 30 d both hold every tick
    hour = breakeven(box, "1h", now, capsys, monkeypatch)
    month = breakeven(box, "30d", now, capsys, monkeypatch)
    assert isinstance(hour["crossover_requests_per_day"], int)
    assert hour["crossover_requests_per_day"] == month["crossover_requests_per_day"]
    assert hour["one_pod_crossover_requests_per_day"] == month["one_pod_crossover_requests_per_day"]
    assert hour["gpu_seconds_per_request"] == month["gpu_seconds_per_request"]
    assert hour["measured_hours"] == month["measured_hours"] == 0.2
    assert hour["withheld"] is not None and "0.2 h" in str(hour["withheld"])
    assert hour["pod_usd_per_day"] is None and hour["pods"] is None
    assert str(hour["source"]).startswith("measured over 0.2 h in the last 1h")


def test_the_forecast_is_the_observed_pace_from_the_first_minutes(box: Box) -> None:
    """Started inside a minute (09:00:47), the first minute holds 13 s of metering: counted as
    a whole minute it made $376 at 3 minutes and $1,463 at 6 against about $1,735."""
    first = START + timedelta(seconds=47)
    month_end = datetime(2026, 11, 30, 23, tzinfo=UTC)  # December in Madrid
    end = box.run(3, first)
    for minutes in (3, 6, 12):
        budget = month_report(box, end).budget
        left = Decimal(repr((month_end - end).total_seconds() / 3600))
        metered = RATE * Decimal(repr((end - first).total_seconds() / 3600))
        truth = metered + RATE * left
        assert abs(budget.forecast_usd - truth) < truth * Decimal("0.001"), (minutes, budget)
        assert budget.forecast_basis.startswith("at $2.72/h observed over the last 0."), budget
        end = box.run(minutes, end + STEP) if minutes < 12 else end


def test_the_summary_says_which_spend_is_billed_and_which_metered(box: Box) -> None:
    end = box.run(6)
    note = " ".join(render(month_report(box, end), "table").split())
    assert "spend: metered, no billing records; $/M: metered cost / useful tokens (output)" in note
    # A provider's bill larger than what was metered (storage, egress...): spend is the bill.
    bill = CostRecord(
        "focus", "row-1", "pod-1", START, START + timedelta(hours=1), Decimal("5.44"), "USD",
        CostKind.BILLED,
    )  # fmt: skip
    with box.app.engine.begin() as conn:
        save_records(conn, [bill], end)
    report = month_report(box, end)
    assert (report.totals.spend_usd, report.totals.billed_usd) == (Decimal("5.44"),) * 2
    for fmt in ("table", "markdown", "html"):
        text = " ".join(render(report, fmt).replace("\\", "").split())  # markdown escapes
        assert "spend: billed $5.44, metered $0.27; $/M: metered cost / useful tokens" in text, fmt
    payload = json.dumps(digest_payload(report, None))
    assert "*Spend (billed)*" in payload and "*Per 1M useful tokens (metered)*" in payload


def test_cost_without_billing_says_so_in_the_configured_zone(
    box: Box, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    end = box.run(6)
    monkeypatch.setattr("agent.cli.main.utc_now", lambda: end)
    assert main(["cost", "--window", "1h", "--config", str(box.config_path)]) == 0
    out = capsys.readouterr().out
    # 09:06 UTC is 10:06 in Madrid.
    assert "(2026-11-04 09:06 to 2026-11-04 10:06 Europe/Madrid)" in out.splitlines()[0]
    assert "billed     no billing records for this window (metered $0.27" in out
    assert "-100" not in out
    assert main(["cost", "--window", "1h", "--json", "--config", str(box.config_path)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["period"]["end"] == "2026-11-04T10:06:00+01:00"
    assert (doc["reconciliation"]["billed_usd"], doc["reconciliation"]["difference_usd"]) == (
        None,
        None,
    )
