"""gpuwatch on a real NVIDIA GPU (`make test-gpu`): its NVML gauges side by side with nvidia-smi's
readings of the same GPUs, GPM present exactly where the driver supports it, and NVML
utilization and GPM SM activity moving with a known load.

Skipped, with the reason, where there is no real GPU: no nvidia-smi on PATH, the
libnvidia-ml.so.1 found is gpuwatch's fake, or nvidia-smi lists no GPU. Marked slow, so
`make test` leaves it to its own target. Every comparison is written to
``$GPUWATCH_GPU_REPORT_DIR/real-gpu.md`` (and ``.json``; a temporary folder by default, its
path printed) for BENCHMARKS.md.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from tests.realgpu import box, checks
from tests.realgpu.checks import Report
from tests.realgpu.compare import GpuReading, Section
from tests.realgpu.load import NoLoad, known_load

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

WINDOW = 2.0  # seconds between the two collector rounds a GPM reading needs

Gpm = tuple[Section, dict[str, GpuReading], dict[str, bool | str]]


@pytest.fixture(scope="module")
def env() -> dict[str, str]:
    env = box.base_env()
    reason = box.why_no_gpu(env)
    if reason is not None:
        pytest.skip(f"no real NVIDIA GPU: {reason}")
    return env


@pytest.fixture(scope="module")
def report(env: dict[str, str]) -> Iterator[Report]:
    chosen = os.environ.get("GPUWATCH_GPU_REPORT_DIR")
    folder = Path(chosen) if chosen else Path(tempfile.mkdtemp(prefix="gpuwatch-gpu-report-"))
    report = Report(folder.resolve(), checks.header(env))
    print(f"\nreal-GPU report: {report.folder / 'real-gpu.md'} (and real-gpu.json)")
    yield report
    print(f"\nreal-GPU report written: {report.folder / 'real-gpu.md'} (and real-gpu.json)")


@pytest.fixture(scope="module")
def gpm(env: dict[str, str], report: Report) -> Gpm:
    section, readings, support = checks.gpm_section(env, WINDOW)
    report.add(section)
    return section, readings, support


def _failed(section: Section) -> str:
    return "\n".join(
        f"{c.gpu} {c.where} {c.quantity}: {c.a!r} vs {c.b!r} ({c.rule})"
        for c in section.failures()
    ) + "\n" + "\n".join(section.notes)  # fmt: skip


def test_collect_once_matches_nvidia_smi(
    env: dict[str, str], report: Report, tmp_path: Path
) -> None:
    section = checks.compare_with_smi(env, tmp_path, runs=2, gap=2.0)
    report.add(section)

    assert not section.failures(), _failed(section)


def test_gpm_present_exactly_where_the_driver_supports_it(gpm: Gpm) -> None:
    section, readings, support = gpm

    assert readings, f"the probe saw no GPU: {section.raw['probe']['stderr'][-500:]}"
    assert not section.failures(), _failed(section)
    if not any(said is True for said in support.values()):
        pytest.skip(
            "GPM not supported on any GPU here (before Hopper): " + "; ".join(section.notes)
        )


def test_a_known_load_moves_utilization_and_sm_activity(
    env: dict[str, str], report: Report, gpm: Gpm, tmp_path: Path
) -> None:
    _, readings, support = gpm
    assert readings, "the probe saw no GPU"
    target = checks.pick_target(readings, support)

    def start(uuid: str) -> AbstractContextManager[str]:
        return known_load(env, uuid, tmp_path / "load")

    try:
        section, was_idle = checks.load_section(
            env, target, support.get(target) is True, WINDOW, start
        )
    except NoLoad as exc:
        report.add(Section("A known load", ("under load", "idle"), notes=[f"no load ran: {exc}"]))
        pytest.skip(f"no tool here could load the GPU: {exc}")
    report.add(section)

    if not was_idle:
        pytest.skip(f"{target} was busy before the load: " + "; ".join(section.notes))
    assert not section.failures(), _failed(section)
