"""A GPU shared by two targets is split by their processes' SM utilization where NVML gives it,
and by their memory share where the driver does not, and the cost summary, `gpuwatch cost` and
the report say which rule split each shared GPU.

Real parts: pynvml over the fake libnvidia-ml (per-process utilization on GPU 0, not supported
on GPU 1), the daemon's tick and allocation, the rollup metering the ledger, SQLite and
PostgreSQL, and the readers of the cost summary and the report, at an injected clock.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from agent.cli.main import main
from agent.config.settings import load_config
from agent.cost.summarize import summarize
from agent.daemon.app import App
from agent.reporting.build import build_report
from agent.reporting.period import range_period
from agent.reporting.render.dispatch import render
from agent.storage.db import upgrade_database
from collectors.nvml import NvmlCollector
from tests.conftest import FakeNvml
from tests.fakenvml.build import FakeGpu, FakeNvmlConfig, FakeProcess, GiB

T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
END = T0 + timedelta(hours=2)
STEP = timedelta(minutes=10)
GPU0 = "GPU-00000000-0000-0000-0000-00000000aaaa"
GPU1 = "GPU-00000000-0000-0000-0000-00000000bbbb"
GPU_COST = Decimal("7.20")  # 2 h at 3.60 USD an hour, each GPU
UNITS = {100: "a", 200: "b", 300: "c", 400: "d"}  # pid -> target (its systemd unit <name>.service)


def hardware(*, gpu0_util: bool = True) -> FakeNvmlConfig:
    """GPU 0: a at 70 % SM and b at 10 %, holding memory 3:1; GPU 1: c and d, memory 3:1, on a
    driver without per-process utilization."""
    return FakeNvmlConfig(
        gpus=(FakeGpu(uuid=GPU0, util=80), FakeGpu(uuid=GPU1, util=80)),
        processes=(
            FakeProcess(gpu=0, pid=100, mem=30 * GiB, smutil=70 if gpu0_util else None),
            FakeProcess(gpu=0, pid=200, mem=10 * GiB, smutil=10 if gpu0_util else None),
            FakeProcess(gpu=1, pid=300, mem=30 * GiB),
            FakeProcess(gpu=1, pid=400, mem=10 * GiB),
        ),
    )


@pytest.fixture
def box(db_url: str, tmp_path: Path, fake_nvml: FakeNvml) -> Iterator[App]:
    root = tmp_path / "proc"
    for pid, name in UNITS.items():
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "cgroup").write_text(f"0::/system.slice/{name}.service\n")
    targets = "".join(
        f'[[targets]]\nname = "{n}"\nurl = "http://127.0.0.1:{9000 + i}"\nunit = "{n}.service"\n'
        for i, n in enumerate(UNITS.values())
    )
    path = tmp_path / "gpuwatch.toml"
    path.write_text(
        f'host = "box"\ndatabase_url = "{db_url}"\n[daemon]\ninterval_seconds = 600\n'
        f'[[rates]]\ngpu = "*"\nusd_per_hour = 3.60\n' + targets
    )
    upgrade_database(db_url)
    app = App.open(load_config(str(path), {}), [NvmlCollector(host="box", proc_root=root)])
    yield app
    app.close()


def run(app: App, fake_nvml: FakeNvml, hardware_at: dict[int, FakeNvmlConfig]) -> None:
    """Ticks every 10 minutes over (T0, END], the hardware changing at the tick numbers given."""
    tick, now = 0, T0
    while now <= END:
        if tick in hardware_at:
            fake_nvml.write(hardware_at[tick])
        app.tick(now)
        tick, now = tick + 1, now + STEP
    app.roll_up(END + timedelta(minutes=5))


def costs(app: App) -> dict[str, Decimal]:
    # No engine scraped: each target's cost is carried under its own name.
    return {m.name: m.cost_usd for m in summarize(app.engine, T0, END).models}


def test_a_shared_gpu_is_split_by_sm_utilization_and_one_without_it_by_memory(
    box: App,
    fake_nvml: FakeNvml,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    run(box, fake_nvml, {0: hardware()})

    got = costs(box)
    # GPU 0 by SM utilization, 7:1 (its memory share would be 3:1); GPU 1 by memory, 3:1.
    want = {"a": GPU_COST * 7 / 8, "b": GPU_COST / 8,
            "c": GPU_COST * 3 / 4, "d": GPU_COST / 4}  # fmt: skip
    assert got.keys() == want.keys()
    for name, usd in want.items():
        assert abs(got[name] - usd) < Decimal("0.000001"), (name, got[name], usd)

    summary = summarize(box.engine, T0, END)
    bases = {g.gpu_index: g.shared.basis for g in summary.gpus if g.shared is not None}
    assert bases == {"0": "sm_utilization", "1": "memory"}

    # `gpuwatch cost`, as users run it, at the clock of the run.
    monkeypatch.setattr("agent.cli.main.utc_now", lambda: END + timedelta(minutes=5))
    config = str(tmp_path / "gpuwatch.toml")
    assert main(["cost", "--window", "3h", "--config", config]) == 0
    table = capsys.readouterr().out
    assert (
        "shared GPUs: box GPU 0 split by SM utilization; box GPU 1 split by memory share "
        "(NVML gave no per-process utilization)"
    ) in table
    assert main(["cost", "--window", "3h", "--json", "--config", config]) == 0
    shared = json.loads(capsys.readouterr().out)["shared_gpus"]
    assert [(g["gpu_index"], g["split_basis"]) for g in shared] == [
        ("0", "sm_utilization"), ("1", "memory")]  # fmt: skip

    # The report: each GPU row names its rule (JSON), and the GPU section's note says it.
    period = range_period(T0.isoformat(), END.isoformat(), "UTC")
    report = build_report(box.engine, box.config, period, now=END + timedelta(minutes=5))
    rows = json.loads(render(report, "json"))["gpus"]
    assert {r["gpu_index"]: r["shared_split"] for r in rows} == {
        "0": "sm_utilization", "1": "memory"}  # fmt: skip
    text = " ".join(render(report, "table").split())  # the note wraps
    assert "GPU 0 on box split by SM utilization" in text
    assert "GPU 1 on box split by memory share (NVML gave no per-process utilization)" in text


def test_when_the_driver_stops_giving_it_the_split_falls_back_to_memory_and_says_how_long(
    box: App, fake_nvml: FakeNvml
) -> None:
    # The first hour (the intervals ticks 1-6 close) with per-process utilization on GPU 0,
    # the second (ticks 7-12) without.
    run(box, fake_nvml, {0: hardware(), 7: hardware(gpu0_util=False)})

    got = costs(box)
    hour = GPU_COST / 2
    assert abs(got["a"] - (hour * 7 / 8 + hour * 3 / 4)) < Decimal("0.000001")
    assert abs(got["b"] - (hour / 8 + hour / 4)) < Decimal("0.000001")
    (gpu0,) = [g for g in summarize(box.engine, T0, END).gpus if g.gpu_index == "0"]
    assert gpu0.shared is not None and gpu0.shared.basis == "sm_utilization+memory"
    # The window (T0, END] holds ticks 1-12: 6 split by utilization, 6 by memory.
    said = gpu0.shared.describe()
    assert said == "split by SM utilization 50% of the time, else by memory share"
