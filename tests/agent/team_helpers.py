"""Shared by the teams-and-projects tests: one box with four GPUs, three serving targets (two
teams, one target unlabelled) and a GPU no target holds, stored and rolled up the daemon's way
at 0.001 USD a second, and the configuration that labels them."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import Engine

from agent.config.settings import Config, load_config
from tests.agent.rollup_helpers import HOST, Box, EngineScrape, GiB, Gpu, rollup

STEP = 20  # seconds between ticks
# target -> (GPU, utilization, model, tokens per tick)
TARGETS = {
    "chat": ("GPU-aaaa", 0.5, "llama", 100.0),
    "embed": ("GPU-bbbb", 0.25, "bge", 40.0),
    "batch": ("GPU-cccc", 1.0, "mistral", 10.0),
}
IDLE_GPU = "GPU-dddd"  # held by no target, never busy

LABELS = """
[[targets]]
name = "chat"
url = "http://127.0.0.1:9/metrics"
team = "search"
project = "assistant"

[[labels]]
target = "embed"
host = "box"
team = "ads"
project = "assistant"

[[rates]]
gpu = "*"
usd_per_hour = 3.60
"""


def fill(db: Engine, start: datetime, ticks: int = 180) -> datetime:
    """``ticks`` rounds every 20 s from ``start`` (the first a baseline), rolled up; the end."""
    # One scripted collector per GPU (a runner keeps collectors by name).
    gpus = [
        Gpu(uuid=uuid, index=str(i), utilization=util, memory={name: 8.0 * GiB}, name=f"nvml{i}")
        for i, (name, (uuid, util, _, _)) in enumerate(TARGETS.items())
    ]
    gpus.append(Gpu(uuid=IDLE_GPU, index="3", utilization=0.0, name="nvml3"))  # fmt: skip
    scrapes = {name: EngineScrape(name) for name in TARGETS}
    box = Box(db, [*gpus, *scrapes.values()])
    job = rollup(db, interval=STEP)
    end = start
    for i in range(ticks):
        end = start + timedelta(seconds=STEP * i)
        for name, (_, _, model, per_tick) in TARGETS.items():
            scrapes[name].tokens = {model: per_tick * i}
        box.tick(end)
        if i % 3 == 0:
            job.run(end)
    end += timedelta(seconds=STEP)
    job.run(end + timedelta(minutes=2))
    return end


def team_config(tmp_path: Path, db_url: str, extra: str = "") -> Config:
    path = tmp_path / "gpuwatch.toml"
    path.write_text(f'host = "{HOST}"\ndatabase_url = "{db_url}"\n{LABELS}\n{extra}')
    return load_config(str(path), {})
