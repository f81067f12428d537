"""FOCUS 1.3 of a MIG GPU: each MIG instance's busy and idle time as its allocated charges
(AllocatedMethodId saying slices or memory), the free slices as the unallocated portion,
passing the suite's 1.3 checker and adding up to the 1.0 export's rows. The host is
tests/agent/mig_cost_helpers.py's, run for real: GPU 0 with two 3g instances of 7 slices
(chat's at 60 % SM activity, embed's at 20 %), GPU 1 a plain GPU nobody holds."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

from agent.reporting.focus_allocation import MIG_MEMORY, MIG_SLICES
from tests.agent import focus13_checker as checker
from tests.agent.mig_cost_helpers import GPU0, GPU1, GPU_COST, HOST, MIG_A, MIG_B, mig_run
from tests.agent.test_focus13_pods import export
from tests.conftest import FakeNvml

NANO = Decimal("0.000000001")


def test_a_mig_gpu_is_written_as_its_instances_allocated_charges(
    db_url: str, fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    with mig_run(db_url, fake_nvml, tmp_path) as config:
        origins = export(config, tmp_path / "f10.csv")
        rows = export(config, tmp_path / "f13.csv", "--focus-version", "1.3")
    assert checker.check(list(rows[0]), rows, origins) == []
    assert sum(Decimal(r["EffectiveCost"]) for r in rows) == 2 * GPU_COST

    by = {r["AllocatedResourceId"]: r for r in rows if r["ResourceId"] == GPU0}
    assert set(by) == {f"{HOST}/{MIG_A}", f"{HOST}/{MIG_A}/idle", f"{HOST}/{MIG_B}",
                       f"{HOST}/{MIG_B}/idle", ""}  # fmt: skip
    assert {r["AllocatedMethodId"] for r in by.values()} == {MIG_SLICES}
    a = [Decimal(by[k]["EffectiveCost"]) for k in by if k.startswith(f"{HOST}/{MIG_A}")]
    assert abs(sum(a) - GPU_COST * 3 / 7) < NANO  # its 3 slices of 7
    assert (
        abs(Decimal(by[f"{HOST}/{MIG_A}/idle"]["EffectiveCost"]) - sum(a) * Decimal("0.4")) < NANO
    )
    assert abs(Decimal(by[""]["EffectiveCost"]) - GPU_COST / 7) < NANO  # the free slice
    assert json.loads(by[f"{HOST}/{MIG_B}"]["AllocatedTags"]) == {
        "gpuwatch/mig_instance": MIG_B, "gpuwatch/target": "embed", "gpuwatch/portion": "busy",
    }  # fmt: skip
    assert by[f"{HOST}/{MIG_A}"]["AllocatedResourceName"] == f"MIG {MIG_A} on {HOST}"
    assert all(r["AllocatedMethodId"] != MIG_SLICES for r in rows if r["ResourceId"] == GPU1)


def test_by_memory_the_method_says_memory(db_url: str, fake_nvml: FakeNvml, tmp_path: Path) -> None:
    with mig_run(db_url, fake_nvml, tmp_path, '[cost]\nmig_split = "memory"\n') as config:
        rows = export(config, tmp_path / "f13.csv", "--focus-version", "1.3")
    gpu0 = [r for r in rows if r["ResourceId"] == GPU0]
    assert {r["AllocatedMethodId"] for r in gpu0} == {MIG_MEMORY}
    a = sum(Decimal(r["EffectiveCost"]) for r in gpu0 if MIG_A in r["AllocatedResourceId"])
    assert a == GPU_COST / 2  # 40 of 80 GiB
