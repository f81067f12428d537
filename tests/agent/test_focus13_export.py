"""`gpuwatch export focus --focus-version 1.3`: the GPUs' charges split into allocated charges
per serving target (busy and idle) and the time none held a GPU, passing the suite's FOCUS 1.3
checker (tests/agent/focus13_checker.py), adding up to the metered total to the digit and to
the 1.0 export's rows, their origin charges.

The ledger is the one tests/agent/test_focus_export.py meters for real (GPU 0 shared 3:1 by
memory between targets a and b, GPU 1 used by c alone, both at 50 % utilization, GPU 2 priced
by no rate), on SQLite and PostgreSQL.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from agent.cli.main import build_parser, main
from agent.config.settings import load_config
from agent.cost.billing import billed
from agent.cost.provisional import reading
from agent.cost.split_basis import SplitBasis
from agent.cost.summarize import summarize_on
from agent.reporting.focus13_rows import COLUMNS, rows
from agent.reporting.focus_allocation import (
    MEMORY_SHARE,
    METHODS,
    SM_ELSE_MEMORY,
    SOLE_TARGET,
    TargetSource,
    method_of,
)
from agent.reporting.focus_rows import Naming
from agent.reporting.focus_shares import Shares, TargetUse
from agent.storage.db import open_database, upgrade_database
from tests.agent import focus13_checker as checker
from tests.agent.test_focus_export import (
    GPU0,
    GPU1,
    NOVEMBER,
    Metered,
    T,
    charge,
    export,
    meter,
    metered_total,
    other_db_url,  # noqa: F401 (a fixture)
    total,
    write_config,
)

LABELS = '[[labels]]\ntarget = "a"\nteam = "search"\nproject = "ranking"\n'


@pytest.fixture
def labelled(db_url: str, tmp_path: Path) -> Iterator[Metered]:
    """The metered ledger of test_focus_export (12:00 to 14:13 UTC on 1 November 2026), with
    target a labelled team search, project ranking."""
    upgrade_database(db_url)
    path = write_config(tmp_path / "gpuwatch.toml", db_url, LABELS)
    config = load_config(str(path), {})
    engine = open_database(db_url)
    meter(engine, config, T, 267)
    yield Metered(config, path, engine)
    engine.dispose()


def export13(m: Metered, out: Path, *flags: str) -> list[dict[str, str]]:
    return export(m, out, "--last-month", "--focus-version", "1.3", *flags)


def check(path: Path, origins: list[dict[str, str]]) -> list[checker.Failure]:
    header, found = checker.read(path)
    return checker.check(header, found, origins)


@pytest.mark.parametrize("granularity", ["hour", "day"])
def test_the_1_3_export_passes_the_checker_and_adds_up_to_the_metered_total_exactly(
    labelled: Metered, tmp_path: Path, granularity: str, capsys: pytest.CaptureFixture[str]
) -> None:
    origins = export(labelled, tmp_path / "f10.csv", "--last-month", "--granularity", granularity)
    out = tmp_path / "f13.csv"
    got = export13(labelled, out, "--granularity", granularity)
    assert list(got[0]) == list(COLUMNS)
    assert check(out, origins) == []
    metered = metered_total(labelled, *NOVEMBER)
    assert metered > Decimal(10)
    for column in ("EffectiveCost", "BilledCost", "ListCost", "ContractedCost"):
        assert total(got, column) == metered, column  # to the 12th decimal, as the ledger
    for column in ("ConsumedQuantity", "PricingQuantity", "x_EnergyConsumedKwh"):
        assert total(got, column) == total(origins, column) > 0, column
    assert {r["AllocatedMethodId"] for r in got} == {MEMORY_SHARE, SOLE_TARGET}
    assert all(r["ServiceProviderName"] == r["HostProviderName"] == "self-hosted" for r in got)
    err = capsys.readouterr().err
    assert f"FOCUS 1.3 export of 2026-11: {len(got)} rows" in err
    assert "ServiceProviderName is 'self-hosted'" in err


def test_a_shared_gpu_hour_is_each_target_s_busy_and_idle_time(
    labelled: Metered, tmp_path: Path
) -> None:
    got = export13(labelled, tmp_path / "f13.csv")
    hour = [r for r in got if r["ResourceId"] == GPU0 and r["ChargePeriodStart"][11:13] == "13"]
    by = {r["AllocatedResourceId"]: r for r in hour}
    assert set(by) == {"box/a", "box/a/idle", "box/b", "box/b/idle"}  # a and b held it all hour
    cost = {rid: Decimal(r["EffectiveCost"]) for rid, r in by.items()}
    assert sum(cost.values()) == Decimal("3.6")  # the hour at $3.60
    assert cost["box/a"] == cost["box/a/idle"] == 3 * cost["box/b"]  # 3:1 memory, 50 % busy
    assert abs(cost["box/b"] - Decimal("0.45")) < Decimal("1e-9")
    a = by["box/a"]
    assert a["AllocatedResourceName"] == "a on box"
    assert by["box/b/idle"]["AllocatedResourceName"] == "b on box (idle)"
    assert json.loads(a["AllocatedTags"]) == {
        "gpuwatch/target": "a", "gpuwatch/model": "llama,mistral", "gpuwatch/portion": "busy",
        "team": "search", "project": "ranking",
    }  # fmt: skip
    assert json.loads(by["box/b"]["AllocatedTags"])["team"] == "(unlabelled)"
    assert json.loads(a["Tags"]) == {"gpuwatch/host": "box", "gpuwatch/gpu_index": "0"}
    details = json.loads(a["AllocatedMethodDetails"], parse_float=Decimal)
    assert details["x_Method"] == METHODS[MEMORY_SHARE]
    (element,) = details["Elements"]
    assert element["AllocatedRatio"] == Decimal("0.375")  # busy half of a's three quarters
    assert (element["UsageUnit"], element["UsageQuantity"]) == ("Hours", Decimal("0.375"))
    # Tokens are the target's, on its first row; over the period, what `gpuwatch cost` counts.
    assert a["x_OutputTokens"] != "" and by["box/a/idle"]["x_OutputTokens"] == ""
    of_a = [r for r in got if json.loads(r["AllocatedTags"] or "{}").get("gpuwatch/target") == "a"]
    with reading(labelled.engine, labelled.config, (), NOVEMBER) as (conn, coverage):
        counted = summarize_on(conn, *coverage.window).tokens
    generated = sum(t.generated for (_, target, _), t in counted.items() if target == "a")
    exported = sum((Decimal(r["x_OutputTokens"]) for r in of_a if r["x_OutputTokens"]), Decimal(0))
    assert exported == Decimal(repr(generated)) > 0
    assert by["box/b"]["x_OutputTokens"] == ""  # b's engine is not scraped: unknown, not 0
    # The unit price and every other dimension are the GPU's row's.
    assert {r["ListUnitPrice"] for r in hour} == {"3.600000"}
    assert {r["ChargeDescription"] for r in hour} == {
        "GPU time of NVIDIA H100 80GB HBM3 on box (GPU 0), metered by gpuwatch at its rate card"
    }


def test_a_gpu_one_target_held_is_split_by_the_sole_target_method(
    labelled: Metered, tmp_path: Path
) -> None:
    got = export13(labelled, tmp_path / "f13.csv", "--granularity", "day")
    gpu1 = [r for r in got if r["ResourceId"] == GPU1]
    assert {r["AllocatedResourceId"] for r in gpu1} == {"box/c", "box/c/idle"}
    assert {r["AllocatedMethodId"] for r in gpu1} == {SOLE_TARGET}
    assert json.loads(gpu1[0]["AllocatedTags"])["gpuwatch/model"] == "qwen"


def test_1_0_stays_the_default_and_its_bytes_do_not_change(
    labelled: Metered, tmp_path: Path
) -> None:
    default = tmp_path / "default.csv"
    named = tmp_path / "named.csv"
    export(labelled, default, "--last-month")
    export(labelled, named, "--last-month", "--focus-version", "1.0")
    assert default.read_bytes() == named.read_bytes()
    header = default.read_text(encoding="utf-8").splitlines()[0]
    assert "ProviderName" in header and "AllocatedMethodId" not in header
    args = build_parser().parse_args(["export", "focus", "--focus-version", "1.3"])
    assert args.focus_version == "1.3"


def test_importing_a_1_3_export_elsewhere_gives_the_metered_total(
    labelled: Metered,
    other_db_url: str,  # noqa: F811 (the fixture imported above)
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = tmp_path / "f13.csv"
    export13(labelled, out)
    elsewhere = write_config(tmp_path / "elsewhere.toml", other_db_url)
    monkeypatch.delenv("GPUWATCH_DATABASE_URL", raising=False)
    upgrade_database(other_db_url)
    assert main(["import", "focus", str(out), "--config", str(elsewhere)]) == 0
    engine = open_database(other_db_url)
    try:
        imported = billed(engine, *NOVEMBER)
    finally:
        engine.dispose()
    assert imported == {("focus", "USD"): metered_total(labelled, *NOVEMBER)}


NAMING = Naming.of(load_config(None, {}).export.focus, "box")


def split(**changes: object) -> list[dict[str, str | None]]:
    return rows(charge(**changes), NAMING, (TargetSource(),))


def test_time_no_target_held_is_the_unallocated_portion() -> None:
    use = TargetUse("a", 1800.0, 900.0, Decimal("1.800000000000"), 50.0, 20.0, ("llama",))
    got = split(cost_usd=Decimal("3.600000000000"), shares=Shares((use,)))
    assert [(r["AllocatedResourceId"], r["EffectiveCost"], r["ConsumedQuantity"]) for r in got] == [
        ("box/a", "0.900000000000", "0.250000000"),
        ("box/a/idle", "0.900000000000", "0.250000000"),
        (None, "1.800000000000", "0.500000000"),
    ]  # fmt: skip
    unallocated = got[2]
    assert unallocated["AllocatedResourceName"] is None  # FOCUS: null with the id
    assert unallocated["AllocatedMethodId"] == SOLE_TARGET
    assert json.loads(unallocated["AllocatedTags"] or "") == {"gpuwatch/portion": "unallocated"}
    assert (got[0]["x_OutputTokens"], got[0]["x_PromptTokens"]) == ("50.0", "20.0")


def test_the_ledger_s_rounding_goes_to_the_largest_part_not_to_a_row_of_no_time() -> None:
    """Shares rounded to 9 decimals can leave the targets' costs a few 1e-12 off the GPU's."""
    uses = (TargetUse("a", 2400.0, 2400.0, Decimal("2.400000000001")),
            TargetUse("b", 1200.0, 1200.0, Decimal("1.200000000001")))  # fmt: skip
    got = split(cost_usd=Decimal("3.600000000000"), shares=Shares(uses))
    assert [(r["AllocatedResourceId"], r["EffectiveCost"]) for r in got] == [
        ("box/a", "2.399999999999"), ("box/b", "1.200000000001")]  # fmt: skip
    ratios = [json.loads(r["AllocatedMethodDetails"] or "", parse_float=Decimal) for r in got]
    assert sum(d["Elements"][0]["AllocatedRatio"] for d in ratios) == 1


def test_a_charge_nobody_used_is_one_row_without_allocation_columns() -> None:
    (only,) = split(targets=(), models=())
    assert only["EffectiveCost"] == "2.720000000000"
    assert all(only[c] is None for c in checker.spec()["allocation_columns"])
    assert only["ServiceSubcategory"] == "Other (Compute)"


@pytest.mark.parametrize(
    ("basis", "rule", "method"),
    [
        (None, "memory", SOLE_TARGET),
        (SplitBasis(), "memory", SOLE_TARGET),
        (SplitBasis(sm_ticks=3), "memory", "gpuwatch-sm-utilization-share"),
        (SplitBasis(memory_ticks=3), "memory", MEMORY_SHARE),
        (SplitBasis(sm_ticks=1, memory_ticks=2), "memory", SM_ELSE_MEMORY),
        (SplitBasis(sm_ticks=1, memory_ticks=2), "equal", "gpuwatch-equal-share"),
    ],
)
def test_the_method_says_the_rule_that_split_the_shared_ticks(
    basis: SplitBasis | None, rule: str, method: str
) -> None:
    assert method_of(Shares((), basis), rule) == method


def test_the_checker_rejects_what_a_broken_1_3_export_would_get_wrong(tmp_path: Path) -> None:
    """The check is live: the same rows pass, and each mistake fails the rule that covers it."""
    uses = (
        TargetUse("a", 2700.0, 1350.0, Decimal("2.7")),
        TargetUse("b", 900.0, 0.0, Decimal("0.9")),
    )
    origin = {
        k: v or "" for k, v in split(cost_usd=Decimal("3.6"), targets=("a", "b")).pop().items()
    }
    good = [{k: v or "" for k, v in r.items()} for r in split(
        cost_usd=Decimal("3.6"), shares=Shares(uses, SplitBasis(memory_ticks=5)),
        end=T + timedelta(hours=1))]  # fmt: skip
    assert checker.check(list(COLUMNS), good, [origin]) == []
    broken = [dict(r) for r in good]
    broken[0]["AllocatedResourceName"] = ""  # an id without a name
    broken[1]["AllocatedMethodDetails"] = (
        '{"Elements": [{"AllocatedRatio": 0.5, "UsageQuantity": 1}]}'
    )
    broken[1]["HostProviderName"] = ""
    broken[2]["AllocatedTags"] = '{"gpuwatch/host": "box"}'  # a tag of Tags
    broken[2]["ListUnitPrice"] = "9.000000"  # not the origin's
    broken[2]["ServiceSubcategory"] = "Virtual Machines"
    broken[2]["ServiceCategory"] = "Storage"
    broken[0]["EffectiveCost"] = "2.0"
    header = [*COLUMNS, "Custom"]
    failures = checker.check(header, broken, [origin])
    assert checker.rules(failures) == {
        "AllocatedResourceName_NullWithId", "AllocatedMethodDetails_Object",
        "HostProviderName_NotNull", "AllocatedTags_NotInTags", "SplitCostAllocation_MatchesOrigin",
        "SplitCostAllocation_UnitPrice", "ServiceSubcategory_Parent", "SplitCostAllocation_Sum",
        "AllocatedRatio_SumsToOne", "CustomColumnPrefix",
    }  # fmt: skip
    unsplit = {k: v or "" for k, v in split(targets=(), models=())[0].items()}
    unsplit["AllocatedTags"] = '{"team": "x"}'
    unsplit["ChargePeriodStart"] = "2026-11-01 12:00:00"
    missing = [c for c in COLUMNS if c != "ServiceProviderName"]
    assert checker.rules(checker.check(missing, [unsplit])) == {
        "ColumnPresent", "AllocatedTags_NullWithoutSplit", "ChargePeriodStart_Type"}  # fmt: skip


def test_without_labels_the_allocated_tags_are_gpuwatch_s_own() -> None:
    use = TargetUse("a", 3600.0, 3600.0, Decimal("2.72"))
    allocation = TargetSource().allocate(charge(shares=Shares((use,))))
    assert allocation is not None
    assert [dict(p.tags) for p in allocation.parts] == [
        {"gpuwatch/target": "a", "gpuwatch/portion": "busy"}]  # fmt: skip
