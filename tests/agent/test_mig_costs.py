"""MIG instances priced as what they are: each instance its share of its GPU's slices (or of
its memory, ``[cost] mig_split = "memory"``), busy by its own SM activity (GPM per instance),
its targets on it; instances plus the free remainder add up to the GPU's cost. End to end
through the daemon's App over the fake NVML (see tests/agent/mig_cost_helpers.py)."""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, select

from agent.cli.main import main
from agent.config.settings import ConfigError, load_config
from agent.reporting.build import build_report
from agent.reporting.period import range_period
from agent.reporting.render.dispatch import render
from agent.storage.buckets import HOUR
from agent.storage.db import open_database
from collectors.base import Sample
from migrations.schema import gpu_allocations, gpu_mig_usage, gpu_usage
from tests.agent.mig_cost_helpers import (
    END,
    GPU0,
    GPU1,
    GPU_COST,
    HOST,
    MIG_A,
    MIG_B,
    NOW,
    T0,
    mig_run,
)
from tests.conftest import FakeNvml

NANO = Decimal("0.000000001")


def _ledger(db_url: str) -> tuple[dict[str, Any], dict[str, dict[str, Any]], dict[str, Any]]:
    """Per GPU its usage summed over the hours, per MIG instance of GPU 0 its sums, per target
    its allocated cost."""
    engine = create_engine(db_url)
    try:
        with engine.connect() as conn:
            gpus: dict[str, Any] = {}
            for row in conn.execute(
                select(gpu_usage).where(gpu_usage.c.resolution == HOUR)
            ).mappings():
                g = gpus.setdefault(row["gpu_uuid"], {"cost": Decimal(0), "idle": Decimal(0)})
                g["cost"] += row["cost_usd"]
                g["idle"] += row["idle_cost_usd"]
            migs: dict[str, dict[str, Any]] = {}
            c = gpu_mig_usage.c
            for row in conn.execute(select(gpu_mig_usage).where(c.resolution == HOUR)).mappings():
                assert row["gpu_uuid"] == GPU0
                m = migs.setdefault(
                    row["mig_instance"],
                    {
                        "cost": Decimal(0),
                        "idle": Decimal(0),
                        "seconds": 0.0,
                        "busy": 0.0,
                        "share": 0.0,
                        "sm": 0.0,
                    },
                )
                m["cost"] += row["cost_usd"]
                m["idle"] += row["idle_cost_usd"]
                m["seconds"] += row["seconds"]
                m["busy"] += row["busy_seconds"]
                m["share"] += row["share_seconds"]
                m["sm"] += row["sm_seconds"]
                m["slices"], m["basis"], m["targets"] = row["slices"], row["basis"], row["targets"]
            targets: dict[str, Any] = {}
            a = gpu_allocations.c
            for row in conn.execute(select(gpu_allocations).where(a.resolution == HOUR)).mappings():
                targets[row["target"]] = targets.get(row["target"], Decimal(0)) + row["cost_usd"]
    finally:
        engine.dispose()
    return gpus, migs, targets


