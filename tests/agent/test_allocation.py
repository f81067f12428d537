"""Which target uses which GPU: by unit, by the listening port of the process or an ancestor
(read from a fake /proc laid out as the kernel prints it), or the host's single target."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent.cost.allocation import Allocator, TargetPlacement
from collectors.base import Sample

T = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
HOST = "box"
GiB = 2**30
SM = "gpuwatch_target_gpu_sm_utilization_ratio"
GPU0 = ("GPU-00000000-0000-0000-0000-00000000aaaa", "0")
GPU1 = ("GPU-00000000-0000-0000-0000-00000000bbbb", "1")
MIG = "MIG-11111111-1111-1111-1111-111111111111"

TCP_HEADER = (
    "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout "
    "inode\n"
)
TCP6_HEADER = (
    "  sl  local_address                         remote_address                        st "
    "tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
)


@dataclass
class FakeProc:
    """A /proc tree: TCP sockets, processes with parents, and their socket descriptors."""

    root: Path

    def __post_init__(self) -> None:
        (self.root / "net").mkdir(parents=True)
        (self.root / "net" / "tcp").write_text(TCP_HEADER)
        (self.root / "net" / "tcp6").write_text(TCP6_HEADER)
        self._sockets = {"tcp": 0, "tcp6": 0}

    def socket(self, port: int, inode: int, *, v6: bool = False, state: str = "0A") -> None:
        """A TCP socket on ``port`` (state 0A: LISTEN), as /proc/net/tcp{,6} prints it."""
        name = "tcp6" if v6 else "tcp"
        sl = self._sockets[name]
        self._sockets[name] += 1
        if v6:
            local = f"00000000000000000000000001000000:{port:04X}"
            remote = "00000000000000000000000000000000:0000"
        else:
            local, remote = f"0100007F:{port:04X}", "00000000:0000"
        with (self.root / "net" / name).open("a") as f:
            f.write(
                f"{sl:4d}: {local} {remote} {state} 00000000:00000000 00:00000000 00000000  "
                f"1000        0 {inode} 1 0000000000000000 100 0 0 10 0\n"
            )

    def process(self, pid: int, ppid: int, comm: str, sockets: Iterable[int] = ()) -> None:
        """``/proc/<pid>/stat`` with its parent, and ``fd/`` links to its sockets (plus the
        usual non-socket descriptors)."""
        folder = self.root / str(pid)
        (folder / "fd").mkdir(parents=True)
        (folder / "stat").write_text(
            f"{pid} ({comm}) S {ppid} {pid} {ppid} 0 -1 4194560 29155 0 0 0 27 4 0 0 20 0 "
            "12 0 4183 2166521856 106207 18446744073709551615 1 1 0 0 0 0 0 16781312 16386 "
            "0 0 0 17 3 0 0 0 0 0\n"
        )
        os.symlink("/dev/null", folder / "fd" / "0")
        os.symlink("anon_inode:[eventfd]", folder / "fd" / "1")
        for n, inode in enumerate(sockets, start=3):
            os.symlink(f"socket:[{inode}]", folder / "fd" / str(n))

    def exit(self, pid: int) -> None:
        folder = self.root / str(pid)
        for link in (folder / "fd").iterdir():
            link.unlink()
        (folder / "fd").rmdir()
        (folder / "stat").unlink()
        folder.rmdir()


@pytest.fixture
def proc(tmp_path: Path) -> FakeProc:
    return FakeProc(tmp_path / "proc")


def process(gpu: tuple[str, str], pid: int, memory: float, unit: str = "", **extra: str) -> Sample:
    """NVML's per-process sample: memory a process holds on a GPU."""
    uuid, index = gpu
    labels = {"host": HOST, "gpu_uuid": uuid, "gpu_index": index, "pid": str(pid), "unit": unit}
    return Sample(metric="gpuwatch_gpu_process_memory_bytes", value=memory, ts=T,
                  labels={**labels, **extra})  # fmt: skip


def util(gpu: tuple[str, str], pid: int, ratio: float, unit: str = "") -> Sample:
    """NVML's per-process SM utilization, where the driver gives it."""
    uuid, index = gpu
    labels = {"host": HOST, "gpu_uuid": uuid, "gpu_index": index, "pid": str(pid), "unit": unit}
    return Sample(metric="gpuwatch_gpu_process_utilization_ratio", value=ratio, ts=T,
                  labels=labels)  # fmt: skip


