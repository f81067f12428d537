"""Which pod each GPU's time goes to, tick by tick (agent.cost.pods), how the ledger splits a
slice of cost among pods to the digit (agent.cost.pods_ledger), and the namespace labels of the
configuration. The end-to-end figures are in test_pod_costs.py."""

from __future__ import annotations

from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from agent.config.settings import ConfigError, load_config
from agent.cost.ledger import Observation, meter
from agent.cost.pods import NO_POD, POD_MEMORY, POD_SM, TARGET_POD, UNATTRIBUTED, pod_samples
from agent.cost.ratecard import GpuPrice
from collectors.base import Sample

T = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
GiB = 2**30
GPU0 = {"gpu_uuid": "GPU-aaaa", "gpu_index": "0"}
GPU1 = {"gpu_uuid": "GPU-bbbb", "gpu_index": "1"}
MIG = "MIG-1111"
KUBELET_UP = Sample(
    metric="gpuwatch_collector_success", value=1.0, ts=T, labels={"collector": "kubelet"}
)


def used(gpu: dict[str, str], value: float, **extra: str) -> Sample:
    return Sample(metric="gpuwatch_gpu_memory_used_bytes", value=value, ts=T, labels=gpu | extra)


def process(gpu: dict[str, str], pid: int, mem: float, pod: str | None = None,
            **extra: str) -> Sample:  # fmt: skip
    labels = gpu | {"pid": str(pid), "unit": f"u{pid}"} | extra
    if pod is not None:
        namespace, name = pod.split("/")
        labels |= {"namespace": namespace, "pod": name}
    return Sample(metric="gpuwatch_gpu_process_memory_bytes", value=mem, ts=T, labels=labels)


def util(gpu: dict[str, str], pid: int, value: float) -> Sample:
    labels = gpu | {"pid": str(pid)}
    return Sample(metric="gpuwatch_gpu_process_utilization_ratio", value=value, ts=T,
                  labels=labels)  # fmt: skip


def holder(gpu: dict[str, str], pod: str, **extra: str) -> Sample:
    namespace, name = pod.split("/")
    labels = {"gpu_uuid": gpu["gpu_uuid"], "resource": "nvidia.com/gpu", "namespace": namespace,
              "pod": name, "container": "c"} | extra  # fmt: skip
    return Sample(metric="gpuwatch_gpu_pod_info", value=1.0, ts=T, labels=labels)


def by(samples: list[Sample], metric: str) -> dict[tuple[str, str, str], float]:
    return {
        (s.labels["gpu_index"], s.labels["namespace"], s.labels["pod"]): s.value
        for s in samples
        if s.metric == metric
    }


def none(pid: int) -> str | None:
    return None


def test_processes_in_pods_and_in_none_share_a_gpu_by_sm_and_none_is_dropped() -> None:
    got = pod_samples("node", [
        KUBELET_UP, used(GPU0, 40 * GiB),
        process(GPU0, 1, 20 * GiB, "a/x"), process(GPU0, 2, 10 * GiB, "a/x"),
        process(GPU0, 3, 10 * GiB),  # a host process: in no pod
        util(GPU0, 1, 0.4), util(GPU0, 2, 0.2), util(GPU0, 3, 0.2),
    ], T, none)  # fmt: skip

    assert by(got, POD_MEMORY) == {("0", "a", "x"): 30 * GiB,
                                   ("0", UNATTRIBUTED, UNATTRIBUTED): 10 * GiB}  # fmt: skip
    assert by(got, POD_SM) == pytest.approx(
        {("0", "a", "x"): 0.6, ("0", UNATTRIBUTED, UNATTRIBUTED): 0.2}
    )


def test_without_every_process_utilization_the_split_is_by_memory_alone() -> None:
    got = pod_samples("node", [
        KUBELET_UP, used(GPU0, 40 * GiB), process(GPU0, 1, 30 * GiB, "a/x"),
        process(GPU0, 2, 10 * GiB, "b/y"), util(GPU0, 1, 0.5),
    ], T, none)  # fmt: skip
    assert by(got, POD_SM) == {}
    assert by(got, POD_MEMORY) == {("0", "a", "x"): 30 * GiB, ("0", "b", "y"): 10 * GiB}