def test_each_instance_costs_its_slices_share_and_they_add_up_to_the_gpu(
    db_url: str, fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    with mig_run(db_url, fake_nvml, tmp_path):
        gpus, migs, targets = _ledger(db_url)

    assert set(migs) == {MIG_A, MIG_B, "(free)"}
    a, b, free = migs[MIG_A], migs[MIG_B], migs["(free)"]
    # 3 of 7 slices each: 3/7 of 2 h at 3.60 USD (each minute's part to 12 decimals)
    for m in (a, b):
        assert abs(m["cost"] - GPU_COST * 3 / 7) < NANO
        assert m["slices"] == 3.0 and m["basis"] == "slices"
        assert m["seconds"] == 7200.0 and m["sm"] == 7200.0  # GPM per instance all along
    assert free["slices"] == 1.0 and abs(free["cost"] - GPU_COST / 7) < NANO
    # Busy by each instance's own SM activity: 60 % and 20 %; the free slice idles.
    assert abs(a["idle"] - a["cost"] * Decimal("0.4")) < NANO
    assert abs(b["idle"] - b["cost"] * Decimal("0.8")) < NANO
    assert free["idle"] == free["cost"] and free["busy"] == 0.0
    assert a["busy"] == pytest.approx(7200 * 3 / 7 * 0.6)
    # Instances and the free slice add up to the GPU's cost and idle cost to the digit.
    assert a["cost"] + b["cost"] + free["cost"] == gpus[GPU0]["cost"] == GPU_COST
    assert a["idle"] + b["idle"] + free["idle"] == gpus[GPU0]["idle"]
    # Each target pays the instance it is on, not a share of the GPU's memory.
    assert (a["targets"], b["targets"]) == ("chat", "embed")
    assert targets == {"chat": a["cost"], "embed": b["cost"]}
    # The plain GPU is priced as before: whole, idle by NVML's flag (50 %), no instance rows.
    assert gpus[GPU1] == {"cost": GPU_COST, "idle": GPU_COST / 2}


def test_by_memory_each_instance_costs_its_memory_share(
    db_url: str, fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    with mig_run(db_url, fake_nvml, tmp_path, '[cost]\nmig_split = "memory"\n'):
        gpus, migs, targets = _ledger(db_url)

    a, b, free = migs[MIG_A], migs[MIG_B], migs["(free)"]
    # 40 and 20 GiB of the GPU's 80 GiB: a half and a quarter; a quarter free.
    assert (a["basis"], b["basis"]) == ("memory", "memory")
    assert a["cost"] == GPU_COST / 2 and b["cost"] == GPU_COST / 4 == free["cost"]
    assert a["cost"] + b["cost"] + free["cost"] == gpus[GPU0]["cost"]
    assert a["idle"] + b["idle"] + free["idle"] == gpus[GPU0]["idle"]
    assert targets == {"chat": GPU_COST / 2, "embed": GPU_COST / 4}


def test_every_report_format_shows_the_gpus_instances(
    db_url: str, fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    with mig_run(db_url, fake_nvml, tmp_path) as config:
        engine = open_database(config.database_url)
        try:
            period = range_period(T0.isoformat(), END.isoformat(), "UTC")
            report = build_report(engine, config, period, now=NOW)
        finally:
            engine.dispose()

    doc = json.loads(render(report, "json"))
    lines = doc["mig_instances"]
    assert [(m["gpu_uuid"], m["gpu_index"], m["mig_instance"]) for m in lines] == [
        (GPU0, "0", MIG_A), (GPU0, "0", MIG_B), (GPU0, "0", "(free)"),
    ]  # fmt: skip
    a, b, free = lines
    assert (a["slices"], a["split_basis"], a["targets"], a["activity_basis"]) == (
        3.0, "slices", "chat", "sm_active",
    )  # fmt: skip
    assert (a["share_ratio"], a["busy_ratio"]) == (0.4286, 0.6)  # ratios to 4 digits
    assert (b["targets"], b["busy_ratio"]) == ("embed", 0.2)
    assert (free["slices"], free["activity_basis"], free["targets"]) == (1.0, "free", "")
    (gpu0,) = [g for g in doc["gpus"] if g["gpu_uuid"] == GPU0]
    for key in ("cost_usd", "idle_cost_usd"):
        total = sum(Decimal(m[key]) for m in lines)
        assert abs(total - Decimal(gpu0[key])) <= Decimal("0.02")  # each shown to the cent
    assert sum(report_line.cost_usd for report_line in report.mig_instances) == GPU_COST
    assert sum(m.idle_cost_usd for m in report.mig_instances) == report.gpus[0].idle_cost_usd
    # The plain GPU has no instance lines.
    assert all(m["gpu_uuid"] != GPU1 for m in lines)

    table = render(report, "table")
    assert "MIG INSTANCES" in table and MIG_A[:8] in table
    markdown = render(report, "markdown")
    assert "MIG instances" in markdown and "(free)" in markdown
    assert "MIG instances" in render(report, "html")
    rows = list(csv.reader(io.StringIO(render(report, "csv"))))
    assert ["# mig_instances"] in rows
    assert any(MIG_B in row and "embed" in row for row in rows)


def test_a_mig_split_other_than_slices_or_memory_is_named(tmp_path: Path) -> None:
    path = tmp_path / "gpuwatch.toml"
    path.write_text('[cost]\nmig_split = "equal"\n')
    with pytest.raises(ConfigError) as info:
        load_config(str(path), {})
    assert info.value.problems == ["cost.mig_split: expected 'slices' or 'memory', got 'equal'"]


def test_gpuwatch_gpus_lists_each_mig_gpus_instances(
    db_url: str, fake_nvml: FakeNvml, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    with mig_run(db_url, fake_nvml, tmp_path):
        monkeypatch.setattr("agent.cli.main.utc_now", lambda: NOW)
        config = ["--config", str(tmp_path / "gpuwatch.toml")]
        capsys.readouterr()
        assert main(["gpus", "--window", "2h5m", "--json", *config]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert main(["gpus", "--window", "2h5m", *config]) == 0
        table = capsys.readouterr().out

    assert [(m["mig_instance"], m["cost_usd"]) for m in doc["mig_instances"]] == [
        (MIG_A, "3.09"), (MIG_B, "3.09"), ("(free)", "1.03"),
    ]  # fmt: skip
    lines = table.splitlines()
    (at,) = [i for i, line in enumerate(lines) if MIG_A in line]
    assert "0" in lines[at - 1].split()[:2] and "60 %" in lines[at]  # under GPU 0, 60 % busy


def test_cost_gives_each_target_its_instances_cost_and_idle_time(
    db_url: str, fake_nvml: FakeNvml, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    with mig_run(db_url, fake_nvml, tmp_path):
        monkeypatch.setattr("agent.cli.main.utc_now", lambda: NOW)
        capsys.readouterr()
        config = ["--config", str(tmp_path / "gpuwatch.toml")]
        assert main(["cost", "--window", "2h5m", "--json", *config]) == 0
        doc = json.loads(capsys.readouterr().out)

    targets = {t["name"]: t for t in doc["targets"]}
    # chat's instance was 60 % busy, embed's 20 %: idle 40 % and 80 % of 3/7 of 7.20 USD.
    assert (targets["mig-box/chat"]["cost_usd"], targets["mig-box/chat"]["idle_cost_usd"]) == (
        "3.085714", "1.234286",
    )  # fmt: skip
    assert targets["mig-box/embed"]["idle_cost_usd"] == "2.468571"
    assert targets["mig-box/chat"]["busy_gpu_hours"] == pytest.approx(2 * 3 / 7 * 0.6)
    # Not a GPU shared by memory: each target has its own instance.
    assert doc["shared_gpus"] == []


@dataclass
class DcgmLike:
    """dcgm-exporter's view of the same MIG instances, scripted: SM activity and memory per
    GPU instance id (GPU_I_ID), as collectors/engines/dcgm.py labels them."""

    name: str = "scrape:dcgm"

    def collect(self, now: datetime) -> list[Sample]:
        gpu = {"host": HOST, "gpu_uuid": GPU0, "gpu_index": "0"}
        return [
            Sample(metric=metric, value=value, ts=now, labels=gpu | {"mig_instance": gi})
            for gi in ("1", "2")
            for metric, value in (("gpuwatch_gpu_sm_active_ratio", 0.9),
                                  ("gpuwatch_gpu_memory_total_bytes", 20.0 * 2**30))
        ]  # fmt: skip


def test_dcgm_exporters_instances_beside_nvmls_are_not_priced_twice(
    db_url: str, fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    with mig_run(db_url, fake_nvml, tmp_path, "", DcgmLike()):
        gpus, migs, targets = _ledger(db_url)
    assert set(migs) == {MIG_A, MIG_B, "(free)"}  # not "1" and "2"
    assert abs(migs[MIG_A]["cost"] - GPU_COST * 3 / 7) < NANO
    assert migs[MIG_A]["busy"] == pytest.approx(7200 * 3 / 7 * 0.6)  # NVML's GPM, not DCGM's
