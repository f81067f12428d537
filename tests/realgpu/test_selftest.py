"""The real-GPU check's own code over the fake NVML and a scripted nvidia-smi, in `make test`: the
skip reasons, the side-by-side comparison (agreeing, and catching a reading that disagrees),
GPM presence and the known-load judgement, so that `make test-gpu` does not rot between the
rare runs on a GPU box. The "load" here is the fake's hardware file rewritten to a busy GPU.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.fakenvml.build import FakeGpm, FakeGpu, FakeNvmlConfig, GiB, write_config
from tests.realgpu import box, checks
from tests.realgpu.compare import MiB

UUID0 = "GPU-0a0a0a0a-1111-2222-3333-444444444444"
UUID1 = "GPU-1b1b1b1b-5555-6666-7777-888888888888"
H100 = FakeGpu(
    uuid=UUID0, util=0, used=3 * GiB, gpm=FakeGpm(sm_active=1, sm_occupancy=1, tensor=0, dram=2)
)
A100 = FakeGpu(
    uuid=UUID1, name="NVIDIA A100-SXM4-80GB", util=0, power_mw=61_250, temp_c=31, sm_mhz=1_410,
    gpm=None,
)  # fmt: skip
IDLE = FakeNvmlConfig(driver="550.54.15", gpus=(H100, A100))
BUSY = FakeNvmlConfig(
    driver="550.54.15",
    gpus=(
        dataclasses.replace(
            H100, util=100, power_mw=640_000, gpm=FakeGpm(sm_active=94, sm_occupancy=88, tensor=0)
        ),
        A100,
    ),
)


def smi_csv(config: FakeNvmlConfig, **change: str) -> str:
    """What nvidia-smi prints for the fake's GPUs with SMI_QUERY (MiB floored, W to 2 places);
    ``change`` overrides a field of GPU 0 (nvidia-smi's field name with "_" for ".")."""
    lines = []
    for index, gpu in enumerate(config.gpus):
        assert gpu.total is not None and gpu.power_mw is not None
        fields = {
            "index": str(index), "uuid": gpu.uuid, "name": gpu.name,
            "utilization.gpu": str(gpu.util), "memory.used": str(gpu.used // MiB),
            "memory.total": str(gpu.total // MiB), "power.draw": f"{gpu.power_mw / 1000:.2f}",
            "temperature.gpu": str(gpu.temp_c), "clocks.sm": str(gpu.sm_mhz),
            "driver_version": config.driver,
        }  # fmt: skip
        if index == 0:
            fields.update({k.replace("_", "."): v for k, v in change.items()})
        lines.append(", ".join(fields.values()))
    return "\n".join(lines) + "\n"


def fake_smi(folder: Path, csv: str, gpus: int) -> Path:
    """A nvidia-smi on ``folder`` answering ``-L`` with ``gpus`` GPUs and any query with ``csv``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "query.csv").write_text(csv)
    (folder / "list.txt").write_text("".join(f"GPU {i}: fake (UUID: x)\n" for i in range(gpus)))
    script = folder / "nvidia-smi"
    script.write_text(
        f'#!/bin/sh\ncase "$1" in\n  -L) cat "{folder}/list.txt" ;;\n'
        f'  *) cat "{folder}/query.csv" ;;\nesac\n'
    )
    script.chmod(0o755)
    return folder


@pytest.fixture
def hardware(tmp_path: Path) -> Path:
    return write_config(tmp_path / "hardware.txt", IDLE)


def fake_env(fake_nvml_dir: Path, hardware: Path, smi_dir: Path) -> dict[str, str]:
    env = box.base_env()
    return {
        **env,
        "PATH": f"{smi_dir}:{env.get('PATH', '')}",
        "LD_LIBRARY_PATH": str(fake_nvml_dir),
        "FAKE_NVML_CONFIG": str(hardware),
    }


def test_every_reason_to_skip_is_told(fake_nvml_dir: Path, hardware: Path, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    env = fake_env(fake_nvml_dir, hardware, fake_smi(tmp_path / "smi", smi_csv(IDLE), 2))
    no_gpus = fake_env(fake_nvml_dir, hardware, fake_smi(tmp_path / "none", "", 0))

    assert box.why_no_gpu({**env, "PATH": str(empty)}) == "no nvidia-smi on PATH"
    reason = box.why_no_gpu(env)
    assert reason is not None and "is gpuwatch's fake NVML" in reason, reason
    assert box.why_no_gpu(env, fake_ok=True) is None
    reason = box.why_no_gpu(no_gpus, fake_ok=True)
    assert reason is not None and reason.startswith("nvidia-smi lists no GPU"), reason


def test_gpuwatch_and_nvidia_smi_agree_side_by_side(
    fake_nvml_dir: Path, hardware: Path, tmp_path: Path
) -> None:
    env = fake_env(fake_nvml_dir, hardware, fake_smi(tmp_path / "smi", smi_csv(IDLE), 2))

    section = checks.compare_with_smi(env, tmp_path / "runs", runs=2, gap=0.1)
    report = checks.Report(tmp_path / "report", checks.header(env))
    report.add(section)

    assert not section.failures(), section.markdown()
    ok = {(c.gpu, c.where, c.quantity) for c in section.checks if c.ok}
    for uuid in (UUID0, UUID1):
        for run in ("run 1", "run 2"):
            for quantity in (
                "name", "index", "driver_version", "memory.total [MiB]", "memory.used [MiB]",
                "power.draw [W]", "temperature.gpu [C]", "clocks.sm [MHz]", "utilization [0-1]",
            ):  # fmt: skip
                assert (uuid, run, quantity) in ok
        assert (uuid, "run 1 -> 2", "energy [J]") in ok
    markdown = (tmp_path / "report" / "real-gpu.md").read_text()
    assert markdown.startswith("## Real GPU (make test-gpu)")
    assert (
        "| GPU-0a0a0a0a | run 1 | power.draw [W] | 65 | 65 | within 10 % or 15 W | ok |" in markdown
    )
    saved = json.loads((tmp_path / "report" / "real-gpu.json").read_text())
    assert saved["sections"][0]["raw"]["run 2"]["nvidia-smi"]["stdout"] == smi_csv(IDLE)


def test_a_reading_that_disagrees_is_caught(
    fake_nvml_dir: Path, hardware: Path, tmp_path: Path
) -> None:
    wrong = smi_csv(IDLE, temperature_gpu="40", memory_total="81918", clocks_sm="1700")
    wrong += (
        "2, GPU-only-smi-sees-it, NVIDIA H100 80GB HBM3, 0, 0, 81920, 70.00, 30, 1980, 550.54.15\n"
    )
    env = fake_env(fake_nvml_dir, hardware, fake_smi(tmp_path / "smi", wrong, 3))

    section = checks.compare_with_smi(env, tmp_path / "runs", runs=1)

    assert {(c.gpu, c.quantity) for c in section.failures()} == {
        (UUID0, "temperature.gpu [C]"),
        (UUID0, "memory.total [MiB]"),
        (UUID0, "clocks.sm [MHz]"),
        ("GPU-only-smi-sees-it", "present"),
    }


def test_gpm_presence_and_a_known_load_over_the_fake(
    fake_nvml_dir: Path, hardware: Path, tmp_path: Path
) -> None:
    env = fake_env(fake_nvml_dir, hardware, fake_smi(tmp_path / "smi", smi_csv(IDLE), 2))

    @contextmanager
    def busy(uuid: str) -> Iterator[str]:
        assert uuid == UUID0
        write_config(hardware, BUSY)
        try:
            yield "the fake's hardware file, busy"
        finally:
            write_config(hardware, IDLE)

    @contextmanager
    def nothing(uuid: str) -> Iterator[str]:
        yield "a load that never reached the GPU"

    presence, readings, support = checks.gpm_section(env, 0.1)
    target = checks.pick_target(readings, support)
    loaded, was_idle = checks.load_section(env, target, True, 0.1, busy)
    missed, _ = checks.load_section(env, target, True, 0.1, nothing)

    assert not presence.failures(), presence.markdown()
    assert support == {UUID0: True, UUID1: False}
    assert presence.notes == [
        f"NVIDIA A100-SXM4-80GB ({UUID1}): GPM not supported (GPUs before Hopper have none)"
    ]
    assert target == UUID0
    assert was_idle and not loaded.failures(), loaded.markdown()
    by_quantity = {c.quantity: (c.a, c.b) for c in loaded.checks}
    assert by_quantity["utilization_ratio"] == (1.0, 0.0)
    assert by_quantity["sm_active_ratio"] == (0.94, 0.01)
    assert {c.quantity for c in missed.failures()} == {"utilization_ratio", "sm_active_ratio"}
