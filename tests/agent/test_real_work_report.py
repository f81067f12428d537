"""Real work end to end, through the daemon's own path: the fake NVML's GPM and energy counter,
the vLLM simulator's FLOPs estimates, App.tick and the minute job, then the report, `cost` and
the digest as users read them.

GPU 0 looks saturated by NVML's flag (100 %) while a quarter of its SMs work; GPU 1 has no GPM
(SM activity unknown, its busy time the flag's) and no energy counter (energy integrated from
its power). Every figure is checked against the arithmetic done here from what was served.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent.config.settings import load_config
from agent.daemon.app import App
from agent.reporting.build import build_report
from agent.reporting.period import range_period
from agent.reporting.render.dispatch import render
from agent.sim.server import EngineServer
from agent.sim.traffic import Traffic
from agent.storage.db import upgrade_database
from tests.conftest import FakeNvml
from tests.fakenvml.build import FakeGpm, FakeGpu, FakeNvmlConfig

BUSY = "GPU-aaaaaaaa-1111-2222-3333-444444444444"  # H100: flag 100 %, SM active 25 %
PLAIN = "GPU-bbbbbbbb-1111-2222-3333-444444444444"  # no GPM, no energy counter
MODEL = "llama-8b"
START = datetime(2026, 11, 30, 16, 0, 0, tzinfo=UTC)
STEP = timedelta(seconds=10)
TICKS = 31  # five minutes metered
WATTS = 700  # GPU 0's energy counter moves by this x 10 s a tick
PLAIN_WATTS = 200
H100_BF16 = 989.5e12  # agent.cost.gpu_peaks, dense
FLOPS = re.compile(r"^vllm:estimated_flops_per_gpu_total\{[^}]*\} (\S+)$", re.M)


def hardware(tick: int) -> FakeNvmlConfig:
    energy_mj = 1_000_000_000 + tick * WATTS * 10 * 1000
    return FakeNvmlConfig(
        gpus=(
            FakeGpu(uuid=BUSY, util=100, energy_mj=energy_mj, power_mw=WATTS * 1000,
                    gpm=FakeGpm(sm_active=25, tensor=10, dram=40)),
            FakeGpu(uuid=PLAIN, name="NVIDIA L4", util=30, energy_mj=None,
                    power_mw=PLAIN_WATTS * 1000),
        )
    )  # fmt: skip


ENERGY = "[energy]\npue = 1.5\ngrams_co2_per_kwh = 400\nusd_per_kwh = 0.2\n"


@pytest.fixture
def energy_toml() -> str:
    return ENERGY


@pytest.fixture
def box(
    db_url: str, tmp_path: Path, fake_nvml: FakeNvml, energy_toml: str
) -> Iterator[tuple[App, Traffic, str, Path]]:
    fake_nvml.write(hardware(0))
    traffic = Traffic(models=(MODEL,))
    with EngineServer("vllm-0.33", traffic) as server:
        path = tmp_path / "gpuwatch.toml"
        path.write_text(
            f'host = "box"\ndatabase_url = "{db_url}"\n[daemon]\ninterval_seconds = 10\n'
            '[[rates]]\ngpu = "*"\nusd_per_hour = 3.6\n'
            f'[[targets]]\nname = "t1"\nurl = "{server.url}"\ngpus = [0]\n'
            "[cost]\nmfu_target = 0.5\n" + energy_toml
        )
        upgrade_database(db_url)
        app = App.open(load_config(str(path), {}))
        try:
            yield app, traffic, server.url, path
        finally:
            app.close()


def run(app: App, traffic: Traffic, url: str, fake_nvml: FakeNvml) -> tuple[float, float]:
    """The ticks, each after some traffic; vLLM's FLOPs counter at the first and last tick."""
    flops: list[float] = []
    for i in range(TICKS):
        if i:
            traffic.serve(2 + i % 3)
        fake_nvml.write(hardware(i))
        now = START + i * STEP
        app.tick(now)
        app.roll_up(now)
        flops.append(float(FLOPS.search(httpx.get(url).text).group(1)))  # type: ignore[union-attr]
    return flops[0], flops[-1]


def report_json(app: App) -> dict[str, Any]:
    end = START + (TICKS - 1) * STEP
    period = range_period(START.isoformat(), (end + timedelta(seconds=1)).isoformat(), "UTC")
    got: dict[str, Any] = json.loads(render(build_report(app.engine, app.config, period, now=end),
                                            "json"))  # fmt: skip
    return got