def bases_of(samples: Iterable[Sample]) -> dict[str, str]:
    """GPU index -> the split rule its basis sample names, for the GPUs several targets use."""
    out: dict[str, str] = {}
    for s in samples:
        if s.metric == "gpuwatch_gpu_split_basis_info":
            assert s.value == 1.0
            assert set(s.labels) == {"host", "gpu_uuid", "gpu_index", "basis"}
            out[s.labels["gpu_index"]] = s.labels["basis"]
    return out


def used(gpu: tuple[str, str], memory: float, **extra: str) -> Sample:
    uuid, index = gpu
    return Sample(metric="gpuwatch_gpu_memory_used_bytes", value=memory, ts=T,
                  labels={"host": HOST, "gpu_uuid": uuid, "gpu_index": index, **extra})  # fmt: skip


def memory_of(
    samples: Iterable[Sample], metric: str = "gpuwatch_target_gpu_memory_bytes"
) -> dict[tuple[str, str], float]:
    """(GPU index, target) -> value of the derived samples of ``metric`` (per GPU and target),
    checking their shape."""
    out: dict[tuple[str, str], float] = {}
    for s in samples:
        if s.metric in ("gpuwatch_gpu_split_basis_info", "gpuwatch_target_mig_memory_bytes"):
            continue  # per GPU, not per target: see bases_of; per MIG instance: mig_memory
        assert s.metric in ("gpuwatch_target_gpu_memory_bytes", SM)
        if s.metric != metric:
            continue
        assert s.ts == T
        assert set(s.labels) == {"host", "gpu_uuid", "gpu_index", "target"}
        assert s.labels["host"] == HOST
        assert s.labels["gpu_uuid"] == {"0": GPU0, "1": GPU1}[s.labels["gpu_index"]][0]
        out[(s.labels["gpu_index"], s.labels["target"])] = s.value
    return out


def test_a_process_is_matched_by_its_unit(proc: FakeProc) -> None:
    allocator = Allocator(HOST, [
        TargetPlacement("a", "http://127.0.0.1:8000", unit="vllm-a.service"),
        TargetPlacement("b", "http://127.0.0.1:8001", unit="sglang-b.service"),
    ], proc.root)  # fmt: skip

    got = allocator.samples(
        [
            process(GPU0, 100, 30 * GiB, "vllm-a.service"),
            process(GPU0, 200, 10 * GiB, "sglang-b.service"),
            process(GPU1, 300, 5 * GiB, "jupyter.service"),  # nobody's
            used(GPU0, 41 * GiB),
            used(GPU1, 6 * GiB),
        ],
        T,
    )

    # Two targets sharing GPU 0 each get their own memory: the basis of the memory split.
    assert memory_of(got) == {("0", "a"): 30 * GiB, ("0", "b"): 10 * GiB}
    # No per-process utilization from NVML: split by memory, and said so for the shared GPU.
    assert memory_of(got, SM) == {}
    assert bases_of(got) == {"0": "memory"}


def test_a_worker_is_matched_by_the_port_its_parent_listens_on(proc: FakeProc) -> None:
    # vLLM V1: the API server (pid 1000, under systemd) owns port 8000; its GPU worker is a
    # child whose command name has spaces and parentheses. SGLang listens on IPv6 only.
    proc.socket(8000, 51234)
    proc.socket(8000, 51299, state="01")  # an established connection on that port
    proc.socket(9000, 61234, v6=True)
    proc.socket(8000, 70000, v6=True, state="06")  # TIME_WAIT
    proc.process(1000, 1, "vllm serve", sockets=[51234])
    proc.process(1001, 1000, "VLLM: W (TP0))", sockets=[51299])
    proc.process(2000, 1, "python3", sockets=[61234])
    proc.process(3000, 1, "other", sockets=[70000])
    allocator = Allocator(HOST, [
        TargetPlacement("vllm", "http://127.0.0.1:8000/metrics"),
        TargetPlacement("sglang", "http://[::1]:9000"),
        TargetPlacement("remote", "http://10.0.0.7:8000"),  # not on this host
    ], proc.root)  # fmt: skip

    got = allocator.samples(
        [
            process(GPU0, 1001, 70 * GiB),
            process(GPU1, 2000, 40 * GiB),
            process(GPU1, 3000, 1 * GiB),  # no listening socket of ours
        ],
        T,
    )

    assert memory_of(got) == {("0", "vllm"): 70 * GiB, ("1", "sglang"): 40 * GiB}


