"""A known load on one GPU, from whatever this box has, tried in order: PyTorch (a half-precision
matmul loop), CuPy (the same), a tiny CUDA C program compiled with nvcc (FMA loops on every SM,
``fma_load.cu``). A GPU box without internet may lack torch; it rarely lacks all three.

Each tool runs in a process of its own, pinned to the GPU by UUID (CUDA's own ordering need not
be NVML's), and says "ready" once its first batch of work has finished; the load ends when
the test leaves the ``with`` block, or by itself after ``seconds`` whatever happens.
"""

from __future__ import annotations

import os
import select
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

CUDA_SOURCE = Path(__file__).with_name("fma_load.cu")

_TORCH = """
import sys, time
import torch
assert torch.cuda.is_available(), "torch sees no CUDA device"
a = torch.randn(8192, 8192, device="cuda", dtype=torch.float16)
b = torch.randn_like(a)
end, said = time.monotonic() + float(sys.argv[1]), False
while time.monotonic() < end:
    for _ in range(8):
        c = a @ b
    torch.cuda.synchronize()
    if not said:
        print("ready: torch", torch.__version__, "fp16 matmul on", torch.cuda.get_device_name(0),
              flush=True)
        said = True
"""

_CUPY = """
import sys, time
import cupy
a = cupy.random.random((8192, 8192), dtype=cupy.float32).astype(cupy.float16)
b = cupy.random.random((8192, 8192), dtype=cupy.float32).astype(cupy.float16)
end, said = time.monotonic() + float(sys.argv[1]), False
while time.monotonic() < end:
    for _ in range(8):
        c = a @ b
    cupy.cuda.Device().synchronize()
    if not said:
        print("ready: cupy", cupy.__version__, "fp16 matmul", flush=True)
        said = True
"""


class NoLoad(Exception):
    """No tool here could put a load on the GPU; the message says why for each one tried."""


def _pythons(env: Mapping[str, str]) -> list[str]:
    """This virtualenv's Python, then the system's: torch is often installed there only."""
    found = [sys.executable, shutil.which("python3", path=env.get("PATH", os.defpath))]
    unique: list[str] = []
    for python in found:
        if python and os.path.realpath(python) not in map(os.path.realpath, unique):
            unique.append(python)
    return unique


def _nvcc(env: Mapping[str, str]) -> str | None:
    on_path = shutil.which("nvcc", path=env.get("PATH", os.defpath))
    if on_path:
        return on_path
    usual = Path("/usr/local/cuda/bin/nvcc")  # the toolkit's own place, often not on PATH
    return str(usual) if usual.exists() else None


def compile_fma_load(nvcc: str, workdir: Path) -> Path | str:
    """``fma_load.cu`` built for the GPUs present (``-arch=native``), else for nvcc's default
    architecture with PTX the driver compiles; the binary, or nvcc's complaint."""
    workdir.mkdir(parents=True, exist_ok=True)
    binary = workdir / "fma_load"
    complaints = []
    for arch in (["-arch=native"], []):
        done = subprocess.run(
            [nvcc, "-O3", *arch, "-o", str(binary), str(CUDA_SOURCE)],
            capture_output=True, text=True, timeout=300, check=False,
        )  # fmt: skip
        if done.returncode == 0:
            return binary
        complaints.append(" ".join(arch or ["default arch"]) + ": " + _last(done.stderr))
    return "; ".join(complaints)


def _tools(
    env: Mapping[str, str], workdir: Path
) -> Iterator[tuple[str, Callable[[], list[str] | str]]]:
    """Each tool in the order tried, with what gives its command line (or why there is none)."""

    def script(python: str, code: str) -> Callable[[], list[str] | str]:
        return lambda: [python, "-c", code]

    for python in _pythons(env):
        yield f"torch ({python})", script(python, _TORCH)
    for python in _pythons(env):
        yield f"cupy ({python})", script(python, _CUPY)
    nvcc = _nvcc(env)
    if nvcc is None:
        yield "nvcc", lambda: "no nvcc on PATH or in /usr/local/cuda/bin"
        return

    def build() -> list[str] | str:  # compiled only when torch and cupy did not run
        built = compile_fma_load(nvcc, workdir)
        return [str(built)] if isinstance(built, Path) else f"did not compile: {built}"

    yield f"nvcc ({nvcc})", build


def _last(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(no output)"


def _wait_ready(process: subprocess.Popen[str], timeout: float) -> tuple[str | None, str]:
    """The process's "ready" line, or None and why it never came."""
    assert process.stdout is not None and process.stderr is not None
    deadline = time.monotonic() + timeout
    while (left := deadline - time.monotonic()) > 0:
        readable, _, _ = select.select([process.stdout], [], [], left)
        if not readable:
            break
        line = process.stdout.readline()
        if not line:  # the tool ended before it was ready: its last word says why
            process.wait(timeout=10)
            return None, f"exit {process.returncode}: {_last(process.stderr.read())}"
        if line.startswith("ready"):
            return line.strip(), ""
    return None, f"not ready within {timeout:.0f} s"


def _stop(process: subprocess.Popen[str]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)
    for stream in (process.stdout, process.stderr):
        if stream is not None:
            stream.close()


@contextmanager
def known_load(
    env: Mapping[str, str], gpu_uuid: str, workdir: Path, seconds: float = 60.0,
    ready_timeout: float = 60.0,
) -> Iterator[str]:  # fmt: skip
    """Runs the first tool that works on GPU ``gpu_uuid`` while the block runs; yields what
    runs ("torch 2.x fp16 matmul on ..."). NoLoad when none does, naming each one's reason."""
    pinned = {**env, "CUDA_VISIBLE_DEVICES": gpu_uuid, "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    tried: list[str] = []
    for tool, argv_of in _tools(env, workdir):
        argv = argv_of()
        if isinstance(argv, str):
            tried.append(f"{tool}: {argv}")
            continue
        process = subprocess.Popen(
            [*argv, str(seconds)], env=pinned, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True,
        )  # fmt: skip
        try:
            said, why = _wait_ready(process, ready_timeout)
            if said is None:
                tried.append(f"{tool}: {why}")
                continue
            yield f"{tool}: {said}"
            return
        finally:
            _stop(process)
    raise NoLoad("; ".join(tried))
