"""Pods on the daemon's path: the kubelet collector wired before NVML, its labels on /metrics
and in `gpuwatch collect --once --json`, and a failing kubelet costing nothing but its own.

Real parts: a gRPC server speaking the kubelet's pod-resources v1 API on a Unix socket, pynvml
over the fake libnvidia-ml, the daemon's tick (runner, store on SQLite and PostgreSQL) and the
/metrics exposition; processes live in pod cgroups under a fake /proc.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agent.collect.kubernetes import kubelet_collector
from agent.config.settings import Config, load_config
from agent.daemon.app import App, build_collectors
from agent.daemon.exposition import LatestRoundCollector, make_registry
from agent.storage.db import upgrade_database
from collectors.nvml import NvmlCollector
from tests.collectors.kubelet_server import (
    FakeKubelet,
    container,
    devices,
    pod,
    serve,
    short_socket_dir,
)
from tests.conftest import FakeNvml
from tests.fakenvml.build import FakeGpu, FakeNvmlConfig, FakeProcess, GiB, write_config

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
REPO = Path(__file__).resolve().parents[2]
GPU0 = "GPU-00000000-0000-0000-0000-00000000aaaa"
GPU1 = "GPU-00000000-0000-0000-0000-00000000bbbb"
UID_A = "0125ec2f-b64a-4868-8f5b-94b56cbab864"
UID_B = "c101fead-5fa2-4525-97af-5894973b336e"
HARDWARE = FakeNvmlConfig(
    gpus=(FakeGpu(uuid=GPU0, util=90), FakeGpu(uuid=GPU1, util=5)),
    processes=(
        FakeProcess(gpu=0, pid=100, mem=30 * GiB, smutil=75),
        FakeProcess(gpu=0, pid=200, mem=10 * GiB, smutil=25),
    ),
)


def kubelet() -> FakeKubelet:
    """GPU 0 time-sliced between two teams' pods; GPU 1 allocatable, held by nobody."""
    gpu = "nvidia.com/gpu"
    return FakeKubelet(
        pods=[
            pod("team-a", "chat-0", container("vllm", devices(gpu, f"{GPU0}::0"))),
            pod("team-b", "eval-3", container("runner", devices(gpu, f"{GPU0}::1"))),
        ],
        allocatable=[devices(gpu, f"{GPU0}::0", f"{GPU0}::1", GPU1)],
    )


@pytest.fixture
def socket() -> Iterator[Path]:
    with short_socket_dir() as folder:
        yield folder / "kubelet.sock"


def node_files(tmp_path: Path) -> tuple[Path, Path]:
    """A /proc whose GPU processes sit in the two pods' cgroups (systemd and cgroupfs drivers),
    and the kubelet's /var/log/pods naming those pods."""
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


def config_for(tmp_path: Path, db_url: str, socket: Path, logs: Path) -> Config:
    path = tmp_path / "gpuwatch.toml"
    path.write_text(
        f'host = "node-1"\ndatabase_url = "{db_url}"\n'
        f'[kubernetes]\nenabled = true\npod_resources_socket = "{socket}"\n'
        f'pod_logs_dir = "{logs}"\ntimeout = "1s"\n'
    )
    return load_config(str(path), {})


def metrics_after_a_tick(config: Config, proc: Path) -> dict[tuple[str, frozenset], float]:
    """One tick of the daemon, read back from /metrics as {(name, labels): value}."""
    upgrade_database(config.database_url)
    kubelet_c = kubelet_collector(config)
    assert kubelet_c is not None
    nvml = NvmlCollector(host=config.host, proc_root=proc, pods=kubelet_c.attribution)
    app = App.open(config, [kubelet_c, nvml])
    try:
        latest = LatestRoundCollector()
        latest.update(app.tick(NOW))
    finally:
        app.close()
    text = generate_latest(make_registry(latest)).decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def labels(**extra: str) -> frozenset:
    return frozenset(({"host": "node-1"} | extra).items())


