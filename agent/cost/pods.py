"""Which Kubernetes pod uses which GPU, from one tick's process samples and the kubelet's
allocations: the basis of the cost ledger's split of each GPU by pod.

On a Kubernetes node (the kubelet collector ran this tick, or a process carries pod labels),
every physical GPU the tick saw gets one derived sample per pod on it:
``gpuwatch_pod_gpu_memory_bytes{gpu_uuid, gpu_index, namespace, pod}`` (the memory its
processes hold) and, where NVML gave every process on the GPU its SM utilization and their
sum is above 0, ``gpuwatch_pod_gpu_sm_utilization_ratio`` (their summed utilization): the
ledger splits the GPU by the latter where present, else by memory, as between targets.

Whole, never dropped: processes in no known pod count as the pod :data:`UNATTRIBUTED`; a GPU
with no process goes to the pods the kubelet gave it (``gpuwatch_gpu_pod_info``, memory 0,
so an equal split: allocation by request, the whole GPU idle), else to :data:`NO_POD`. MIG
instances' processes count for their parent GPU (their samples carry its ``gpu_uuid``), so a
MIG GPU's cost is split by its instances' pods' memory (NVML gives no per-process utilization
under MIG); a MIG GPU with no process and only instance-level allocations goes to
:data:`NO_POD` (pricing instances is the rate card's concern, not this split's).

A process whose target is known (agent.cost.allocation) names the pod serving that target:
``gpuwatch_target_pod_info{target, namespace, pod} 1``, from which a pod's useful tokens are
its targets' (agent.cost.pods_read).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime

from agent.storage.rolled_up import TARGET_POD
from collectors.base import Sample

POD_MEMORY = "gpuwatch_pod_gpu_memory_bytes"
POD_SM = "gpuwatch_pod_gpu_sm_utilization_ratio"
PROCESS = "gpuwatch_gpu_process_memory_bytes"
PROCESS_UTIL = "gpuwatch_gpu_process_utilization_ratio"
USED = "gpuwatch_gpu_memory_used_bytes"
POD_INFO = "gpuwatch_gpu_pod_info"
SUCCESS = "gpuwatch_collector_success"
UNATTRIBUTED = "(unattributed)"  # GPU processes in no pod gpuwatch could name
NO_POD = "(no pod)"  # GPU time with no process and no pod the kubelet gave the GPU to
Gpu = tuple[str, str]  # (uuid, index)
PodKey = tuple[str, str]  # (namespace, pod)
TargetOf = Callable[[int], "str | None"]


@dataclass(frozen=True, slots=True)
class _Tick:
    """One tick's readings, per physical GPU."""

    memory: dict[Gpu, dict[PodKey, float]]
    sm: dict[Gpu, dict[PodKey, float]]
    every_sm: dict[Gpu, bool]  # every process on the GPU reported its SM utilization
    seen: set[Gpu]
    holders: dict[str, set[PodKey]]  # GPU uuid -> pods the kubelet gave it
    serving: set[tuple[str, str, str]]  # (target, namespace, pod)


def pod_samples(
    host: str, round_samples: Iterable[Sample], now: datetime, target_of: TargetOf
) -> list[Sample]:
    """The tick's per-(GPU, pod) samples and target -> pod samples; none off Kubernetes."""
    samples = list(round_samples)
    if not _on_kubernetes(samples):
        return []
    tick = _read(samples, target_of)
    out: list[Sample] = []
    for gpu in sorted(tick.seen):
        uuid, index = gpu
        memory = tick.memory.get(gpu) or {p: 0.0 for p in tick.holders.get(uuid, ())}
        sm = tick.sm.get(gpu, {})
        by_sm = tick.every_sm.get(gpu, False) and sum(sm.values()) > 0
        for (namespace, pod), value in sorted((memory or {(NO_POD, NO_POD): 0.0}).items()):
            labels = {"host": host, "gpu_uuid": uuid, "gpu_index": index,
                      "namespace": namespace, "pod": pod}  # fmt: skip
            out.append(Sample(metric=POD_MEMORY, value=value, ts=now, labels=labels))
            if by_sm:
                out.append(
                    Sample(
                        metric=POD_SM, value=sm.get((namespace, pod), 0.0), ts=now, labels=labels
                    )
                )
    for target, namespace, pod in sorted(tick.serving):
        labels = {"host": host, "target": target, "namespace": namespace, "pod": pod}
        out.append(Sample(metric=TARGET_POD, value=1.0, ts=now, labels=labels))
    return out


def _on_kubernetes(samples: Iterable[Sample]) -> bool:
    return any(
        (s.metric == SUCCESS and s.labels.get("collector") == "kubelet")
        or (s.metric == PROCESS and "pod" in s.labels)
        for s in samples
    )


def _read(samples: Iterable[Sample], target_of: TargetOf) -> _Tick:
    memory: dict[Gpu, dict[PodKey, float]] = defaultdict(lambda: defaultdict(float))
    sm: dict[Gpu, dict[PodKey, float]] = defaultdict(lambda: defaultdict(float))
    util: dict[tuple[Gpu, str], float] = {}
    pids: dict[Gpu, list[tuple[str, PodKey]]] = defaultdict(list)
    tick = _Tick(memory, sm, {}, set(), defaultdict(set), set())
    for s in samples:
        gpu = (s.labels.get("gpu_uuid", ""), s.labels.get("gpu_index", ""))
        if s.metric == POD_INFO and "gpu_uuid" in s.labels and "mig_instance" not in s.labels:
            tick.holders[s.labels["gpu_uuid"]].add((s.labels["namespace"], s.labels["pod"]))
        elif s.metric == USED and "mig_instance" not in s.labels:
            tick.seen.add(gpu)
        elif s.metric == PROCESS:
            key = _pod_of(s)
            memory[gpu][key] += s.value
            pids[gpu].append((s.labels.get("pid", ""), key))
            target = target_of(int(s.labels["pid"])) if s.labels.get("pid", "").isdigit() else None
            if target is not None and key[1] not in (UNATTRIBUTED, NO_POD):
                tick.serving.add((target, *key))
        elif s.metric == PROCESS_UTIL:
            util[(gpu, s.labels.get("pid", ""))] = s.value
    for gpu, listed in pids.items():
        tick.seen.add(gpu)
        tick.every_sm[gpu] = all((gpu, pid) in util for pid, _ in listed)
        for pid, key in listed:
            sm[gpu][key] += util.get((gpu, pid), 0.0)
    return tick


def _pod_of(s: Sample) -> PodKey:
    namespace, pod = s.labels.get("namespace"), s.labels.get("pod")
    if namespace and pod:
        return namespace, pod
    return UNATTRIBUTED, UNATTRIBUTED
