"""Fixtures running the real pynvml over the fake libnvidia-ml.so.1 (tests/fakenvml).

The library is built once per session (or taken prebuilt from $GPUWATCH_FAKE_NVML_DIR, as
``make test`` does) and preloaded by absolute path before the first nvmlInit: pynvml's own
``CDLL("libnvidia-ml.so.1")`` then finds it by soname (reference/recipes.md, method 2).
Each test writes its own "hardware" file and points $FAKE_NVML_CONFIG at it.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pynvml
import pytest

from collectors.nvml import NvmlCollector
from tests.fakenvml.build import LIB_NAME, FakeNvmlConfig, write_config


@pytest.fixture(scope="session")
def fake_nvml_library(fake_nvml_dir: Path) -> Path:
    """The fake, loaded into this process so that pynvml uses it."""
    library = fake_nvml_dir / LIB_NAME
    ctypes.CDLL(str(library))
    loaded = pynvml.nvmlLib if pynvml.nvmlLib is not None else ctypes.CDLL(LIB_NAME)
    if not hasattr(loaded, "gpuwatch_fake_nvml"):
        pytest.fail("another libnvidia-ml.so.1 was loaded before the fake; cannot test over it")
    return library


@dataclass
class FakeNvml:
    """The fake's config file for one test; ``write`` changes the "hardware" at once."""

    path: Path

    def write(self, config: FakeNvmlConfig) -> None:
        write_config(self.path, config)

    def remove(self) -> None:
        """Driver unloaded: the fake answers NVML_ERROR_DRIVER_NOT_LOADED."""
        self.path.unlink()


@pytest.fixture
def fake_nvml(fake_nvml_library: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    """No config written yet (= driver not loaded) until the test calls ``write``."""
    path = tmp_path / "fake-nvml.txt"
    monkeypatch.setenv("FAKE_NVML_CONFIG", str(path))
    return FakeNvml(path)


@pytest.fixture
def make_collector(tmp_path: Path) -> Iterator[Callable[..., NvmlCollector]]:
    """NvmlCollector factory (host "box-1", an empty proc root by default); closes them all."""
    made: list[NvmlCollector] = []
    empty_proc = tmp_path / "proc"
    empty_proc.mkdir()

    def make(*, nvml: ModuleType | None = None, proc_root: Path | None = None) -> NvmlCollector:
        collector = NvmlCollector(host="box-1", nvml=nvml, proc_root=proc_root or empty_proc)
        made.append(collector)
        return collector

    yield make
    for collector in made:
        collector.close()
