"""Shared by the MIG cost tests: a host whose GPU 0 runs MIG with two 3g instances (3 of its 7
slices each, one slice free), the target "chat" on the first (GPM: 60 % of its SMs active) and
"embed" on the second (20 %), and whose GPU 1 is a plain GPU 50 % busy that nobody holds; run
by the daemon's App for two hours at 3.60 USD an hour per GPU and rolled up.

Real parts: pynvml over the fake libnvidia-ml (MIG instances with their slices, GPM per
instance read through the parent), the targets' processes found by their systemd units under a
fake /proc, the App's tick, allocation and rollup on SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from agent.config.settings import Config, load_config
from agent.daemon.app import App
from agent.storage.db import upgrade_database
from collectors.nvml import NvmlCollector
from tests.conftest import FakeNvml
from tests.fakenvml.build import FakeGpm, FakeGpu, FakeMig, FakeNvmlConfig, FakeProcess, GiB

HOST = "mig-box"
T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
END = T0 + timedelta(hours=2)
STEP = timedelta(minutes=10)
NOW = END + timedelta(minutes=5)
GPU0 = "GPU-00000000-0000-0000-0000-00000000aaaa"
GPU1 = "GPU-00000000-0000-0000-0000-00000000bbbb"
MIG_A = "MIG-aaaaaaaa-0000-0000-0000-000000000001"
MIG_B = "MIG-bbbbbbbb-0000-0000-0000-000000000002"
GPU_COST = Decimal("7.20")  # 2 h at 3.60 USD an hour, each GPU
HARDWARE = FakeNvmlConfig(
    gpus=(
        FakeGpu(
            uuid=GPU0, util=None, memutil=None, mig_mode=1, total=80 * GiB,
            gpm=FakeGpm(sm_active=34),
            migs=(
                FakeMig(slot=0, uuid=MIG_A, total=40 * GiB, used=30 * GiB, gi=1, slices=3,
                        gpm=FakeGpm(sm_active=60)),
                FakeMig(slot=1, uuid=MIG_B, total=20 * GiB, used=10 * GiB, gi=2, slices=3,
                        gpm=FakeGpm(sm_active=20)),
            ),
        ),
        FakeGpu(uuid=GPU1, util=50),
    ),
    processes=(
        FakeProcess(gpu=0, mig=0, pid=100, mem=30 * GiB),
        FakeProcess(gpu=0, mig=1, pid=200, mem=10 * GiB),
    ),
)  # fmt: skip
CONFIG = """
[[rates]]
gpu = "*"
usd_per_hour = 3.60

[[targets]]
name = "chat"
url = "http://127.0.0.1:9/metrics"
unit = "chat.service"

[[targets]]
name = "embed"
url = "http://127.0.0.1:10/metrics"
unit = "embed.service"
"""


def proc_root(tmp_path: Path) -> Path:
    proc = tmp_path / "proc"
    for pid, unit in ((100, "chat.service"), (200, "embed.service")):
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cgroup").write_text(f"0::/system.slice/{unit}\n")
    return proc


@contextmanager
def mig_run(
    db_url: str, fake_nvml: FakeNvml, tmp_path: Path, extra: str = "", *others: Any
) -> Iterator[Config]:
    """Two hours of the host, ticked every 10 minutes and rolled up; its configuration.
    ``others``: more collectors beside NVML's."""
    fake_nvml.write(HARDWARE)
    path = tmp_path / "gpuwatch.toml"
    path.write_text(
        f'host = "{HOST}"\ndatabase_url = "{db_url}"\n[daemon]\ninterval_seconds = 600\n'
        f"{CONFIG}{extra}"
    )
    config = load_config(str(path), {})
    upgrade_database(config.database_url)
    app = App.open(config, [NvmlCollector(host=HOST, proc_root=proc_root(tmp_path)), *others])
    try:
        now = T0
        while now <= END:
            app.tick(now)
            now += STEP
        app.roll_up(NOW)
    finally:
        app.close()
    yield config
