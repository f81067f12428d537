"""Which serving target uses which GPU, from the per-process GPU memory of each tick.

A GPU process belongs to a target when, in this order:
1. the target's ``unit`` (systemd unit or container, as NVML's process samples name it) matches;
2. the process, or one of its ancestors, listens on the port of the target's loopback URL
   (vLLM V1's GPU worker is a child of the API server that owns the port);
3. the host serves a single target: every GPU process is that target's.
A target's ``gpus`` restricts it to those GPUs; when such a GPU shows no processes (process
listing not supported), the whole GPU is the target's. The result is one derived sample per
(GPU, target): ``gpuwatch_target_gpu_memory_bytes``, the basis of the memory-share split.

Where NVML gives every process on a GPU its SM utilization (``gpuwatch_gpu_process_utilization
_ratio``), each target on it also gets ``gpuwatch_target_gpu_sm_utilization_ratio``, the sum of
its processes' (emitted only when that sum over the GPU's targets is above 0): the cost ledger
splits the GPU by it instead of by memory. A GPU used by several targets gets
``gpuwatch_gpu_split_basis_info{basis="sm_utilization"|"memory"}`` each tick, saying which rule
split it, for the report and ``gpuwatch cost`` to tell.

On a MIG GPU each target also gets ``gpuwatch_target_mig_memory_bytes{mig_instance}`` per
instance its processes are on: what attributes the instance (agent.cost.mig) to it. A target's
``gpus`` may name MIG instances (``MIG-...``) as well as GPUs.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from urllib.parse import urlsplit

from collectors.base import Sample

METRIC = "gpuwatch_target_gpu_memory_bytes"
SM_METRIC = "gpuwatch_target_gpu_sm_utilization_ratio"
BASIS_METRIC = "gpuwatch_gpu_split_basis_info"
MIG_METRIC = "gpuwatch_target_mig_memory_bytes"
PROCESS = "gpuwatch_gpu_process_memory_bytes"
PROCESS_UTIL = "gpuwatch_gpu_process_utilization_ratio"
USED = "gpuwatch_gpu_memory_used_bytes"
LOOPBACK = ("127.0.0.1", "localhost", "::1", "0.0.0.0", "[::1]")
Gpu = tuple[str, str]  # (uuid, index)
GpuTarget = tuple[str, str, str]  # (uuid, index, target)


@dataclass(frozen=True, slots=True)
class TargetPlacement:
    """What allocation needs to know of a configured target."""

    name: str
    url: str
    unit: str | None = None
    gpus: tuple[str, ...] = ()

    @property
    def port(self) -> int | None:
        parts = urlsplit(self.url)
        if parts.hostname not in LOOPBACK:
            return None  # a remote engine: its processes are not on this host
        return parts.port or (443 if parts.scheme == "https" else 80)


@dataclass
class Allocator:
    """Turns a round's process samples into per-target GPU memory; caches pid -> target."""

    host: str
    targets: Sequence[TargetPlacement]
    proc_root: Path = Path("/proc")
    _by_pid: dict[int, str | None] = field(default_factory=dict)

    def samples(self, round_samples: Iterable[Sample], now: datetime) -> list[Sample]:
        if not self.targets:
            return []
        processes: dict[Gpu, list[Sample]] = defaultdict(list)
        util: dict[Gpu, dict[str, float]] = defaultdict(dict)
        used: dict[Gpu, float] = {}
        for s in round_samples:
            if "mig_instance" in s.labels and s.metric == USED:
                continue  # an instance's memory, not the GPU's; its processes count for the GPU
            gpu = (s.labels.get("gpu_uuid", ""), s.labels.get("gpu_index", ""))
            if s.metric == PROCESS:
                processes[gpu].append(s)
            elif s.metric == PROCESS_UTIL:
                util[gpu][s.labels.get("pid", "")] = s.value
            elif s.metric == USED:
                used[gpu] = s.value
        memory, sm = self._memory(processes, used, util)
        self._forget_exited({int(s.labels["pid"]) for ps in processes.values() for s in ps})
        return [
            *(self._sample(METRIC, value, now, key) for key, value in sorted(memory.items())),
            *(self._sample(SM_METRIC, value, now, key) for key, value in sorted(sm.items())),
            *self._bases(memory, sm, now, _mig_gpus(processes)),
            *self._mig(processes, now),
        ]

    def _mig(self, processes: Mapping[Gpu, list[Sample]], now: datetime) -> list[Sample]:
        """Per (GPU, MIG instance, target): the memory of the target's processes on it (their
        targets resolved by ``_memory`` this round)."""
        out: dict[tuple[str, str, str, str], float] = defaultdict(float)
        for gpu, samples in processes.items():
            for s in samples:
                mig = s.labels.get("mig_instance")
                target = self._by_pid.get(int(s.labels["pid"]))
                if mig and target and self._may_use(target, gpu, mig):
                    out[(*gpu, mig, target)] += s.value
        return [
            Sample(metric=MIG_METRIC, value=value, ts=now, labels={"host": self.host,
                   "gpu_uuid": uuid, "gpu_index": index, "mig_instance": mig, "target": target})
            for (uuid, index, mig, target), value in sorted(out.items())
        ]  # fmt: skip

    def _may_use(self, target: str, gpu: Gpu, mig: str) -> bool:
        return any(
            t.name == target and (not t.gpus or bool(set(t.gpus) & {*gpu, mig}))
            for t in self.targets
        )

    def _sample(self, metric: str, value: float, now: datetime, key: GpuTarget) -> Sample:
        uuid, index, target = key
        return Sample(metric=metric, value=value, ts=now, labels={
            "host": self.host, "gpu_uuid": uuid, "gpu_index": index, "target": target})  # fmt: skip

    def _bases(self, memory: Mapping[GpuTarget, float], sm: Mapping[GpuTarget, float],
               now: datetime, mig: set[Gpu]) -> list[Sample]:  # fmt: skip
        """Per GPU used by several targets: which rule splits it this tick. A MIG GPU has no
        such rule: the ledger splits it by the instances its targets are on (agent.cost.mig)."""
        targets: dict[Gpu, int] = defaultdict(int)
        for uuid, index, _ in memory:
            targets[(uuid, index)] += 1
        by_sm = {(uuid, index) for uuid, index, _ in sm}
        return [
            Sample(metric=BASIS_METRIC, value=1.0, ts=now, labels={
                "host": self.host, "gpu_uuid": uuid, "gpu_index": index,
                "basis": "sm_utilization" if (uuid, index) in by_sm else "memory"})
            for (uuid, index), count in sorted(targets.items())
            if count > 1 and (uuid, index) not in mig
        ]  # fmt: skip

    def _memory(
        self,
        processes: Mapping[Gpu, list[Sample]],
        used: Mapping[Gpu, float],
        util: Mapping[Gpu, Mapping[str, float]],
    ) -> tuple[dict[GpuTarget, float], dict[GpuTarget, float]]:
        """Per (GPU, target): memory, and summed SM utilization where every process on the GPU
        reported one and the GPU's targets' sum is above 0."""
        out: dict[GpuTarget, float] = defaultdict(float)
        sm: dict[GpuTarget, float] = {}
        for gpu in set(processes) | set(used):
            migs = {s.labels.get("mig_instance", "") for s in processes.get(gpu, [])}
            eligible = [t for t in self.targets if not t.gpus or {*gpu, *migs} & set(t.gpus)]
            reported = util.get(gpu, {})
            busy: dict[GpuTarget, float] = defaultdict(float)
            for s in processes.get(gpu, []):
                target = self._target_of(int(s.labels["pid"]), s.labels.get("unit", ""), eligible)
                if target is not None:
                    out[(*gpu, target)] += s.value
                    busy[(*gpu, target)] += reported.get(s.labels["pid"], 0.0)
            every = all(s.labels["pid"] in reported for s in processes.get(gpu, []))
            if busy and every and sum(busy.values()) > 0:
                sm.update(busy)
            if not busy and not processes.get(gpu) and gpu in used:
                for t in eligible:
                    if t.gpus:  # claimed by configuration, processes unknown: the whole GPU
                        out[(*gpu, t.name)] += used[gpu]
        return out, sm

    def _target_of(self, pid: int, unit: str, eligible: Sequence[TargetPlacement]) -> str | None:
        # Resolved once per pid against every target, then checked per GPU: a process on
        # several GPUs belongs to the same target on each (when that target may use the GPU).
        if pid not in self._by_pid:
            self._by_pid[pid] = self._resolve(pid, unit)
        target = self._by_pid[pid]
        return target if any(t.name == target for t in eligible) else None

    def _resolve(self, pid: int, unit: str) -> str | None:
        for t in self.targets:
            if t.unit and unit and t.unit == unit:
                return t.name
        ports = {t.port: t.name for t in self.targets if t.port is not None}
        if ports:
            owner = self._listening_owner(pid, ports)
            if owner is not None:
                return owner
        return self.targets[0].name if len(self.targets) == 1 else None

    def _listening_owner(self, pid: int, ports: Mapping[int, str]) -> str | None:
        inodes = listening_inodes(self.proc_root, set(ports))
        if not inodes:
            return None
        for ancestor in ancestors(self.proc_root, pid):
            for inode in socket_inodes(self.proc_root, ancestor):
                if inode in inodes:
                    return ports[inodes[inode]]
        return None

    def target_of_pid(self, pid: int) -> str | None:
        """The target this round's process ``pid`` was found to serve (agent.cost.pods)."""
        return self._by_pid.get(pid)

    def _forget_exited(self, alive: set[int]) -> None:
        for pid in [p for p in self._by_pid if p not in alive]:
            del self._by_pid[pid]


