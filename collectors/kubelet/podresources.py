"""A client of the kubelet's PodResourcesLister (v1, gRPC over its Unix socket): per GPU, the
namespace, pod and container the kubelet handed it to.

Bounded like dcgm-exporter's client of the same API: a deadline per call and a cap on the
answer's size (16 MiB, Kubernetes' own e2e client's), so a hung or confused kubelet costs one
timeout and never the daemon's memory. Every failure is a :class:`CollectError`.

Device IDs are what the device plugin advertised. NVIDIA's k8s-device-plugin advertises GPU
UUIDs (``GPU-…``) for ``nvidia.com/gpu`` and MIG UUIDs (``MIG-…``) for ``nvidia.com/mig-<profile>``;
with time-slicing or MPS each GPU is advertised several times as ``<uuid>::<replica>``
(internal/rm/devices.go, ``NewAnnotatedID``), and a renamed shared resource is
``nvidia.com/gpu.shared``. Devices of other resources, and IDs that are not UUIDs (the plugin's
``deviceIDStrategy: index``), are left out: an index cannot be told from another node's.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

import grpc

from collectors.base import CollectError
from collectors.kubelet import api_pb2, api_pb2_grpc

MAX_MESSAGE_BYTES = 16 * 1024 * 1024
_RESOURCES = ("nvidia.com/gpu", "nvidia.com/mig-")
_UUID_PREFIXES = ("GPU-", "MIG-")
_REPLICA = "::"


@dataclass(frozen=True, slots=True, order=True)
class Holder:
    """A container the kubelet gave a device to, and the resource it asked for."""

    namespace: str
    pod: str
    container: str
    resource: str


@dataclass(frozen=True, slots=True)
class Allocations:
    """One answer of the kubelet: device UUID -> holders (several when the GPU is shared), and
    the GPU devices it can hand out (None when it does not say: GetAllocatableResources is off
    or not implemented)."""

    holders: Mapping[str, tuple[Holder, ...]]
    allocatable: Mapping[str, str] | None  # device UUID -> resource name


class PodResourcesClient:
    """List and GetAllocatableResources over ``socket_path``, each within ``timeout`` seconds."""

    def __init__(
        self, socket_path: str, timeout: float, max_message_bytes: int = MAX_MESSAGE_BYTES
    ) -> None:
        self.socket_path = socket_path
        self.timeout = timeout
        self._max = max_message_bytes
        self._channel: grpc.Channel | None = None
        self._stub: api_pb2_grpc.PodResourcesListerStub | None = None

    def allocations(self) -> Allocations:
        """The GPU devices held by containers, and those the kubelet can hand out."""
        if not os.path.exists(self.socket_path):
            # gRPC would say "failed to connect to all addresses"; this says what to mount.
            raise CollectError(f"kubelet pod-resources socket {self.socket_path} does not exist")
        stub = self._connect()
        try:
            listed = stub.List(api_pb2.ListPodResourcesRequest(), timeout=self.timeout)
        except grpc.RpcError as exc:
            raise self._error("List", exc) from exc
        try:
            answer = stub.GetAllocatableResources(
                api_pb2.AllocatableResourcesRequest(), timeout=self.timeout
            )
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.UNIMPLEMENTED:
                raise self._error("GetAllocatableResources", exc) from exc
            allocatable = None  # kubelets before 1.23, or the feature gate off
        else:
            allocatable = dict(_gpu_devices(answer.devices))
        return Allocations(holders=_holders(listed.pod_resources), allocatable=allocatable)

    def close(self) -> None:
        if self._channel is not None:
            self._channel.close()
            self._channel = None
            self._stub = None

    def _connect(self) -> api_pb2_grpc.PodResourcesListerStub:
        if self._stub is None:
            self._channel = grpc.insecure_channel(
                f"unix://{self.socket_path}",
                options=[("grpc.max_receive_message_length", self._max)],
            )
            self._stub = api_pb2_grpc.PodResourcesListerStub(self._channel)
        return self._stub

    def _error(self, name: str, exc: grpc.RpcError) -> CollectError:
        code = exc.code()
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            why = f"no answer within {self.timeout:g}s"
        elif code == grpc.StatusCode.RESOURCE_EXHAUSTED:
            why = f"answer over {self._max} bytes, or the kubelet's rate limit: {exc.details()}"
        else:
            why = f"{code.name if code else 'error'}: {exc.details()}"
        return CollectError(f"kubelet pod-resources {name} via {self.socket_path}: {why}")


def _gpu_devices(devices: Iterable[api_pb2.ContainerDevices]) -> Iterable[tuple[str, str]]:
    """(device UUID, resource) of each NVIDIA GPU or MIG device, replicas folded into one."""
    for device in devices:
        if not device.resource_name.startswith(_RESOURCES):
            continue
        for device_id in device.device_ids:
            uuid = device_id.split(_REPLICA, 1)[0]
            if uuid.startswith(_UUID_PREFIXES):
                yield uuid, device.resource_name


def _holders(pods: Iterable[api_pb2.PodResources]) -> dict[str, tuple[Holder, ...]]:
    found: dict[str, set[Holder]] = defaultdict(set)
    for pod in pods:
        if not (pod.namespace and pod.name):
            continue  # never an empty label: a pod the kubelet cannot name is unknown
        for container in pod.containers:
            if not container.name:
                continue
            for uuid, resource in _gpu_devices(container.devices):
                found[uuid].add(Holder(pod.namespace, pod.name, container.name, resource))
    return {uuid: tuple(sorted(holders)) for uuid, holders in found.items()}
