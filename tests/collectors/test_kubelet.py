"""The kubelet pod-resources client and collector against a real gRPC server on a Unix socket
(tests/collectors/kubelet_server.py): what a user sees as series, and how each failure shows."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from collectors.base import CollectError, Sample
from collectors.kubelet.attribution import PodAttribution
from collectors.kubelet.collector import KubeletCollector
from collectors.kubelet.podlogs import PodLogNames, PodName
from collectors.kubelet.podresources import Allocations, Holder, PodResourcesClient
from collectors.signals import SIGNALS
from tests.collectors.kubelet_server import (
    GPU_A,
    GPU_B,
    MIG_A,
    FakeKubelet,
    container,
    devices,
    pod,
    serve,
    serve_garbage,
    short_socket_dir,
)

NOW = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
GPU = "nvidia.com/gpu"


@pytest.fixture
def socket() -> Iterator[Path]:
    with short_socket_dir() as folder:
        yield folder / "kubelet.sock"


def a_node() -> FakeKubelet:
    """Two GPUs and one MIG instance: GPU A whole to one pod, GPU B time-sliced between two
    (the device plugin's "<uuid>::<replica>" IDs), the MIG instance to a third; plus resources
    that are not GPUs, and what a confused answer might hold."""
    return FakeKubelet(
        pods=[
            pod("llm", "vllm-0", container("engine", devices(GPU, GPU_A)),
                container("sidecar", devices("example.com/nic", "eth1"))),
            pod("team-a", "notebook", container("jupyter", devices(GPU, f"{GPU_B}::0"))),
            pod("team-b", "batch-7", container("worker", devices(GPU, f"{GPU_B}::3"))),
            pod("small", "embedder", container("tei", devices("nvidia.com/mig-1g.10gb", MIG_A))),
            pod("", "nameless", container("c", devices(GPU, GPU_A))),  # no namespace: skipped
            pod("idx", "by-index", container("c", devices(GPU, "0"))),  # index IDs: skipped
        ],
        allocatable=[
            devices(GPU, GPU_A, f"{GPU_B}::0", f"{GPU_B}::1", f"{GPU_B}::2", f"{GPU_B}::3"),
            devices("nvidia.com/mig-1g.10gb", MIG_A),
            devices("example.com/nic", "eth1"),
        ],
    )  # fmt: skip


def test_client_reads_holders_and_allocatable_gpus(socket: Path) -> None:
    with serve(socket, a_node()):
        client = PodResourcesClient(str(socket), timeout=5)
        try:
            got = client.allocations()
        finally:
            client.close()
    assert got == Allocations(
        holders={
            GPU_A: (Holder("llm", "vllm-0", "engine", GPU),),
            GPU_B: (
                Holder("team-a", "notebook", "jupyter", GPU),
                Holder("team-b", "batch-7", "worker", GPU),
            ),
            MIG_A: (Holder("small", "embedder", "tei", "nvidia.com/mig-1g.10gb"),),
        },
        allocatable={GPU_A: GPU, GPU_B: GPU, MIG_A: "nvidia.com/mig-1g.10gb"},
    )


def test_kubelet_without_get_allocatable_still_names_holders(socket: Path) -> None:
    node = a_node()
    node.allocatable = None
    with serve(socket, node):
        client = PodResourcesClient(str(socket), timeout=5)
        got = client.allocations()
        client.close()
    assert got.allocatable is None
    assert got.holders[GPU_A] == (Holder("llm", "vllm-0", "engine", GPU),)


def series(samples: list[Sample]) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    for s in samples:
        assert s.metric in SIGNALS, s.metric
        assert s.value == 1.0 and s.ts == NOW
        assert all(s.labels.values()), f"an empty label on {s}"
    return {(s.metric, s.label_key()) for s in samples}


def collector(socket: Path, **kwargs: float) -> KubeletCollector:
    client = PodResourcesClient(str(socket), timeout=kwargs.pop("timeout", 5))
    return KubeletCollector(
        host="node-1", client=client, attribution=PodAttribution(), refresh_seconds=5, **kwargs
    )


def test_collector_series_a_user_sees(socket: Path) -> None:
    with serve(socket, a_node()):
        c = collector(socket)
        got = series(c.collect(NOW))
        c.close()

    def info(device: dict[str, str], resource: str, ns: str, p: str, ctr: str) -> tuple:
        labels = device | {"host": "node-1", "resource": resource, "namespace": ns, "pod": p,
                           "container": ctr}  # fmt: skip
        return "gpuwatch_gpu_pod_info", tuple(sorted(labels.items()))

    def allocatable(device: dict[str, str], resource: str) -> tuple:
        labels = device | {"host": "node-1", "resource": resource}
        return "gpuwatch_gpu_allocatable_info", tuple(sorted(labels.items()))

    a, b, mig = {"gpu_uuid": GPU_A}, {"gpu_uuid": GPU_B}, {"mig_instance": MIG_A}
    assert got == {
        info(a, GPU, "llm", "vllm-0", "engine"),
        info(b, GPU, "team-a", "notebook", "jupyter"),
        info(b, GPU, "team-b", "batch-7", "worker"),
        info(mig, "nvidia.com/mig-1g.10gb", "small", "embedder", "tei"),
        allocatable(a, GPU),
        allocatable(b, GPU),
        allocatable(mig, "nvidia.com/mig-1g.10gb"),
    }


def test_one_question_per_tick_and_a_new_one_the_next_tick(socket: Path) -> None:
    with serve(socket, a_node()) as node:
        c = collector(socket)
        c.collect(NOW)
        c.collect(NOW + timedelta(seconds=1))  # within the tick: the same answer
        assert node.calls == {"List": 1, "GetAllocatableResources": 1}
        node.pods = []  # the pods went away
        assert c.collect(NOW + timedelta(seconds=10)) != []  # allocatable GPUs remain
        assert node.calls["List"] == 2
        assert c.attribution.allocations is not None
        assert c.attribution.allocations.holders == {}
        c.close()


def test_missing_socket_fails_the_collector_and_names_it(socket: Path) -> None:
    c = collector(socket)
    with pytest.raises(CollectError, match=f"{socket} does not exist"):
        c.collect(NOW)
    assert c.attribution.allocations is None


def test_hung_kubelet_costs_one_timeout_then_waits_before_asking_again(socket: Path) -> None:
    node = a_node()
    node.hang = True
    with serve(socket, node):
        c = collector(socket, timeout=0.3, retry_seconds=60)
        started = time.monotonic()
        with pytest.raises(CollectError, match=r"List .*no answer within 0\.3s"):
            c.collect(NOW)
        assert time.monotonic() - started < 3
        # The next ticks inside the retry window fail at once, without asking.
        with pytest.raises(CollectError, match=r"no answer within 0\.3s \(asking again in 50s\)"):
            c.collect(NOW + timedelta(seconds=10))
        assert node.calls["List"] == 1
        node.hang = False
        node.release.set()
        assert c.collect(NOW + timedelta(seconds=61))  # recovered
        c.close()


def test_garbage_answer_fails_the_collector(socket: Path) -> None:
    with serve_garbage(socket):
        c = collector(socket)
        with pytest.raises(CollectError, match="kubelet pod-resources List"):
            c.collect(NOW)
        c.close()


def test_answer_over_the_size_cap_is_refused(socket: Path) -> None:
    many = [pod("ns", f"pod-{i}", container("c", devices(GPU, GPU_A))) for i in range(400)]
    with serve(socket, FakeKubelet(pods=many)):
        client = PodResourcesClient(str(socket), timeout=5, max_message_bytes=4096)
        with pytest.raises(CollectError, match="over 4096 bytes"):
            client.allocations()
        client.close()


def test_processes_of_two_pods_on_a_gpu_given_to_one_stay_unattributed() -> None:
    # One pod asked for GPU A; a second pod's process runs there too (it sees every GPU through
    # NVIDIA_VISIBLE_DEVICES=all). Nothing says which UID is the holder's: neither is named.
    pods = PodAttribution()
    held = (Holder("llm", "vllm-0", "engine", GPU),)
    pods.update(Allocations(holders={GPU_A: held}, allocatable=None))
    assert pods.labels(GPU_A, {1: "uid-1", 2: "uid-2", 3: None}) == {}
    # Alone on it (a host process beside it has no pod), the pod's process is the holder's.
    assert pods.labels(GPU_A, {1: "uid-1", 3: None}) == {
        1: {"namespace": "llm", "pod": "vllm-0", "container": "engine"}
    }


def test_pod_log_folders_are_read_again_once_per_tick_for_a_new_uid(tmp_path: Path) -> None:
    names = PodLogNames(str(tmp_path))
    (tmp_path / "ns_a_uid-a").mkdir()
    assert names.lookup("uid-a") == PodName("ns", "a")
    (tmp_path / "ns_b_uid-b").mkdir()  # a pod started since
    assert names.lookup("uid-b") is None  # this tick's one rescan is spent
    names.refresh()  # the next tick
    assert names.lookup("uid-b") == PodName("ns", "b")
    assert names.lookup("uid-a") == PodName("ns", "a")
