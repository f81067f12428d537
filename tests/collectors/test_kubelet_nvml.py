"""Per-process series labelled with namespace, pod and container: the real NVML collector over
the fake libnvidia-ml.so.1, processes in pod cgroups under a fake /proc, and the kubelet as a
real gRPC server on a Unix socket."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from collectors.base import CollectError
from collectors.kubelet.attribution import PodAttribution
from collectors.kubelet.collector import KubeletCollector
from collectors.kubelet.podlogs import PodLogNames
from collectors.kubelet.podresources import PodResourcesClient
from collectors.nvml import NvmlCollector
from tests.collectors.kubelet_server import (
    FakeKubelet,
    container,
    devices,
    pod,
    serve,
    short_socket_dir,
)
from tests.collectors.nvml_helpers import BUSY, IDLE, NOW, UUID0, UUID1, key, labels, series
from tests.conftest import FakeNvml
from tests.fakenvml.build import FakeGpu, FakeMig, FakeNvmlConfig, FakeProcess, GiB

MEMORY = "gpuwatch_gpu_process_memory_bytes"
UTIL = "gpuwatch_gpu_process_utilization_ratio"
GPU = "nvidia.com/gpu"
UID_VLLM = "3f5e1a2b-4c6d-4e8f-9a0b-1c2d3e4f5a6b"
UID_NOTEBOOK = "0125ec2f-b64a-4868-8f5b-94b56cbab864"
UID_BATCH = "c101fead-5fa2-4525-97af-5894973b336e"
CID = {100: "a" * 64, 200: "b" * 64, 300: "c" * 64}


def pod_cgroup(uid: str, cid: str, qos: str = "burstable") -> str:
    """The unified line of a container's process under the systemd driver (containerd);
    ``qos`` "" for a guaranteed pod, whose slice sits directly under kubepods.slice."""
    pod_slice = f"kubepods-{qos}-pod" if qos else "kubepods-pod"
    parent = f"/kubepods-{qos}.slice" if qos else ""
    return (f"0::/kubepods.slice{parent}/{pod_slice}{uid.replace('-', '_')}.slice/"
            f"cri-containerd-{cid}.scope\n")  # fmt: skip


def node() -> FakeKubelet:
    """GPU 0 whole to llm/vllm-0; GPU 1 time-sliced between two teams' pods."""
    return FakeKubelet(pods=[
        pod("llm", "vllm-0", container("engine", devices(GPU, UUID0))),
        pod("team-a", "notebook", container("jupyter", devices(GPU, f"{UUID1}::0"))),
        pod("team-b", "batch-7", container("worker", devices(GPU, f"{UUID1}::1"))),
    ])  # fmt: skip


@pytest.fixture
def fleet(fake_nvml: FakeNvml, tmp_path: Path) -> Path:
    """The fake GPUs and /proc: one engine pod on GPU 0 beside a host service, two pods sharing
    GPU 1 at 60 % and 20 % SM use. Returns the /proc root."""
    fake_nvml.write(FakeNvmlConfig(gpus=(IDLE, BUSY), processes=(
        FakeProcess(gpu=0, pid=100, mem=30 * GiB, smutil=70),
        FakeProcess(gpu=0, pid=101, mem=GiB, smutil=5),
        FakeProcess(gpu=1, pid=200, mem=20 * GiB, smutil=60),
        FakeProcess(gpu=1, pid=300, mem=10 * GiB, smutil=20),
    )))  # fmt: skip
    root = tmp_path / "proc"
    cgroups = {
        100: pod_cgroup(UID_VLLM, CID[100], qos=""),
        101: "0::/system.slice/nvidia-persistenced.service\n",
        200: pod_cgroup(UID_NOTEBOOK, CID[200], qos="besteffort"),
        300: f"0::/kubepods/burstable/pod{UID_BATCH}/{CID[300]}\n",  # the cgroupfs driver
    }
    for pid, text in cgroups.items():
        (root / str(pid)).mkdir(parents=True)
        (root / str(pid) / "cgroup").write_text(text)
    return root


@pytest.fixture
def socket() -> Iterator[Path]:
    with short_socket_dir() as folder:
        yield folder / "kubelet.sock"


def pod_logs(tmp_path: Path) -> Path:
    """The kubelet's /var/log/pods: one folder per pod, <namespace>_<name>_<uid>."""
    root = tmp_path / "pods"
    for name in (f"llm_vllm-0_{UID_VLLM}", f"team-a_notebook_{UID_NOTEBOOK}",
                 f"team-b_batch-7_{UID_BATCH}", "kube-system_kube-proxy-x2_1a2b"):  # fmt: skip
        (root / name / "c").mkdir(parents=True)
    return root


def tick(socket: Path, proc: Path, logs: Path | None) -> tuple[dict, CollectError | None]:
    """One round as the daemon runs it: the kubelet collector, then NVML with its answer."""
    attribution = PodAttribution(PodLogNames(str(logs)) if logs else None)
    kubelet = KubeletCollector(
        host="box-1", client=PodResourcesClient(str(socket), timeout=2),
        attribution=attribution, refresh_seconds=5,
    )  # fmt: skip
    nvml = NvmlCollector(host="box-1", proc_root=proc, pods=attribution)
    error = None
    try:
        kubelet.collect(NOW)
    except CollectError as exc:
        error = exc
    try:
        return series(nvml.collect(NOW)), error
    finally:
        nvml.close()
        kubelet.close()


