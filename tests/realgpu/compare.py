"""Pure comparison of gpuwatch's per-GPU gauges with nvidia-smi's CSV, and of two readings of
gpuwatch (idle, under load), as rows a person can read side by side: no subprocess here.

The tolerances say how far two honest readings of the same GPU a second apart may drift:
memory total is a hardware fact (exact to nvidia-smi's MiB), memory used moves only with
allocations (1 % of the total), power, temperature and the SM clock move on their own.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

MiB = 1024**2
SMI_FIELDS = (
    "index", "uuid", "name", "utilization.gpu", "memory.used", "memory.total", "power.draw",
    "temperature.gpu", "clocks.sm", "driver_version",
)  # fmt: skip
SMI_QUERY = ("--query-gpu=" + ",".join(SMI_FIELDS), "--format=csv,noheader,nounits")
# What nvidia-smi prints where a field has no value (a MIG-enabled GPU's utilization, a board
# without a power sensor).
_NO_VALUE = frozenset({"", "N/A", "[N/A]", "Not Supported", "[Not Supported]", "[Unknown Error]"})

UTILIZATION = "gpuwatch_gpu_utilization_ratio"
MEMORY_USED = "gpuwatch_gpu_memory_used_bytes"
MEMORY_TOTAL = "gpuwatch_gpu_memory_total_bytes"
POWER = "gpuwatch_gpu_power_watts"
TEMPERATURE = "gpuwatch_gpu_temperature_celsius"
ENERGY = "gpuwatch_gpu_energy_joules_total"
SM_CLOCK = "gpuwatch_gpu_sm_clock_hertz"
SM_ACTIVE = "gpuwatch_gpu_sm_active_ratio"
GPM_METRICS = (
    SM_ACTIVE,
    "gpuwatch_gpu_sm_occupancy_ratio",
    "gpuwatch_gpu_tensor_active_ratio",
    "gpuwatch_gpu_dram_active_ratio",
)
WATCHED = frozenset(
    {UTILIZATION, MEMORY_USED, MEMORY_TOTAL, POWER, TEMPERATURE, ENERGY, SM_CLOCK, *GPM_METRICS}
)
# A known load must lift these clearly above idle (0-1 ratios), not just a little.
LOAD_MARGIN = 0.3


@dataclass
class GpuReading:
    """One GPU (not a MIG instance) as one round of gpuwatch's NVML collector saw it."""

    uuid: str
    index: str
    name: str | None = None
    driver: str | None = None
    values: dict[str, float] = field(default_factory=dict)  # watched metric -> base-unit value
    ts: str | None = None  # the round's timestamp, ISO 8601


def parse_collect(text: str) -> dict[str, GpuReading]:
    """Per GPU UUID, from ``gpuwatch collect --once --json`` lines (other collectors', MIG
    instances' and per-process series left out: they are not what nvidia-smi's row says)."""
    out: dict[str, GpuReading] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        obj = json.loads(line)
        labels = obj.get("labels") or {}
        uuid = labels.get("gpu_uuid")
        if obj.get("collector") != "nvml" or uuid is None or "mig_instance" in labels:
            continue
        reading = out.setdefault(uuid, GpuReading(uuid, labels.get("gpu_index", "")))
        metric, value = obj["metric"], obj.get("value")
        if metric == "gpuwatch_gpu_info":
            reading.name, reading.driver = labels.get("gpu_name"), labels.get("driver_version")
        elif metric in WATCHED and value is not None:
            reading.values[metric] = float(value)
            reading.ts = obj.get("ts")
    return out


@dataclass(frozen=True)
class SmiRow:
    """One GPU's line of ``nvidia-smi --query-gpu=...``; None where it printed no value."""

    fields: dict[str, str | None]

    def text(self, name: str) -> str | None:
        return self.fields.get(name)

    def number(self, name: str) -> float | None:
        raw = self.fields.get(name)
        return None if raw is None else float(raw)


def parse_smi(text: str) -> dict[str, SmiRow]:
    """Per GPU UUID, from ``nvidia-smi`` run with :data:`SMI_QUERY`."""
    out: dict[str, SmiRow] = {}
    for row in csv.reader(io.StringIO(text), skipinitialspace=True):
        if not row or not "".join(row).strip():
            continue
        if len(row) != len(SMI_FIELDS):
            raise ValueError(f"nvidia-smi printed {len(row)} fields, expected {len(SMI_FIELDS)}")
        values = [None if v.strip() in _NO_VALUE else v.strip() for v in row]
        smi = SmiRow(dict(zip(SMI_FIELDS, values, strict=True)))
        uuid = smi.text("uuid")
        if uuid is None:
            raise ValueError(f"nvidia-smi row without a UUID: {row}")
        out[uuid] = smi
    return out


