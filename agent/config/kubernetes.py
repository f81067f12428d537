"""The ``[kubernetes]`` section: which pod, namespace and container holds each GPU and process.

    [kubernetes]
    enabled = "auto"          # "auto" (on when the socket exists), true or false
    pod_resources_socket = "/var/lib/kubelet/pod-resources/kubelet.sock"
    pod_logs_dir = "/var/log/pods"   # pod UID -> namespace and name, for shared GPUs
    timeout = "2s"            # per call to the kubelet

``enabled = true`` with no socket is not a configuration problem (check-config runs offline,
often on another machine): the collector then reports itself failed each tick, which is what a
user who asked for it wants to see. See docs/kubernetes-pods.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent.config.reader import Reader, shown

SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
POD_LOGS = "/var/log/pods"
# The kubelet answers from memory in milliseconds; dcgm-exporter allows 10 s. Past 30 s a hung
# kubelet would hold the tick (the collector runs before NVML's, in the tick's thread).
DEFAULT_TIMEOUT = 2.0
MAX_TIMEOUT = 30.0


@dataclass(frozen=True, slots=True)
class KubernetesConfig:
    """``enabled`` None is "auto": on when ``pod_resources_socket`` exists at start."""

    enabled: bool | None = None
    pod_resources_socket: str = SOCKET
    pod_logs_dir: str = POD_LOGS
    timeout_seconds: float = DEFAULT_TIMEOUT

    def active(self) -> bool:
        """Whether to run the kubelet collector on this machine, now."""
        if self.enabled is None:
            try:
                return Path(self.pod_resources_socket).is_socket()
            except OSError:
                # The kubelet's folder is root's, 0750: a non-root daemon cannot even look.
                # "auto" then means off, as without a kubelet; enabled = true says so loudly.
                return False
        return self.enabled


def parse_kubernetes(r: Reader, top: dict[str, Any]) -> KubernetesConfig:
    t = r.sub(top, "kubernetes", {"enabled", "pod_resources_socket", "pod_logs_dir", "timeout"})
    return KubernetesConfig(
        enabled=_enabled(r, t),
        pod_resources_socket=_path(r, t, "kubernetes.pod_resources_socket", SOCKET),
        pod_logs_dir=_path(r, t, "kubernetes.pod_logs_dir", POD_LOGS),
        timeout_seconds=r.duration(t, "kubernetes.timeout", DEFAULT_TIMEOUT, maximum=MAX_TIMEOUT),
    )


def _enabled(r: Reader, t: dict[str, Any]) -> bool | None:
    key = "kubernetes.enabled"
    value = t.get(key, "auto")
    if isinstance(value, bool):
        return value
    if value != "auto":
        r.problem(key, f'expected "auto", true or false, got {shown(value)}')
    return None


def _path(r: Reader, t: dict[str, Any], key: str, default: str) -> str:
    value = r.string(t, key, default)
    if not value.startswith("/"):
        r.problem(key, f"expected an absolute path, got {shown(value)}")
        return default
    return value