def unit(pid: int) -> str:
    return f"containerd://{CID[pid]}" if pid != 300 else CID[pid]


def test_each_process_names_its_pod_and_a_shared_gpu_splits_by_pod(
    fleet: Path, socket: Path, tmp_path: Path
) -> None:
    with serve(socket, node()):
        got, error = tick(socket, fleet, pod_logs(tmp_path))
    assert error is None
    g0, g1 = labels(UUID0, 0), labels(UUID1, 1)
    vllm = {"namespace": "llm", "pod": "vllm-0", "container": "engine"}
    notebook = {"namespace": "team-a", "pod": "notebook", "container": "jupyter"}
    batch = {"namespace": "team-b", "pod": "batch-7", "container": "worker"}
    host = {"unit": "nvidia-persistenced.service"}  # no pod labels at all, not empty ones
    assert {k: v for k, v in got.items() if k[0] in (MEMORY, UTIL)} == {
        key(MEMORY, g0, pid="100", unit=unit(100), **vllm): 30 * GiB,
        key(UTIL, g0, pid="100", unit=unit(100), **vllm): 0.7,
        key(MEMORY, g0, pid="101", **host): GiB,
        key(UTIL, g0, pid="101", **host): 0.05,
        # The time-sliced GPU: each pod's own processes, with their own SM use to split by.
        key(MEMORY, g1, pid="200", unit=unit(200), **notebook): 20 * GiB,
        key(UTIL, g1, pid="200", unit=unit(200), **notebook): 0.6,
        key(MEMORY, g1, pid="300", unit=unit(300), **batch): 10 * GiB,
        key(UTIL, g1, pid="300", unit=unit(300), **batch): 0.2,
    }


def test_without_pod_log_folders_only_a_gpu_held_by_one_pod_is_attributed(
    fleet: Path, socket: Path, tmp_path: Path
) -> None:
    with serve(socket, node()):
        got, _ = tick(socket, fleet, tmp_path / "not-mounted")
    g0, g1 = labels(UUID0, 0), labels(UUID1, 1)
    vllm = {"namespace": "llm", "pod": "vllm-0", "container": "engine"}
    assert got[key(MEMORY, g0, pid="100", unit=unit(100), **vllm)] == 30 * GiB
    # Two pods hold GPU 1 and nothing ties a UID to either: unknown, never a guess.
    assert got[key(MEMORY, g1, pid="200", unit=unit(200))] == 20 * GiB
    assert got[key(UTIL, g1, pid="300", unit=unit(300))] == 0.2


def test_kubelet_down_costs_only_the_kubelet_labels(
    fleet: Path, socket: Path, tmp_path: Path
) -> None:
    got, error = tick(socket, fleet, pod_logs(tmp_path))  # no server: no socket
    assert error is not None and "does not exist" in str(error)
    g0, g1 = labels(UUID0, 0), labels(UUID1, 1)
    # Every NVML series is there; the pod log folders still name pods, without containers.
    assert got[key(MEMORY, g0, pid="100", unit=unit(100), namespace="llm", pod="vllm-0")] == (
        30 * GiB
    )
    assert got[key(UTIL, g1, pid="300", unit=unit(300), namespace="team-b", pod="batch-7")] == 0.2
    assert got[key("gpuwatch_gpu_utilization_ratio", g1)] == 0.97
    got_bare, _ = tick(socket, fleet, None)
    assert got_bare[key(MEMORY, g0, pid="100", unit=unit(100))] == 30 * GiB


def test_mig_instance_processes_name_the_pod_given_the_instance(
    fake_nvml: FakeNvml, socket: Path, tmp_path: Path
) -> None:
    mig = "MIG-aaaaaaaa-0000-0000-0000-000000000000"
    fake_nvml.write(FakeNvmlConfig(
        gpus=(FakeGpu(uuid=UUID0, util=None, memutil=None, mig_mode=1, migs=(
            FakeMig(slot=0, uuid=mig, total=10 * GiB, used=2 * GiB, gi=7, ci=0),
        )),),
        processes=(FakeProcess(gpu=0, mig=0, pid=100, mem=GiB),),
    ))  # fmt: skip
    proc = tmp_path / "proc"
    (proc / "100").mkdir(parents=True)
    (proc / "100" / "cgroup").write_text(pod_cgroup(UID_VLLM, CID[100]))
    kubelet = FakeKubelet(pods=[
        pod("emb", "tei-0", container("tei", devices("nvidia.com/mig-1g.10gb", mig))),
    ])  # fmt: skip
    with serve(socket, kubelet):
        got, _ = tick(socket, proc, None)
    instance = labels(UUID0, 0, mig_instance=mig)
    assert got[key(MEMORY, instance, pid="100", unit=unit(100), namespace="emb", pod="tei-0",
                   container="tei")] == GiB  # fmt: skip
