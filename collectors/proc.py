"""Which systemd unit or container a process belongs to, read from ``/proc/PID/cgroup``.

The GPU collector labels each process's memory with this, so that "who holds the GPU" reads
as ``vllm.service`` or ``docker://<id>`` rather than a bare PID.

Unit names are returned as systemd spells them (``vllm.service``, ``session-3.scope``).
Containers are returned Kubernetes-style, ``<runtime>://<full id>`` (``docker://``,
``containerd://``, ``cri-o://``, ``podman://``), which can never be mistaken for a unit name;
an id whose runtime cannot be told from the path is returned bare.

On Kubernetes the same path also names the process's pod by its UID (:func:`pod_uid_from_cgroup`),
under either cgroup driver::

    systemd   /kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod<uid_>.slice/
                  cri-containerd-<id>.scope (or crio-<id>.scope)
    cgroupfs  /kubepods/besteffort/pod<uid>/<id>

(guaranteed pods sit directly under kubepods; the systemd driver spells the UID's dashes as
underscores). collectors.kubelet turns the UID into namespace, pod and container.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

# systemd's scope for a container: docker-<id>.scope, cri-containerd-<id>.scope, ...
_CONTAINER_SCOPE = re.compile(r"^(docker|cri-containerd|crio|libpod)-([0-9a-f]{64})\.scope$")
_RUNTIMES = {
    "docker": "docker",
    "cri-containerd": "containerd",
    "crio": "cri-o",
    "libpod": "podman",
}
# cgroupfs driver: /docker/<id>, /kubepods/burstable/pod<uid>/<id>
_BARE_ID = re.compile(r"^[0-9a-f]{64}$")
# Processes live only in services and scopes; slices are just the tree around them.
_UNIT_SUFFIXES = (".service", ".scope")
# cgroup v1 as some containerd releases write it: one part "<pod slice>:<runtime>:<id>".
_COLON_SCOPE = re.compile(r"^[^:]+\.slice:(docker|cri-containerd|crio):([0-9a-f]{64})$")
# A pod's UID is a UUID; a static pod's is a 32-digit hex hash of its manifest.
_UID = r"([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32})"
# systemd driver: kubepods-pod<uid>.slice (guaranteed), kubepods-<qos>-pod<uid>.slice; kind's
# nodes nest it one level deeper, as kubelet-kubepods-<qos>-pod<uid>.slice.
_POD_SLICE = re.compile(r"^(?:kubelet-)?kubepods(?:-[a-z]+)?-pod" + _UID + r"\.slice(?::|$)")
_POD_DIR = re.compile(r"^pod" + _UID + "$")  # cgroupfs driver, under a "kubepods" folder


def unit_from_cgroup(text: str) -> str | None:
    """The systemd unit or container of a ``/proc/PID/cgroup`` text, or None when unknown.

    The innermost match wins: a container started by dockerd is ``docker://<id>``, not
    ``docker.service``; a service's own sub-cgroup (``vllm.service/worker``) is still the service.
    """
    path = _cgroup_path(text)
    if path is None:
        return None
    parts = [p for p in path.split("/") if p]
    for i in range(len(parts) - 1, -1, -1):
        found = _container(parts[i], parts[i - 1] if i else "") or _unit(parts[i])
        if found is not None:
            return found
    return None


def pod_uid_from_cgroup(text: str) -> str | None:
    """The Kubernetes pod UID (with dashes) of a ``/proc/PID/cgroup`` text, or None."""
    path = _cgroup_path(text)
    if path is None:
        return None
    parts = [p for p in path.split("/") if p]
    for i, part in enumerate(parts):
        found = _POD_SLICE.match(part)
        if found is None and "kubepods" in parts[:i]:
            found = _POD_DIR.match(part)
        if found is not None:
            return found.group(1).replace("_", "-")
    return None


@dataclass(frozen=True, slots=True)
class Origin:
    """Where a process runs: its systemd unit or container ("" when unknown) and, on
    Kubernetes, its pod's UID."""

    unit: str
    pod_uid: str | None = None