def by_uuid(document: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {g["gpu_uuid"]: g for g in document["gpus"]}


def test_a_saturated_looking_gpu_is_a_quarter_busy_by_its_sms(
    box: tuple[App, Traffic, str, Path], fake_nvml: FakeNvml
) -> None:
    app, traffic, url, _ = box
    run(app, traffic, url, fake_nvml)
    document = report_json(app)
    busy, plain = by_uuid(document)[BUSY], by_uuid(document)[PLAIN]
    hours = (TICKS - 1) * 10 / 3600
    assert busy["observed_hours"] == pytest.approx(hours, abs=0.01)
    assert busy["utilization_ratio"] == 1.0 and busy["idle_cost_usd"] == "0.00"
    assert busy["activity_basis"] == "sm_active"
    assert busy["sm_active_ratio"] == 0.25
    assert busy["sm_active_hours"] == pytest.approx(hours / 4, abs=0.01)
    assert busy["sm_idle_cost_usd"] == "0.23"  # 300 s x $0.001 x 0.75 = $0.225
    # No GPM: SM activity unknown, never the flag's 30 % standing in for it.
    assert plain["activity_basis"] == "utilization_flag"
    assert plain["sm_active_hours"] is None and plain["sm_active_ratio"] is None
    assert plain["sm_idle_cost_usd"] is None
    totals = document["totals"]
    assert totals["sm_active_gpu_hours"] == pytest.approx(hours / 4, abs=0.01)
    assert totals["sm_observed_gpu_hours"] == pytest.approx(hours, abs=0.01)
    assert totals["flag_idle_cost_usd_over_sm_hours"] == "0.00"


def test_energy_co2_and_mfu_per_model_match_the_counters(
    box: tuple[App, Traffic, str, Path], fake_nvml: FakeNvml
) -> None:
    app, traffic, url, _ = box
    first, last = run(app, traffic, url, fake_nvml)
    document = report_json(app)
    busy, plain = by_uuid(document)[BUSY], by_uuid(document)[PLAIN]
    joules = (TICKS - 1) * WATTS * 10  # the energy counter's increase
    assert busy["energy_kwh"] == pytest.approx(joules / 3.6e6, abs=1e-3)
    assert busy["energy_basis"] == "energy_counter"
    assert plain["energy_basis"] == "power_integrated"
    assert plain["energy_kwh"] == pytest.approx((TICKS - 1) * PLAIN_WATTS * 10 / 3.6e6, abs=1e-3)
    (model,) = document["models"]
    useful = model["useful_tokens"]
    assert useful > 0
    # The model alone holds GPU 0: all its energy, per useful token; CO2 at PUE 1.5, 400 g/kWh.
    assert model["joules_per_useful_token"] == pytest.approx(joules / useful, abs=1e-3)
    grams = joules * 1.5 / 3.6e6 * 400
    assert model["co2_grams_per_million_tokens"] == pytest.approx(grams / useful * 1e6, rel=1e-6)
    totals = document["totals"]
    assert totals["co2_grams"] == pytest.approx(
        grams + (TICKS - 1) * PLAIN_WATTS * 10 * 1.5 / 3.6e6 * 400, abs=1e-3
    )
    # MFU: vLLM's per-GPU FLOPs over the GPU's observed time at the H100's dense BF16 peak.
    mfu = (last - first) / ((TICKS - 1) * 10 * H100_BF16)
    assert model["mfu_ratio"] == pytest.approx(mfu, abs=1e-4)
    assert "NVIDIA H100 80GB HBM3" in model["efficiency_basis"]
    cost = Decimal(model["cost_usd"])
    gap = cost * (1 - Decimal(repr(mfu)) / Decimal("0.5"))
    assert Decimal(model["mfu_gap_usd"]) == pytest.approx(gap, abs=Decimal("0.01"))


def test_cost_shows_sm_activity_energy_and_co2_per_token(
    box: tuple[App, Traffic, str, Path], fake_nvml: FakeNvml, capsys: pytest.CaptureFixture[str]
) -> None:
    app, traffic, url, path = box
    run(app, traffic, url, fake_nvml)
    from agent.cli.main import main  # the command as users run it, in this process

    assert main(["cost", "--window", "30d", "--json", "--config", str(path)]) == 0
    document = json.loads(capsys.readouterr().out)
    report = report_json(app)["totals"]
    for key in ("sm_active_gpu_hours", "sm_idle_cost_usd", "energy_kwh", "co2_grams",
                "joules_per_useful_token", "co2_grams_per_million_tokens"):  # fmt: skip
        assert document[key] == report[key], key
    (model,) = document["models"]
    assert model["joules_per_useful_token"] > 0
    assert main(["cost", "--window", "30d", "--config", str(path)]) == 0
    table = capsys.readouterr().out
    assert "SM activity" in table and "g CO2 per M" in table


@pytest.mark.parametrize("energy_toml", ["[energy]\npue = 1.2\n"])
def test_without_an_intensity_co2_is_unknown_not_zero(
    box: tuple[App, Traffic, str, Path], fake_nvml: FakeNvml
) -> None:
    app, traffic, url, _ = box
    run(app, traffic, url, fake_nvml)
    totals = report_json(app)["totals"]
    assert totals["energy_kwh"] > 0
    assert totals["co2_grams"] is None and totals["co2_grams_per_million_tokens"] is None
    assert totals["energy_cost_usd"] is None  # no usd_per_kwh: unknown, not $0


def test_the_digest_says_real_work_and_energy_per_token(
    box: tuple[App, Traffic, str, Path], fake_nvml: FakeNvml
) -> None:
    from agent.reporting.digest import block_kit_problems, digest_payload

    app, traffic, url, _ = box
    run(app, traffic, url, fake_nvml)
    end = START + (TICKS - 1) * STEP
    period = range_period(START.isoformat(), (end + timedelta(seconds=1)).isoformat(), "UTC")
    report = build_report(app.engine, app.config, period, now=end)
    payload = digest_payload(report, None)
    assert block_kit_problems(payload) == []
    fields = [f["text"] for f in payload["blocks"][2]["fields"]]
    work = next(f for f in fields if f.startswith("*Real work"))
    assert "25.0% SM-active over 0.1 profiled GPU-hours" in work
    energy = next(f for f in fields if f.startswith("*Energy*"))
    per_token = report.totals.energy.joules_per_useful_token  # both GPUs over all tokens
    assert per_token is not None and f"{per_token:,.2f} J per useful token" in energy
    assert "g CO2 per 1M tokens" in energy
    (line,) = next(
        b["text"]["text"].splitlines()[1:]
        for b in payload["blocks"]
        if b.get("text", {}).get("text", "").startswith("*Real work and energy by model")
    )
    assert line.startswith(f"*{MODEL}*: MFU ") and "J/token" in line
