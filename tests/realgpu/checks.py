"""The real-GPU check's steps, each giving a :class:`Section` of side-by-side rows, and the
report they are written to as they come (so a failed or interrupted run leaves what it saw).

The tests call these against the real driver; ``test_selftest.py`` calls the very same ones
against the fake NVML and a scripted nvidia-smi, so this code cannot rot on machines without
a GPU.
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.realgpu import box
from tests.realgpu.compare import (
    UTILIZATION,
    Check,
    GpuReading,
    Section,
    compare_run,
    energy_checks,
    gpm_presence,
    load_checks,
    parse_collect,
    parse_probe,
    parse_smi,
)

IDLE_UTILIZATION_MAX = 0.2  # busier than this before the load: someone else uses the GPU


def _exited(section: Section, where: str, run: box.Run, what: str) -> None:
    ok = run.returncode == 0
    section.checks.append(Check("*", where, f"{what} exit code", run.returncode, 0, "= 0", ok))
    if not ok:
        section.notes.append(f"{where}: {what} said: {run.stderr.strip()[-500:]}")


def _raw(run: box.Run) -> dict[str, Any]:
    return {"argv": run.argv, "returncode": run.returncode, "stdout": run.stdout,
            "stderr": run.stderr, "started": run.started, "ended": run.ended}  # fmt: skip


def compare_with_smi(
    env: Mapping[str, str], workdir: Path, runs: int = 2, gap: float = 2.0
) -> Section:
    """``collect --once --json`` and nvidia-smi right after it, ``runs`` times ``gap`` s apart,
    compared per GPU; the energy counter across the runs."""
    section = Section("`gpuwatch collect --once --json` vs nvidia-smi", ("gpuwatch", "nvidia-smi"))
    readings: list[dict[str, GpuReading]] = []
    for i in range(1, runs + 1):
        if i > 1:
            time.sleep(gap)
        where = f"run {i}"
        collect = box.gpuwatch_collect(env, workdir / f"run{i}")
        smi = box.smi_query(env)
        section.raw[where] = {"gpuwatch": _raw(collect), "nvidia-smi": _raw(smi)}
        _exited(section, where, collect, "gpuwatch collect")
        _exited(section, where, smi, "nvidia-smi")
        gw = parse_collect(collect.stdout)
        try:
            rows = parse_smi(smi.stdout)
        except ValueError as exc:
            section.checks.append(Check("*", where, "nvidia-smi CSV", str(exc), None, "parses",
                                        False))  # fmt: skip
            continue
        section.checks += compare_run(gw, rows, where)
        readings.append(gw)
    if len(readings) >= 2:
        section.checks += energy_checks(readings[0], readings[-1])
    return section


def gpm_section(
    env: Mapping[str, str], window: float
) -> tuple[Section, dict[str, GpuReading], dict[str, bool | str]]:
    """Two rounds of the collector ``window`` s apart on the idle box: SM activity present
    exactly where the driver says GPM is supported."""
    section = Section("GPM (two collector rounds, idle)", ("gpuwatch", "driver says"))
    run = box.probe(env, window)
    section.raw["probe"] = _raw(run)
    _exited(section, "idle", run, "probe")
    readings, support = parse_probe(run.stdout)
    checks, notes = gpm_presence(readings, support)
    section.checks += checks
    section.notes += notes
    return section, readings, support


def pick_target(readings: Mapping[str, GpuReading], support: Mapping[str, bool | str]) -> str:
    """The GPU to load: the first with GPM (by NVML index), else the first."""
    order = sorted(readings, key=lambda u: int(readings[u].index or 0))
    with_gpm = [u for u in order if support.get(u) is True]
    return (with_gpm or order)[0]


def load_section(
    env: Mapping[str, str],
    target: str,
    gpm_supported: bool,
    window: float,
    start_load: Callable[[str], AbstractContextManager[str]],
) -> tuple[Section, bool]:
    """The target GPU idle, then under ``start_load``'s load, two collector rounds each; and
    whether it was idle to begin with (if not, the comparison says nothing)."""
    section = Section("A known load: NVML utilization and GPM SM activity", ("under load", "idle"))
    idle_run = box.probe(env, window)
    with start_load(target) as tool:
        busy_run = box.probe(env, window)
    section.notes.append(f"load: {tool}")
    if not gpm_supported:
        section.notes.append("GPM not supported on this GPU: SM activity not checked")
    section.raw = {"idle": _raw(idle_run), "load": _raw(busy_run), "tool": tool}
    _exited(section, "idle", idle_run, "probe")
    _exited(section, "load", busy_run, "probe")
    idle, _ = parse_probe(idle_run.stdout)
    busy, _ = parse_probe(busy_run.stdout)
    section.checks += load_checks(target, idle.get(target), busy.get(target), gpm_supported)
    before = idle[target].values.get(UTILIZATION, 0.0) if target in idle else 0.0
    if before > IDLE_UTILIZATION_MAX:
        section.notes.append(f"the GPU was not idle before the load (utilization {before:.2f})")
    return section, before <= IDLE_UTILIZATION_MAX


class Report:
    """``real-gpu.md`` and ``real-gpu.json`` in ``folder``, rewritten as each section comes."""

    def __init__(self, folder: Path, header: Mapping[str, str]) -> None:
        self.folder = folder
        self.header = dict(header)
        self.sections: list[Section] = []
        folder.mkdir(parents=True, exist_ok=True)

    def add(self, section: Section) -> None:
        self.sections.append(section)
        self.write()

    def write(self) -> None:
        lines = ["## Real GPU (make test-gpu)", ""]
        lines += [f"- {key}: {value}" for key, value in self.header.items()]
        md = "\n".join(lines) + "\n\n" + "\n".join(s.markdown() for s in self.sections)
        (self.folder / "real-gpu.md").write_text(md, encoding="utf-8")
        body = {"header": self.header, "sections": [s.as_json() for s in self.sections]}
        (self.folder / "real-gpu.json").write_text(json.dumps(body, indent=2) + "\n")


def header(env: Mapping[str, str]) -> dict[str, str]:
    """What a person pasting the report needs to know about the run."""
    library, _ = box.nvml_library(env)
    try:
        commit = subprocess.run(
            ["git", "-C", str(box.REPO), "describe", "--always", "--dirty"],
            capture_output=True, text=True, check=False,
        ).stdout.strip()  # fmt: skip
    except OSError:  # no git on the GPU box: the report says so rather than failing
        commit = ""
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "host": platform.node(),
        "gpuwatch": commit or "unknown commit",
        "python": sys.version.split()[0],
        "libnvidia-ml.so.1": str(library),
        "nvidia-smi": str(box.nvidia_smi(env)),
        "CUDA_VISIBLE_DEVICES": env.get("CUDA_VISIBLE_DEVICES", "(unset)"),
    }
