"""Compiling the fake ``libnvidia-ml.so.1`` (fakenvml.c) against the real nvml.h.

The header comes from PyPI ``nvidia-nvml-dev``; the compiler is ``$CC`` or gcc. The tests build
it into build/fakenvml (tests/fakenvml/build.py), ``gpuwatch demo`` into its state folder.
"""

from __future__ import annotations

import os
import subprocess
import sysconfig
from pathlib import Path

SOURCE = Path(__file__).with_name("fakenvml.c")
LIB_NAME = "libnvidia-ml.so.1"
OLD_DRIVER_DIR = "old-driver"
# The string the fake exports; lets a test tell it from a real driver's library.
MARKER = b"gpuwatch fake libnvidia-ml"


def find_header_dir() -> Path:
    """The include folder of nvml.h from PyPI ``nvidia-nvml-dev`` (``nvidia/cu*/include``)."""
    purelib = Path(sysconfig.get_paths()["purelib"])
    found = sorted(purelib.glob("nvidia/*/include/nvml.h"))
    if not found:
        raise FileNotFoundError(f"nvml.h not found under {purelib}; pip install nvidia-nvml-dev")
    return found[-1].parent


def build(out_dir: Path, *, old_driver: bool = False) -> Path:
    """Compile the fake into ``out_dir/libnvidia-ml.so.1`` and return that path.

    ``old_driver`` leaves out the newer symbols (see fakenvml.c). The soname matters: pynvml's
    ``CDLL("libnvidia-ml.so.1")`` reuses an already loaded library only when the sonames match.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / LIB_NAME
    tmp = out_dir / f".{LIB_NAME}.{os.getpid()}.tmp"
    command = [
        os.environ.get("CC", "gcc"), "-shared", "-fPIC", "-O2", "-Wall", "-Wextra",
        f"-I{find_header_dir()}", f"-Wl,-soname,{LIB_NAME}", "-o", str(tmp), str(SOURCE),
    ]  # fmt: skip
    if old_driver:
        command.insert(1, "-DGPUWATCH_FAKE_OLD_DRIVER")
    subprocess.run(command, check=True)
    tmp.replace(target)  # atomic: a process loading the old file never sees half a new one
    return target


def build_all(out_dir: Path) -> tuple[Path, Path]:
    """The current-driver fake in ``out_dir``, the old-driver one in ``out_dir/old-driver``."""
    return build(out_dir), build(out_dir / OLD_DRIVER_DIR, old_driver=True)


def is_fake(library: Path) -> bool:
    """True when ``library`` is this fake rather than a real driver's libnvidia-ml."""
    try:
        return MARKER in library.read_bytes()
    except OSError:
        return False
