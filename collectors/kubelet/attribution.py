"""Which pod a GPU process belongs to: the kubelet's device list joined with the pod UID of the
process's cgroup (collectors.proc).

For the processes of one device (a GPU, or a MIG instance) in one round:

1. a process whose pod UID names a pod log folder (collectors.kubelet.podlogs) is that pod's,
   whether or not the pod asked the kubelet for the GPU (a pod that sees every GPU through
   ``NVIDIA_VISIBLE_DEVICES=all`` is still named);
2. otherwise, when the kubelet gave the device to exactly one pod and the device's processes
   are all in one pod, they are that pod's: nothing else could hold it through the kubelet;
3. otherwise (a GPU time-sliced between pods and no pod log folder to tell their UIDs apart, or
   processes of several pods on a GPU the kubelet gave one) the processes stay unattributed:
   unknown, never a guess.

``container`` is added where the pod's containers holding the device are exactly one.
"""

from __future__ import annotations

from collections.abc import Mapping

from collectors.kubelet.podlogs import PodLogNames, PodName
from collectors.kubelet.podresources import Allocations, Holder


class PodAttribution:
    """The latest kubelet answer (written by KubeletCollector once per tick, before NVML reads
    it in the same tick) and the pod log names, shared by the two collectors."""

    def __init__(self, pod_logs: PodLogNames | None = None) -> None:
        self._pod_logs = pod_logs
        self._allocations: Allocations | None = None

    @property
    def allocations(self) -> Allocations | None:
        return self._allocations

    def update(self, allocations: Allocations | None) -> None:
        """This tick's answer; None when the kubelet could not be asked (then only pod log
        folders name pods)."""
        self._allocations = allocations
        if self._pod_logs is not None:
            self._pod_logs.refresh()

    def labels(self, device: str, pod_uids: Mapping[int, str | None]) -> dict[int, dict[str, str]]:
        """PID -> {namespace, pod[, container]} for the processes on ``device`` (GPU or MIG
        UUID) whose pod is known; processes outside pods, or of unknown pods, are left out."""
        holders = self._allocations.holders.get(device, ()) if self._allocations else ()
        in_pods = {uid for uid in pod_uids.values() if uid}
        holding = {PodName(h.namespace, h.pod) for h in holders}
        sole = next(iter(holding)) if len(holding) == 1 and len(in_pods) == 1 else None
        out: dict[int, dict[str, str]] = {}
        for pid, uid in pod_uids.items():
            if not uid:
                continue
            name = self._pod_logs.lookup(uid) if self._pod_logs is not None else None
            name = name or sole
            if name is not None:
                out[pid] = _labels(name, holders)
        return out


def _labels(name: PodName, holders: tuple[Holder, ...]) -> dict[str, str]:
    labels = {"namespace": name.namespace, "pod": name.pod}
    containers = {h.container for h in holders if PodName(h.namespace, h.pod) == name}
    if len(containers) == 1:
        labels["container"] = containers.pop()
    return labels