def test_a_gpu_without_processes_goes_to_its_holders_else_to_nobody() -> None:
    got = pod_samples("node", [
        KUBELET_UP, used(GPU0, 0.0), used(GPU1, 0.0),
        holder(GPU0, "a/x"), holder(GPU0, "b/y"),
    ], T, none)  # fmt: skip
    # Memory 0 each: the ledger splits them equally (by request).
    assert by(got, POD_MEMORY) == {("0", "a", "x"): 0.0, ("0", "b", "y"): 0.0,
                                   ("1", NO_POD, NO_POD): 0.0}  # fmt: skip


def test_a_mig_gpu_is_split_by_its_instances_pods_memory() -> None:
    got = pod_samples("node", [
        KUBELET_UP, used(GPU0, 30 * GiB), used(GPU0, 20 * GiB, mig_instance=MIG),
        process(GPU0, 1, 20 * GiB, "a/x", mig_instance=MIG),
        process(GPU0, 2, 10 * GiB, "b/y", mig_instance=MIG + "2"),
        holder(GPU0, "c/z", mig_instance=MIG),  # an instance-level allocation: not the GPU's
    ], T, none)  # fmt: skip
    assert by(got, POD_MEMORY) == {("0", "a", "x"): 20 * GiB, ("0", "b", "y"): 10 * GiB}


def test_off_kubernetes_nothing_and_the_served_targets_are_named() -> None:
    assert pod_samples("box", [used(GPU0, 1.0), process(GPU0, 1, 1.0)], T, none) == []

    got = pod_samples("node", [
        used(GPU0, 1.0), process(GPU0, 1, 1.0, "a/x"), process(GPU0, 2, 1.0),
    ], T, lambda pid: "chat")  # fmt: skip
    served = [s.labels for s in got if s.metric == TARGET_POD]
    # The unattributed process's target names no pod.
    assert served == [{"host": "node", "target": "chat", "namespace": "a", "pod": "x"}]


def test_the_ledger_gives_each_pod_its_share_and_the_last_the_remainder() -> None:
    pods = {("a", "x"): 1.0, ("b", "y"): 1.0, ("c", "z"): 1.0}  # equal thirds by memory
    observations = [
        Observation(T, 0.5, None, pods=pods),
        Observation(T.replace(minute=1), 0.5, None, pods=pods),
    ]
    price = GpuPrice(Decimal("1"))  # 1 USD an hour: 60 s cost 1/60 USD, not a finite decimal
    (usage,) = meter(observations, 60, 120, lambda _: price).values()

    assert usage.cost_usd is not None
    parts = {pod: p.cost_usd for pod, p in usage.pods.items() if p.cost_usd is not None}
    assert len(parts) == 3
    assert sum(parts.values(), Decimal(0)) == usage.cost_usd.quantize(Decimal("1e-12"))
    assert parts[("a", "x")] == parts[("b", "y")] == Decimal("0.005555555556")
    assert all(p.memory_seconds == pytest.approx(20.0) for p in usage.pods.values())
    assert all(p.busy_seconds == pytest.approx(10.0) for p in usage.pods.values())
    # No target held the GPU: all of it is the pods' untargeted time.
    assert all(p.untargeted_seconds == pytest.approx(20.0) for p in usage.pods.values())


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('[[labels]]\nnamespace = "ns"\ntarget = "a"\nteam = "x"\n',
         "labels[0]: a namespace's label names no target or host"),
        ('[[labels]]\nnamespace = "ns"\nteam = "x"\n[[labels]]\nnamespace = "ns"\nteam = "y"\n',
         "labels[1]: namespace 'ns' is labelled twice"),
        ('[[labels]]\nnamespace = ""\nteam = "x"\n', "labels[0].namespace: expected a"),
        ('[[labels]]\nnamespace = "ns"\n', "labels[0]: no label"),
    ],
)  # fmt: skip
def test_wrong_namespace_labels_are_named_with_their_key(
    tmp_path: Path, text: str, problem: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(str(path), {})
    assert problem in str(caught.value)


def test_a_namespace_label_leaves_the_targets_labels_alone(tmp_path: Path) -> None:
    path = tmp_path / "ok.toml"
    path.write_text('[[labels]]\nnamespace = "ml"\nteam = "search"\n'
                    '[[labels]]\nhost = "h"\nteam = "ads"\n')  # fmt: skip
    labels = load_config(str(path), {}).labels
    assert labels.of_namespace("ml").team == "search"
    assert labels.of_namespace("other").team is None
    assert labels.team("h", "chat") == "ads"
    assert labels.team("other-host", "chat") == "(unlabelled)"
