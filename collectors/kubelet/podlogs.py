"""Pod UID -> namespace and pod name, from the kubelet's pod log folders.

The pod-resources API names pods but not their UIDs, and a process's cgroup names its pod's UID
but not the pod. The kubelet keeps one log folder per pod named
``<namespace>_<pod name>_<pod UID>`` under ``/var/log/pods`` (kubernetes/kubernetes,
pkg/kubelet/kuberuntime/helpers.go, ``BuildPodLogsDirectory``; log shippers such as Fluent Bit
and Promtail read the same names). Namespaces and pod names are DNS labels and subdomains, which
have no underscore, so the split is exact. Listing that folder (mounted read-only) is what ties
a shared GPU's processes to their pods; without it they stay unattributed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

# A node runs at most a few hundred pods (110 by default); past this the folder is not the
# kubelet's and reading it would cost memory for nothing.
MAX_ENTRIES = 10_000


@dataclass(frozen=True, slots=True)
class PodName:
    namespace: str
    pod: str


class PodLogNames:
    """Reads the folder's names again only when asked about a UID it has not seen, and at most
    once per ``refresh`` call (once per tick), so a UID without a folder costs no rescan loop."""

    def __init__(self, root: str) -> None:
        self._root = root
        self._names: dict[str, PodName] = {}
        self._scanned = False

    def refresh(self) -> None:
        """A new round: the next unknown UID may rescan the folder."""
        self._scanned = False

    def lookup(self, uid: str) -> PodName | None:
        name = self._names.get(uid)
        if name is None and not self._scanned:
            self._scanned = True
            self._names = _scan(self._root)
            name = self._names.get(uid)
        return name


def _scan(root: str) -> dict[str, PodName]:
    names: dict[str, PodName] = {}
    try:
        with os.scandir(root) as entries:
            for i, entry in enumerate(entries):
                if i >= MAX_ENTRIES:
                    break
                parts = entry.name.split("_")
                if len(parts) == 3 and all(parts):
                    names[parts[2]] = PodName(parts[0], parts[1])
    except OSError:  # not mounted, or not readable: shared GPUs stay unattributed
        return {}
    return names