def test_the_single_target_of_a_host_takes_every_gpu_process(proc: FakeProc) -> None:
    allocator = Allocator(HOST, [TargetPlacement("only", "http://localhost:8000")], proc.root)

    got = allocator.samples(
        [
            process(GPU0, 100, 30 * GiB, "docker-1234.scope"),
            process(GPU0, 101, 2 * GiB),  # pid not in /proc (another pid namespace)
            process(GPU1, 102, 50 * GiB),
        ],
        T,
    )

    assert memory_of(got) == {("0", "only"): 32 * GiB, ("1", "only"): 50 * GiB}


def test_a_target_restricted_to_other_gpus_does_not_take_the_process(proc: FakeProc) -> None:
    allocator = Allocator(
        HOST, [TargetPlacement("a", "http://localhost:8000", unit="a.service", gpus=("1",))],
        proc.root,
    )  # fmt: skip

    got = allocator.samples(
        [
            process(GPU0, 100, 30 * GiB, "a.service"),
            process(GPU1, 101, 20 * GiB, "a.service"),
            used(GPU0, 31 * GiB),
            used(GPU1, 21 * GiB),
        ],
        T,
    )

    assert memory_of(got) == {("1", "a"): 20 * GiB}


def test_a_gpu_claimed_in_config_without_a_process_list_is_the_targets_whole(
    proc: FakeProc,
) -> None:
    # Process listing not supported (some vGPU and container setups): only used memory.
    allocator = Allocator(HOST, [
        TargetPlacement("a", "http://localhost:8000", gpus=(GPU0[0],)),
        TargetPlacement("b", "http://localhost:8001"),  # no gpus: never claims a whole GPU
    ], proc.root)  # fmt: skip

    got = allocator.samples([used(GPU0, 75 * GiB), used(GPU1, 12 * GiB)], T)

    assert memory_of(got) == {("0", "a"): 75 * GiB}


def test_no_targets_no_allocation(proc: FakeProc) -> None:
    assert Allocator(HOST, [], proc.root).samples([process(GPU0, 1, GiB), used(GPU0, GiB)], T) == []


def test_mig_processes_count_for_their_gpu_but_an_instances_memory_does_not(
    proc: FakeProc,
) -> None:
    allocator = Allocator(HOST, [
        TargetPlacement("a", "http://localhost:8000", unit="a.service"),
        TargetPlacement("b", "http://localhost:8001", unit="b.service", gpus=("1",)),
    ], proc.root)  # fmt: skip

    got = allocator.samples(
        [
            used(GPU0, 60 * GiB),
            process(GPU0, 100, 9 * GiB, "a.service", mig_instance=MIG),
            process(GPU0, 101, 3 * GiB, "a.service", mig_instance=MIG),
            used(GPU0, 12 * GiB, mig_instance=MIG),
            used(GPU1, 40 * GiB),
            used(GPU1, 7 * GiB, mig_instance=MIG.replace("1", "2")),  # after the GPU's own
        ],
        T,
    )

    # a's processes on the instance are a's memory on the physical GPU 0; GPU 1 (claimed by b,
    # no processes listed) is b's at the GPU's used memory, not the instance's.
    assert memory_of(got) == {("0", "a"): 12 * GiB, ("1", "b"): 40 * GiB}
    # and the instance is a's: 12 GiB of a's processes on it (agent.cost.mig prices it).
    assert [(s.labels, s.value) for s in got if s.metric == "gpuwatch_target_mig_memory_bytes"] == [
        ({"host": HOST, "gpu_uuid": GPU0[0], "gpu_index": "0", "mig_instance": MIG, "target": "a"},
         12 * GiB)
    ]  # fmt: skip


def test_a_target_may_claim_a_mig_instance_by_its_uuid(proc: FakeProc) -> None:
    other = MIG.replace("1", "2")
    allocator = Allocator(HOST, [
        TargetPlacement("a", "http://localhost:8000", unit="a.service", gpus=(MIG,)),
    ], proc.root)  # fmt: skip

    got = allocator.samples(
        [
            process(GPU0, 100, 9 * GiB, "a.service", mig_instance=MIG),
            process(GPU0, 101, 3 * GiB, "a.service", mig_instance=other),
        ],
        T,
    )

    mig = {s.labels["mig_instance"]: s.value for s in got if "mig_instance" in s.labels}
    assert mig == {MIG: 9 * GiB}  # its process on another instance is not a's there