@dataclass(frozen=True)
class Check:
    """One quantity of one GPU, two readings side by side. ``ok`` None: not comparable here
    (the reference has no value) or only recorded."""

    gpu: str  # UUID
    where: str  # "run 1", "idle -> load", ...
    quantity: str
    a: float | str | None
    b: float | str | None
    rule: str
    ok: bool | None


def _numeric(
    gpu: str, where: str, quantity: str, ours: float | None, theirs: float | None,
    tolerance: float, rule: str,
) -> Check:  # fmt: skip
    if theirs is None:
        ok = None  # the driver's own tool gave nothing to compare with
    elif ours is None:
        ok = False  # nvidia-smi has it and gpuwatch does not: a missing signal
    else:
        ok = abs(ours - theirs) <= tolerance
    return Check(gpu, where, quantity, ours, theirs, rule, ok)


def _scaled(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


def compare_gpu(uuid: str, gw: GpuReading | None, smi: SmiRow | None, where: str) -> list[Check]:
    """gpuwatch's reading of one GPU against nvidia-smi's row for it, in nvidia-smi's units."""
    if gw is None or smi is None:
        return [Check(uuid, where, "present", gw is not None, smi is not None, "both", False)]
    checks = [
        Check(uuid, where, "name", gw.name, smi.text("name"), "identical",
              gw.name == smi.text("name")),
        Check(uuid, where, "index", gw.index, smi.text("index"), "identical",
              gw.index == smi.text("index")),
        Check(uuid, where, "driver_version", gw.driver, smi.text("driver_version"), "identical",
              gw.driver == smi.text("driver_version")),
    ]  # fmt: skip
    v = gw.values
    total, power = smi.number("memory.total") or 0.0, smi.number("power.draw") or 0.0
    clock = smi.number("clocks.sm") or 0.0
    # quantity, gpuwatch's value in nvidia-smi's unit, nvidia-smi's field, tolerance, the rule
    numeric = (
        ("memory.total [MiB]", _scaled(v.get(MEMORY_TOTAL), 1 / MiB), "memory.total", 1.0,
         "exact to the MiB"),
        ("memory.used [MiB]", _scaled(v.get(MEMORY_USED), 1 / MiB), "memory.used",
         max(0.01 * total, 1.0), "within 1 % of the total"),
        ("power.draw [W]", v.get(POWER), "power.draw", max(0.10 * power, 15.0),
         "within 10 % or 15 W"),
        ("temperature.gpu [C]", v.get(TEMPERATURE), "temperature.gpu", 3.0, "within 3 C"),
        ("clocks.sm [MHz]", _scaled(v.get(SM_CLOCK), 1e-6), "clocks.sm", 0.10 * clock,
         "within 10 %"),
    )  # fmt: skip
    checks += [
        _numeric(uuid, where, quantity, ours, smi.number(name), tolerance, rule)
        for quantity, ours, name, tolerance, rule in numeric
    ]
    ours, theirs = v.get(UTILIZATION), _scaled(smi.number("utilization.gpu"), 0.01)
    in_range = ours is not None and all(x is None or 0.0 <= x <= 1.0 for x in (ours, theirs))
    rule = "both within [0, 1]"
    ok = None if theirs is None else in_range  # MIG mode: nvidia-smi has no utilization
    checks.append(Check(uuid, where, "utilization [0-1]", ours, theirs, rule, ok))
    return checks


def compare_run(gw: Mapping[str, GpuReading], smi: Mapping[str, SmiRow], where: str) -> list[Check]:
    """Every GPU either side knows, matched by UUID."""
    uuids = sorted(
        set(gw) | set(smi), key=lambda u: (smi[u].text("index") or "") if u in smi else u
    )
    return [c for u in uuids for c in compare_gpu(u, gw.get(u), smi.get(u), where)]


def energy_checks(first: Mapping[str, GpuReading], second: Mapping[str, GpuReading]) -> list[Check]:
    """The energy counter never goes back between two runs; the mean power it implies is set
    beside the power gauge's two readings (recorded: the gauge is instantaneous)."""
    checks: list[Check] = []
    for uuid in sorted(set(first) & set(second)):
        a, b = first[uuid], second[uuid]
        e1, e2 = a.values.get(ENERGY), b.values.get(ENERGY)
        if e1 is None or e2 is None or a.ts is None or b.ts is None:
            checks.append(Check(uuid, "run 1 -> 2", "energy [J]", e1, e2, "counter", None))
            continue
        checks.append(Check(uuid, "run 1 -> 2", "energy [J]", e1, e2, "non-decreasing", e2 >= e1))
        seconds = (datetime.fromisoformat(b.ts) - datetime.fromisoformat(a.ts)).total_seconds()
        powers = [p for p in (a.values.get(POWER), b.values.get(POWER)) if p is not None]
        if seconds > 0 and powers:
            from_energy = round((e2 - e1) / seconds, 1)
            gauge = round(sum(powers) / len(powers), 1)
            quantity = "mean power from energy vs power gauge [W]"
            checks.append(Check(uuid, "run 1 -> 2", quantity, from_energy, gauge, "recorded", None))
    return checks


def gpm_presence(
    readings: Mapping[str, GpuReading], support: Mapping[str, bool | str]
) -> tuple[list[Check], list[str]]:
    """SM activity present exactly on the GPUs whose driver says GPM is supported, every GPM
    ratio within [0, 1]; and a note per GPU without GPM."""
    checks: list[Check] = []
    notes: list[str] = []
    for uuid in sorted(set(readings) | set(support)):
        reading = readings.get(uuid)
        values = reading.values if reading else {}
        said = support.get(uuid, "not asked")
        present = SM_ACTIVE in values
        if said is True:
            ok: bool | None = present
        elif said is False:
            ok = not present
            name = reading.name if reading else uuid
            notes.append(f"{name} ({uuid}): GPM not supported (GPUs before Hopper have none)")
        else:
            ok = None  # the support query itself failed: nothing to hold gpuwatch to
        checks.append(Check(uuid, "idle", "sm_active present", present, said, "= support", ok))
        for metric in GPM_METRICS:
            if metric in values:
                value, quantity = values[metric], metric.removeprefix("gpuwatch_gpu_")
                ok = 0.0 <= value <= 1.0
                checks.append(Check(uuid, "idle", quantity, value, None, "within [0, 1]", ok))
    return checks, notes


def load_checks(
    uuid: str, idle: GpuReading | None, busy: GpuReading | None, gpm_supported: bool
) -> list[Check]:
    """Under a known load the GPU must look clearly busier than idle: NVML's utilization, and
    SM activity where GPM is supported; occupancy, tensor and DRAM activity are recorded."""
    where = "load vs idle"
    if idle is None or busy is None:
        return [Check(uuid, where, "present", busy is not None, idle is not None, "both", False)]
    metrics = [UTILIZATION] + (list(GPM_METRICS) if gpm_supported else [])
    checks = []
    for metric in metrics:
        b, a = busy.values.get(metric), idle.values.get(metric)
        asserted = metric in (UTILIZATION, SM_ACTIVE)
        if not asserted:
            ok = None
        elif a is None or b is None:
            ok = False
        else:
            ok = b > a + LOAD_MARGIN
        rule = f"load > idle + {LOAD_MARGIN}" if asserted else "recorded"
        checks.append(Check(uuid, where, metric.removeprefix("gpuwatch_gpu_"), b, a, rule, ok))
    return checks


@dataclass
class Section:
    """A titled table of checks, with what the two value columns are, notes and raw inputs."""

    title: str
    columns: tuple[str, str]
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)

    def failures(self) -> list[Check]:
        return [c for c in self.checks if c.ok is False]

    def markdown(self) -> str:
        lines = [f"### {self.title}", ""]
        lines += [f"- {note}" for note in self.notes]
        if self.notes:
            lines.append("")
        if self.checks:
            a, b = self.columns
            lines.append(f"| GPU | when | quantity | {a} | {b} | rule | result |")
            lines.append("| --- | --- | --- | --- | --- | --- | --- |")
            for c in self.checks:
                result = {True: "ok", False: "**FAIL**", None: "n/a"}[c.ok]
                lines.append(
                    f"| {c.gpu[:12]} | {c.where} | {c.quantity} | {_show(c.a)} | {_show(c.b)} "
                    f"| {c.rule} | {result} |"
                )
        return "\n".join(lines) + "\n"

    def as_json(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "columns": list(self.columns),
            "checks": [asdict(c) for c in self.checks],
            "notes": self.notes,
            "raw": self.raw,
        }


def _show(value: float | str | bool | None) -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        # Energy counters run to millions of joules: keep the decimals that show them moving.
        return f"{value:.3f}".rstrip("0").rstrip(".") if abs(value) < 1e6 else f"{value:.1f}"
    return str(value)


def parse_probe(text: str) -> tuple[dict[str, GpuReading], dict[str, bool | str]]:
    """The probe's second round (as ``collect --json`` lines) and its GPM support line."""
    support: dict[str, bool | str] = {}
    samples = []
    for line in text.splitlines():
        if line.startswith('{"gpm_support"'):
            support = json.loads(line)["gpm_support"]
        else:
            samples.append(line)
    return parse_collect("\n".join(samples)), support