def _mig_gpus(processes: Mapping[Gpu, list[Sample]]) -> set[Gpu]:
    """The GPUs whose processes run in MIG instances."""
    return {gpu for gpu, ps in processes.items() if any("mig_instance" in s.labels for s in ps)}


def listening_inodes(proc_root: Path, ports: set[int]) -> dict[int, int]:
    """Socket inode -> port, for TCP sockets listening on one of ``ports`` (IPv4 and IPv6)."""
    out: dict[int, int] = {}
    for name in ("tcp", "tcp6"):
        try:
            lines = (proc_root / "net" / name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != "0A":  # 0A: TCP_LISTEN
                continue
            port = int(fields[1].rsplit(":", 1)[1], 16)
            if port in ports:
                out[int(fields[9])] = port
    return out


def ancestors(proc_root: Path, pid: int, depth: int = 8) -> list[int]:
    """``pid`` and its parents, nearest first, up to ``depth`` (stops at init or on error)."""
    chain = [pid]
    while len(chain) < depth:
        try:
            stat = (proc_root / str(chain[-1]) / "stat").read_text()
        except OSError:
            break
        # The command name may contain spaces and parentheses: fields follow the last ")".
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if ppid <= 1:
            break
        chain.append(ppid)
    return chain


def socket_inodes(proc_root: Path, pid: int) -> set[int]:
    fd_dir = proc_root / str(pid) / "fd"
    try:
        names = os.listdir(fd_dir)
    except OSError:  # exited, or not ours to read
        return set()
    out: set[int] = set()
    for name in names:
        try:
            link = os.readlink(fd_dir / name)
        except OSError:
            continue
        if link.startswith("socket:["):
            out.add(int(link[8:-1]))
    return out