def test_the_pid_cache_forgets_exited_pids(proc: FakeProc) -> None:
    proc.socket(8000, 111)
    proc.socket(8001, 222)
    proc.process(1000, 1, "api-a", sockets=[111])
    proc.process(2000, 1, "api-b", sockets=[222])
    proc.process(500, 1000, "worker")
    allocator = Allocator(HOST, [
        TargetPlacement("a", "http://127.0.0.1:8000"),
        TargetPlacement("b", "http://127.0.0.1:8001"),
    ], proc.root)  # fmt: skip

    def round_with(pids: Iterable[int]) -> dict[tuple[str, str], float]:
        return memory_of(allocator.samples([process(GPU0, pid, GiB) for pid in pids], T))

    assert round_with([500]) == {("0", "a"): GiB}
    # Pid 500 exits and the kernel hands the number to a worker of b.
    proc.exit(500)
    proc.process(500, 2000, "worker")
    assert round_with([]) == {}
    assert round_with([500]) == {("0", "b"): GiB}


def test_a_process_first_seen_on_a_gpu_its_target_may_not_use_is_still_its_target(
    proc: FakeProc,
) -> None:
    allocator = Allocator(HOST, [
        TargetPlacement("a", "http://localhost:8000", unit="a.service", gpus=("1",)),
        TargetPlacement("b", "http://localhost:8001", unit="b.service", gpus=("0",)),
    ], proc.root)  # fmt: skip
    # a's process touches GPU 0 first (a stray CUDA context), then loads its model on GPU 1.
    first = allocator.samples([process(GPU0, 100, GiB // 2, "a.service")], T)
    assert memory_of(first) == {}

    later = allocator.samples(
        [process(GPU0, 100, GiB // 2, "a.service"), process(GPU1, 100, 30 * GiB, "a.service")],
        T,
    )

    assert memory_of(later) == {("1", "a"): 30 * GiB}


# -- per-process utilization -------------------------------------------------------------------


def shared(proc: FakeProc) -> Allocator:
    return Allocator(HOST, [
        TargetPlacement("a", "http://127.0.0.1:8000", unit="a.service"),
        TargetPlacement("b", "http://127.0.0.1:8001", unit="b.service"),
    ], proc.root)  # fmt: skip


def test_a_shared_gpu_whose_processes_all_report_utilization_is_split_by_it(
    proc: FakeProc,
) -> None:
    got = shared(proc).samples(
        [
            process(GPU0, 100, 30 * GiB, "a.service"),
            process(GPU0, 101, 5 * GiB, "a.service"),  # a's second worker
            process(GPU0, 200, 10 * GiB, "b.service"),
            util(GPU0, 100, 0.4, "a.service"),
            util(GPU0, 101, 0.3, "a.service"),
            util(GPU0, 200, 0.1, "b.service"),
            process(GPU1, 300, 20 * GiB, "a.service"),  # a alone on GPU 1
            util(GPU1, 300, 0.9, "a.service"),
        ],
        T,
    )

    assert memory_of(got) == {("0", "a"): 35 * GiB, ("0", "b"): 10 * GiB, ("1", "a"): 20 * GiB}
    sm = memory_of(got, SM)
    assert sm == {("0", "a"): pytest.approx(0.7), ("0", "b"): 0.1, ("1", "a"): 0.9}
    assert bases_of(got) == {"0": "sm_utilization"}  # GPU 1 is not shared: nothing to say


def test_one_process_without_utilization_makes_the_gpu_split_by_memory(proc: FakeProc) -> None:
    got = shared(proc).samples(
        [
            process(GPU0, 100, 30 * GiB, "a.service"),
            process(GPU0, 200, 10 * GiB, "b.service"),
            process(GPU0, 900, 1 * GiB, "jupyter.service"),  # nobody's, and no sample
            util(GPU0, 100, 0.7, "a.service"),
            util(GPU0, 200, 0.1, "b.service"),
        ],
        T,
    )

    assert memory_of(got, SM) == {}
    assert bases_of(got) == {"0": "memory"}


def test_targets_all_idle_are_split_by_memory_not_by_zero(proc: FakeProc) -> None:
    got = shared(proc).samples(
        [
            process(GPU0, 100, 30 * GiB, "a.service"),
            process(GPU0, 200, 10 * GiB, "b.service"),
            util(GPU0, 100, 0.0, "a.service"),
            util(GPU0, 200, 0.0, "b.service"),
        ],
        T,
    )

    assert memory_of(got, SM) == {}
    assert bases_of(got) == {"0": "memory"}