def test_metrics_name_the_pods_time_slicing_a_gpu(
    db_url: str, fake_nvml: FakeNvml, socket: Path, tmp_path: Path
) -> None:
    fake_nvml.write(HARDWARE)
    proc, logs = node_files(tmp_path)
    with serve(socket, kubelet()):
        got = metrics_after_a_tick(config_for(tmp_path, db_url, socket, logs), proc)

    gpu0 = {"gpu_uuid": GPU0, "gpu_index": "0"}
    a = {
        "namespace": "team-a",
        "pod": "chat-0",
        "container": "vllm",
        "unit": f"containerd://{'a' * 64}",
    }
    b = {"namespace": "team-b", "pod": "eval-3", "container": "runner", "unit": "b" * 64}
    util = "gpuwatch_gpu_process_utilization_ratio"
    memory = "gpuwatch_gpu_process_memory_bytes"
    assert got[(util, labels(**gpu0, pid="100", **a))] == 0.75
    assert got[(util, labels(**gpu0, pid="200", **b))] == 0.25
    assert got[(memory, labels(**gpu0, pid="100", **a))] == 30 * GiB
    assert got[(memory, labels(**gpu0, pid="200", **b))] == 10 * GiB
    info = {k: v for k, v in got.items() if k[0] == "gpuwatch_gpu_pod_info"}
    gpu = "nvidia.com/gpu"
    assert info == {
        ("gpuwatch_gpu_pod_info", labels(gpu_uuid=GPU0, resource=gpu, namespace="team-a",
                                          pod="chat-0", container="vllm")): 1.0,
        ("gpuwatch_gpu_pod_info", labels(gpu_uuid=GPU0, resource=gpu, namespace="team-b",
                                          pod="eval-3", container="runner")): 1.0,
    }  # fmt: skip
    assert got[("gpuwatch_gpu_allocatable_info", labels(gpu_uuid=GPU1, resource=gpu))] == 1.0
    assert got[("gpuwatch_collector_success", labels(collector="kubelet"))] == 1.0


def test_a_failing_kubelet_is_a_failed_collector_and_nvml_is_whole(
    db_url: str, fake_nvml: FakeNvml, socket: Path, tmp_path: Path
) -> None:
    fake_nvml.write(HARDWARE)
    proc, _ = node_files(tmp_path)
    # No server on the socket, and no pod log folders: nothing can name a pod.
    got = metrics_after_a_tick(config_for(tmp_path, db_url, socket, tmp_path / "none"), proc)

    assert got[("gpuwatch_collector_success", labels(collector="kubelet"))] == 0.0
    assert got[("gpuwatch_collector_success", labels(collector="nvml"))] == 1.0
    gpu0 = {"gpu_uuid": GPU0, "gpu_index": "0"}
    util = "gpuwatch_gpu_process_utilization_ratio"
    assert got[(util, labels(**gpu0, pid="100", unit=f"containerd://{'a' * 64}"))] == 0.75
    assert got[(util, labels(**gpu0, pid="200", unit="b" * 64))] == 0.25
    assert got[("gpuwatch_gpu_utilization_ratio", labels(**gpu0))] == 0.9
    assert not [
        k for k in got if k[0] in ("gpuwatch_gpu_pod_info", "gpuwatch_gpu_allocatable_info")
    ]


def test_kubelet_runs_before_nvml_and_only_where_asked(tmp_path: Path, socket: Path) -> None:
    def names(body: str) -> list[str]:
        path = tmp_path / "k.toml"
        path.write_text(body)
        return [c.name for c in build_collectors(load_config(str(path), {}))]

    on = f'[kubernetes]\nenabled = true\npod_resources_socket = "{socket}"\n'
    assert names(on) == ["kubelet", "nvml"]
    auto = f'[kubernetes]\npod_resources_socket = "{socket}"\n'
    assert names(auto) == ["nvml"]  # auto, and no socket: not on Kubernetes
    with serve(socket, kubelet()):
        assert names(auto) == ["kubelet", "nvml"]
    assert names(f"{on}enabled = false\n".replace("enabled = true\n", "")) == ["nvml"]


def test_collect_once_json_shows_the_pods(
    fake_nvml_dir: Path, socket: Path, tmp_path: Path
) -> None:
    config = tmp_path / "gpuwatch.toml"
    config.write_text(f'host = "node-1"\n[kubernetes]\npod_resources_socket = "{socket}"\n')
    hardware = write_config(tmp_path / "hardware.txt", HARDWARE)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUWATCH_", "LD_LIB"))}
    env |= {"XDG_STATE_HOME": str(tmp_path / "state"), "LD_LIBRARY_PATH": str(fake_nvml_dir),
            "FAKE_NVML_CONFIG": str(hardware)}  # fmt: skip
    with serve(socket, kubelet()):
        result = subprocess.run(
            [sys.executable, "-m", "agent.cli.main", "collect", "--once", "--json",
             "--config", str(config)],
            env=env, cwd=REPO, capture_output=True, text=True, timeout=60, check=False,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    held = {
        (o["collector"], o["labels"]["namespace"], o["labels"]["pod"], o["labels"]["container"])
        for o in lines
        if o["metric"] == "gpuwatch_gpu_pod_info"
    }
    assert held == {
        ("kubelet", "team-a", "chat-0", "vllm"),
        ("kubelet", "team-b", "eval-3", "runner"),
    }
    assert any(o["metric"] == "gpuwatch_gpu_utilization_ratio" for o in lines)
