"""PID -> systemd unit or container, from real-world /proc/PID/cgroup texts."""

from __future__ import annotations

import os
import tracemalloc
from pathlib import Path

import pytest

from collectors.proc import UnitCache, read_unit, unit_from_cgroup

CID = "0123456789abcdef" * 4  # a 64-hex container id


@pytest.mark.parametrize(
    ("text", "unit"),
    [
        pytest.param("0::/system.slice/vllm.service\n", "vllm.service", id="v2-service"),
        pytest.param(
            "0::/system.slice/vllm.service/worker\n", "vllm.service", id="service-subcgroup"
        ),
        pytest.param(
            "0::/user.slice/user-1000.slice/user@1000.service/app.slice/comfyui.service\n",
            "comfyui.service",
            id="user-service",
        ),
        pytest.param(
            "0::/user.slice/user-1000.slice/session-3.scope\n", "session-3.scope", id="login-shell"
        ),
        pytest.param(
            f"0::/system.slice/docker-{CID}.scope\n", f"docker://{CID}", id="docker-systemd"
        ),
        pytest.param(f"0::/docker/{CID}\n", f"docker://{CID}", id="docker-cgroupfs"),
        pytest.param(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod1a2b.slice/"
            f"cri-containerd-{CID}.scope\n",
            f"containerd://{CID}",
            id="kubernetes-containerd",
        ),
        pytest.param(
            f"0::/kubepods.slice/kubepods-pod1a2b.slice/crio-{CID}.scope\n",
            f"cri-o://{CID}",
            id="kubernetes-crio",
        ),
        pytest.param(f"0::/kubepods/burstable/pod1a2b/{CID}\n", CID, id="kubernetes-cgroupfs"),
        pytest.param(
            f"0::/machine.slice/libpod-{CID}.scope/container\n", f"podman://{CID}", id="podman"
        ),
        pytest.param(
            "12:pids:/system.slice/vllm.service\n"
            "5:cpu,cpuacct:/system.slice/vllm.service\n"
            "1:name=systemd:/system.slice/vllm.service\n",
            "vllm.service",
            id="cgroup-v1",
        ),
        pytest.param(
            "1:name=systemd:/system.slice/tgi.service\n0::/system.slice/tgi.service\n",
            "tgi.service",
            id="hybrid",
        ),
        pytest.param("0::/system.slice/gone.service (deleted)\n", "gone.service", id="deleted"),
        pytest.param("0::/\n", None, id="container-own-namespace"),
        pytest.param("0::/init.scope\n", "init.scope", id="pid-1"),
        pytest.param("0::/system.slice\n", None, id="slice-only"),
        pytest.param("", None, id="empty"),
        pytest.param("garbage\n", None, id="garbage"),
    ],
)
def test_unit_from_cgroup(text: str, unit: str | None) -> None:
    assert unit_from_cgroup(text) == unit


def _write_cgroup(proc: Path, pid: int, text: str) -> None:
    (proc / str(pid)).mkdir(parents=True, exist_ok=True)
    (proc / str(pid) / "cgroup").write_text(text)


def test_read_unit_of_a_running_and_of_an_exited_process(tmp_path: Path) -> None:
    _write_cgroup(tmp_path, 1234, "0::/system.slice/vllm.service\n")

    assert read_unit(1234, tmp_path) == "vllm.service"
    assert read_unit(999, tmp_path) is None  # exited: no /proc/999


def test_unit_cache_reads_once_and_forgets_processes_gone_from_the_gpu(tmp_path: Path) -> None:
    cache = UnitCache(tmp_path)
    _write_cgroup(tmp_path, 1234, "0::/system.slice/vllm.service\n")
    assert cache.lookup(1234) == "vllm.service"

    _write_cgroup(tmp_path, 1234, "0::/system.slice/other.service\n")
    assert cache.lookup(1234) == "vllm.service"  # cached while the PID keeps running

    cache.retain([])  # the process left the GPU; a new one may reuse its PID
    assert cache.lookup(1234) == "other.service"


def test_unit_cache_does_not_remember_unknowns(tmp_path: Path) -> None:
    cache = UnitCache(tmp_path)
    assert cache.lookup(4242) == ""

    _write_cgroup(tmp_path, 4242, "0::/system.slice/late.service\n")
    assert cache.lookup(4242) == "late.service"


def test_real_proc_of_this_process_reads_without_error() -> None:
    unit = read_unit(os.getpid())
    assert unit is None or isinstance(unit, str)


def test_unknown_pids_read_every_tick_never_rebuild_the_interned_strings_table(
    tmp_path: Path,
) -> None:
    """A PID whose unit is unknown is read again each tick. Through pathlib each read put the
    PID into the interpreter's table of interned strings and took it out again; the table
    does not reuse such slots, so every few thousand reads it was rebuilt, a new copy beside
    the old (1.9 MB at the daemon's imports; hourly at 1 s ticks with 16 such PIDs)."""
    reads = 200_000  # more than any such table this process can have has room for
    tracemalloc.start()
    try:
        largest = 0
        for _ in range(reads // 16):
            tracemalloc.reset_peak()
            before = tracemalloc.get_traced_memory()[0]
            for pid in range(1000, 1016):
                assert read_unit(pid, tmp_path) is None
            largest = max(largest, tracemalloc.get_traced_memory()[1] - before)
    finally:
        tracemalloc.stop()
    assert largest < 64 * 1024, f"a tick of reads allocated {largest} bytes at its peak"
