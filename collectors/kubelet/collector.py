"""The ``kubelet`` collector: which namespace, pod and container holds each GPU, as series.

One series per holder, ``gpuwatch_gpu_pod_info{gpu_uuid | mig_instance, resource, namespace,
pod, container} 1`` (several on a time-sliced GPU), and one per device the kubelet can hand out,
``gpuwatch_gpu_allocatable_info{gpu_uuid | mig_instance, resource} 1``: a GPU with the second and
none of the first was requested by no pod. The answer is also handed to the NVML collector
(through :class:`PodAttribution`) for its per-process labels.

Isolated like node_exporter's collectors: a missing socket or a hung kubelet fails this
collector (``gpuwatch_collector_success{collector="kubelet"} 0``) and costs NVML only its
pod labels. After a failure the kubelet is asked again only after ``retry_seconds``, so a hung
one costs the tick one timeout per minute, not one per tick.
"""

from __future__ import annotations

from datetime import datetime
from typing import Protocol

from collectors.base import CollectError, Sample
from collectors.kubelet.attribution import PodAttribution
from collectors.kubelet.podresources import Allocations

POD_INFO = "gpuwatch_gpu_pod_info"
ALLOCATABLE_INFO = "gpuwatch_gpu_allocatable_info"
RETRY_SECONDS = 60.0


class Lister(Protocol):
    """What the collector needs of the pod-resources client."""

    def allocations(self) -> Allocations: ...

    def close(self) -> None: ...


class KubeletCollector:
    """Asks the kubelet at most once per ``refresh_seconds`` (the kubelet allows 100 calls a
    second, 10 in a burst, to all its clients together), once per tick in the daemon."""

    name = "kubelet"

    def __init__(
        self,
        *,
        host: str,
        client: Lister,
        attribution: PodAttribution,
        refresh_seconds: float,
        retry_seconds: float = RETRY_SECONDS,
    ) -> None:
        self._host = host
        self._client = client
        self._attribution = attribution
        self._refresh = refresh_seconds
        self._retry = retry_seconds
        self._fetched: tuple[datetime, Allocations] | None = None
        self._failed: tuple[datetime, str] | None = None

    @property
    def attribution(self) -> PodAttribution:
        """What the NVML collector labels its processes from (collectors.nvml's ``pods``)."""
        return self._attribution

    def collect(self, now: datetime) -> list[Sample]:
        try:
            allocations = self._current(now)
        except CollectError:
            self._attribution.update(None)
            raise
        self._attribution.update(allocations)
        return self._samples(allocations, now)

    def close(self) -> None:
        self._client.close()

    def _current(self, now: datetime) -> Allocations:
        if self._fetched is not None:
            at, allocations = self._fetched
            if 0 <= (now - at).total_seconds() < self._refresh:
                return allocations
        if self._failed is not None:
            at, why = self._failed
            wait = self._retry - (now - at).total_seconds()
            if 0 < wait <= self._retry:
                raise CollectError(f"{why} (asking again in {wait:.0f}s)")
        try:
            allocations = self._client.allocations()
        except CollectError as exc:
            self._fetched = None
            self._failed = (now, str(exc))
            raise
        self._failed = None
        self._fetched = (now, allocations)
        return allocations

    def _samples(self, allocations: Allocations, now: datetime) -> list[Sample]:
        out: list[Sample] = []
        for device, holders in sorted(allocations.holders.items()):
            for h in holders:
                labels = _device(device) | {
                    "host": self._host,
                    "resource": h.resource,
                    "namespace": h.namespace,
                    "pod": h.pod,
                    "container": h.container,
                }
                out.append(Sample(metric=POD_INFO, value=1.0, labels=labels, ts=now))
        for device, resource in sorted((allocations.allocatable or {}).items()):
            labels = _device(device) | {"host": self._host, "resource": resource}
            out.append(Sample(metric=ALLOCATABLE_INFO, value=1.0, labels=labels, ts=now))
        return out


def _device(uuid: str) -> dict[str, str]:
    """NVML's label for the device: a MIG instance is named by ``mig_instance``, as in the NVML
    collector's per-instance series (the kubelet does not say which GPU holds it)."""
    return {"mig_instance": uuid} if uuid.startswith("MIG-") else {"gpu_uuid": uuid}
