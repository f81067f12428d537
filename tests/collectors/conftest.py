"""Fixtures running the real pynvml over the fake libnvidia-ml.so.1 (tests/fakenvml).

The library is built once per session (or taken prebuilt from $GPUWATCH_FAKE_NVML_DIR, as
``make test`` does) and preloaded by absolute path before the first nvmlInit: pynvml's own
``CDLL("libnvidia-ml.so.1")`` then finds it by soname (reference/recipes.md, method 2).
Each test writes its own "hardware" file and points $FAKE_NVML_CONFIG at it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import pytest

from collectors.nvml import NvmlCollector


@pytest.fixture
def make_collector(tmp_path: Path) -> Iterator[Callable[..., NvmlCollector]]:
    """NvmlCollector factory (host "box-1", an empty proc root by default); closes them all."""
    made: list[NvmlCollector] = []
    empty_proc = tmp_path / "proc"
    empty_proc.mkdir()

    def make(
        *, nvml: ModuleType | None = None, proc_root: Path | None = None, gpm_pipes: bool = False
    ) -> NvmlCollector:
        collector = NvmlCollector(
            host="box-1", nvml=nvml, proc_root=proc_root or empty_proc, gpm_pipes=gpm_pipes
        )
        made.append(collector)
        return collector

    yield make
    for collector in made:
        collector.close()
