"""A real gRPC server speaking the kubelet's pod-resources v1 API on a Unix socket.

It serves the generated servicer (collectors/kubelet/api_pb2_grpc.py), so the client under test
goes through real gRPC framing, HTTP/2 and protobuf decoding. Knobs for the failures a kubelet
shows: an answer that never comes (``hang``), bytes that are not the message (``garbage``),
and GetAllocatableResources missing (``allocatable=None``: UNIMPLEMENTED, as before 1.23).
"""

from __future__ import annotations

import tempfile
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from collectors.kubelet import api_pb2, api_pb2_grpc

GPU_A = "GPU-0a0a0a0a-1111-2222-3333-444444444444"
GPU_B = "GPU-0b0b0b0b-5555-6666-7777-888888888888"
MIG_A = "MIG-5c5c5c5c-0000-1111-2222-333333333333"


def devices(resource: str, *ids: str) -> api_pb2.ContainerDevices:
    return api_pb2.ContainerDevices(resource_name=resource, device_ids=list(ids))


def container(name: str, *devs: api_pb2.ContainerDevices) -> api_pb2.ContainerResources:
    return api_pb2.ContainerResources(name=name, devices=list(devs))


def pod(namespace: str, name: str, *containers: api_pb2.ContainerResources) -> Any:
    return api_pb2.PodResources(namespace=namespace, name=name, containers=list(containers))


@dataclass
class FakeKubelet(api_pb2_grpc.PodResourcesListerServicer):
    """What the server answers; change the fields between calls."""

    pods: Sequence[api_pb2.PodResources] = ()
    allocatable: Sequence[api_pb2.ContainerDevices] | None = ()
    hang: bool = False
    calls: Counter[str] = field(default_factory=Counter)
    release: threading.Event = field(default_factory=threading.Event)

    def List(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.calls["List"] += 1
        if self.hang:
            self.release.wait(timeout=30)
        return api_pb2.ListPodResourcesResponse(pod_resources=list(self.pods))

    def GetAllocatableResources(self, request: Any, context: grpc.ServicerContext) -> Any:
        self.calls["GetAllocatableResources"] += 1
        if self.allocatable is None:
            return super().GetAllocatableResources(request, context)  # UNIMPLEMENTED
        return api_pb2.AllocatableResourcesResponse(devices=list(self.allocatable))


@contextmanager
def short_socket_dir() -> Iterator[Path]:
    """A folder under /tmp: a Unix socket's path must fit in 108 bytes, pytest's tmp_path may
    not."""
    with tempfile.TemporaryDirectory(prefix="gw-kubelet-", dir="/tmp") as folder:
        yield Path(folder)


@contextmanager
def serve(socket: Path, kubelet: FakeKubelet) -> Iterator[FakeKubelet]:
    server = grpc.server(ThreadPoolExecutor(max_workers=4))
    api_pb2_grpc.add_PodResourcesListerServicer_to_server(kubelet, server)
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    try:
        yield kubelet
    finally:
        kubelet.release.set()
        server.stop(grace=None)


@contextmanager
def serve_garbage(socket: Path) -> Iterator[None]:
    """A server whose List answers bytes that do not decode as ListPodResourcesResponse."""

    def answer(request: bytes, context: grpc.ServicerContext) -> bytes:
        return b"\xff\xff\xff\xff not a protobuf"

    handler = grpc.method_handlers_generic_handler(
        "v1.PodResourcesLister", {"List": grpc.unary_unary_rpc_method_handler(answer)}
    )
    server = grpc.server(ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((handler,))
    server.add_insecure_port(f"unix://{socket}")
    server.start()
    try:
        yield
    finally:
        server.stop(grace=None)
