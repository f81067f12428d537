"""Shared by the pod-cost tests: a Kubernetes node whose GPU 0 two teams' pods time-slice at
75 % and 25 % of its SMs (the GPU 90 % busy), whose GPU 1 (5 % busy) the kubelet gave a
team-b notebook pod that runs no GPU process, whose GPU 2 (idle) nobody holds, and whose
team-a pod serves the target "chat" (another target, "embed", runs nowhere), run by the
daemon's App for two hours at 3.60 USD an hour per GPU and rolled up.

Real parts: a gRPC server speaking the kubelet's pod-resources v1 API on a Unix socket, pynvml
over the fake libnvidia-ml, processes in pod cgroups under a fake /proc with the kubelet's pod
log folders, the App's tick, allocation and rollup on SQLite and PostgreSQL. The engine's
/metrics is a scripted collector (EngineScrape): its token counter is the only input the
scrape would give here.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

from agent.collect.kubernetes import kubelet_collector
from agent.config.settings import Config, load_config
from agent.daemon.app import App
from agent.storage.db import upgrade_database
from collectors.nvml import NvmlCollector
from tests.agent.rollup_helpers import EngineScrape
from tests.collectors.kubelet_server import (
    FakeKubelet,
    container,
    devices,
    pod,
    serve,
    short_socket_dir,
)
from tests.conftest import FakeNvml
from tests.fakenvml.build import FakeGpu, FakeNvmlConfig, FakeProcess, GiB

HOST = "node-1"
T0 = datetime(2026, 11, 2, 9, 0, tzinfo=UTC)
END = T0 + timedelta(hours=2)
STEP = timedelta(minutes=10)
NOW = END + timedelta(minutes=5)
GPU0 = "GPU-00000000-0000-0000-0000-00000000aaaa"
GPU1 = "GPU-00000000-0000-0000-0000-00000000bbbb"
GPU2 = "GPU-00000000-0000-0000-0000-00000000cccc"
UID_A = "0125ec2f-b64a-4868-8f5b-94b56cbab864"
UID_B = "c101fead-5fa2-4525-97af-5894973b336e"
UNIT_A = f"containerd://{'a' * 64}"  # NVML's unit for pid 100 (the cgroup's container)
GPU_COST = Decimal("7.20")  # 2 h at 3.60 USD an hour, each GPU
TOKENS_PER_TICK = 1000.0
HARDWARE = FakeNvmlConfig(
    gpus=(FakeGpu(uuid=GPU0, util=90), FakeGpu(uuid=GPU1, util=5), FakeGpu(uuid=GPU2, util=0)),
    processes=(
        FakeProcess(gpu=0, pid=100, mem=30 * GiB, smutil=75),
        FakeProcess(gpu=0, pid=200, mem=10 * GiB, smutil=25),
    ),
)
CONFIG = f"""
[[rates]]
gpu = "*"
usd_per_hour = 3.60

[[targets]]
name = "chat"
url = "http://127.0.0.1:9/metrics"
unit = "{UNIT_A}"

[[targets]]                     # a second target: eval-3's process is no target's
name = "embed"
url = "http://127.0.0.1:10/metrics"
unit = "embed.service"

[[labels]]
namespace = "team-b"
team = "research"
project = "evals"
"""


def kubelet() -> FakeKubelet:
    gpu = "nvidia.com/gpu"
    return FakeKubelet(
        pods=[
            pod("team-a", "chat-0", container("vllm", devices(gpu, f"{GPU0}::0"))),
            pod("team-b", "eval-3", container("runner", devices(gpu, f"{GPU0}::1"))),
            pod("team-b", "notebook-1", container("lab", devices(gpu, GPU1))),
        ],
        allocatable=[devices(gpu, f"{GPU0}::0", f"{GPU0}::1", GPU1, GPU2)],
    )


def node_files(tmp_path: Path) -> tuple[Path, Path]:
    """A /proc whose GPU processes sit in the two pods' cgroups (systemd and cgroupfs
    drivers), and the kubelet's /var/log/pods naming those pods."""
    proc, logs = tmp_path / "proc", tmp_path / "pods"
    cgroups = {
        100: f"0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod"
        f"{UID_A.replace('-', '_')}.slice/cri-containerd-{'a' * 64}.scope\n",
        200: f"0::/kubepods/besteffort/pod{UID_B}/{'b' * 64}\n",
    }
    for pid, text in cgroups.items():
        (proc / str(pid)).mkdir(parents=True)
        (proc / str(pid) / "cgroup").write_text(text)
    for folder in (f"team-a_chat-0_{UID_A}", f"team-b_eval-3_{UID_B}"):
        (logs / folder).mkdir(parents=True)
    return proc, logs


def write_config(tmp_path: Path, db_url: str, socket: Path, logs: Path, extra: str = "") -> Path:
    path = tmp_path / "gpuwatch.toml"
    path.write_text(
        f'host = "{HOST}"\ndatabase_url = "{db_url}"\n[daemon]\ninterval_seconds = 600\n'
        f'[kubernetes]\nenabled = true\npod_resources_socket = "{socket}"\n'
        f'pod_logs_dir = "{logs}"\ntimeout = "1s"\n{CONFIG}{extra}'
    )
    return path


@contextmanager
def node_run(db_url: str, fake_nvml: FakeNvml, tmp_path: Path, extra: str = "") -> Iterator[Config]:
    """Two hours of the node, ticked every 10 minutes and rolled up; its configuration."""
    fake_nvml.write(HARDWARE)
    proc, logs = node_files(tmp_path)
    with short_socket_dir() as folder, serve(folder / "kubelet.sock", kubelet()):
        path = write_config(tmp_path, db_url, folder / "kubelet.sock", logs, extra)
        config = load_config(str(path), {})
        upgrade_database(config.database_url)
        pods = kubelet_collector(config)
        assert pods is not None
        nvml = NvmlCollector(host=HOST, proc_root=proc, pods=pods.attribution)
        engine = EngineScrape("chat", host=HOST)
        collectors: list[Any] = [pods, nvml, engine]  # EngineScrape: a scripted collector
        app = App.open(config, collectors)
        try:
            tick, now = 0, T0
            while now <= END:
                engine.tokens = {"llama": TOKENS_PER_TICK * tick}
                app.tick(now)
                tick, now = tick + 1, now + STEP
            app.roll_up(NOW)
        finally:
            app.close()
        yield config