def read_origin(pid: int, proc_root: Path = Path("/proc")) -> Origin | None:
    """The unit and pod of a running ``pid``; None when it exited or cannot be read."""
    text = _read_cgroup(pid, proc_root)
    if text is None:
        return None
    return Origin(unit_from_cgroup(text) or "", pod_uid_from_cgroup(text))


def read_unit(pid: int, proc_root: Path = Path("/proc")) -> str | None:
    """The unit or container of a running ``pid``; None when it exited or cannot be read."""
    text = _read_cgroup(pid, proc_root)
    return None if text is None else unit_from_cgroup(text)


def _read_cgroup(pid: int, proc_root: Path) -> str | None:
    # A plain string path, not ``proc_root / str(pid)``: pathlib interns every part it parses,
    # and a PID nobody caches (unknown units are read again each tick) then adds an entry to
    # the interpreter's table of interned strings that is deleted when the path is dropped.
    # Deleted entries are not reused, so every few thousand of them the table (megabytes at the
    # daemon's imports) is rebuilt: at 1 s ticks with 16 such PIDs, a new copy of it beside the
    # old once an hour, a step in the daemon's peak memory.
    path = os.path.join(proc_root, str(pid), "cgroup")
    try:
        with open(path, encoding="utf-8", errors="replace") as file:
            return file.read()
    except OSError:  # exited meanwhile, hidepid, or another PID namespace
        return None


_UNKNOWN = Origin("")


class UnitCache:
    """Per-PID memo of :func:`read_origin`, so each tick reads only new processes' cgroups.

    Only PIDs seen in the previous round are kept (``retain``), which bounds the cache and
    makes a reused PID very unlikely to inherit an old answer. Unknowns are not cached: a
    process caught mid-start may be moved into its unit a moment later.
    """

    def __init__(self, proc_root: Path = Path("/proc")) -> None:
        self._proc_root = proc_root
        self._origins: dict[int, Origin] = {}

    def lookup(self, pid: int) -> str:
        """The unit or container of ``pid``; "" when unknown."""
        return self.origin(pid).unit

    def origin(self, pid: int) -> Origin:
        """The unit and pod of ``pid``; unit "" and pod None when unknown."""
        origin = self._origins.get(pid)
        if origin is None:
            origin = read_origin(pid, self._proc_root) or _UNKNOWN
            if origin.unit:
                self._origins[pid] = origin
        return origin

    def retain(self, pids: Iterable[int]) -> None:
        """Forget every PID not in ``pids`` (those still running on a GPU)."""
        keep = set(pids)
        self._origins = {pid: o for pid, o in self._origins.items() if pid in keep}


def _cgroup_path(text: str) -> str | None:
    """The path from the unified (v2) line, else the v1 ``name=systemd`` line, else any."""
    v2 = systemd = other = None
    for line in text.splitlines():
        hierarchy, sep1, rest = line.partition(":")
        controllers, sep2, path = rest.partition(":")
        if not (sep1 and sep2):
            continue
        path = path.strip().removesuffix(" (deleted)")
        if hierarchy == "0" and not controllers:
            v2 = path
        elif "name=systemd" in controllers.split(","):
            systemd = path
        elif other is None and path not in ("", "/"):
            other = path
    return v2 or systemd or other


def _container(part: str, parent: str) -> str | None:
    scope = _CONTAINER_SCOPE.match(part) or _COLON_SCOPE.match(part)
    if scope:
        return f"{_RUNTIMES[scope.group(1)]}://{scope.group(2)}"
    if _BARE_ID.match(part):
        return f"docker://{part}" if parent == "docker" else part
    return None


def _unit(part: str) -> str | None:
    return part if part.endswith(_UNIT_SUFFIXES) else None
