"""`gpuwatch export focus`'s energy columns: ``x_EnergyConsumedKwh`` (the GPU's own energy) and
``x_Co2Grams`` (its CO2 at the facility, as metered), from the ledger; NULL where unknown; the
validator still passes and the columns add up across granularities.

Metered as in test_focus_export.py (every GPU's counter grows 50 J per 30 s tick: 6,000 J an
hour), at PUE 1.5 with an hourly intensity that covers 12:00 (400 g/kWh) and 14:00 (200 g/kWh)
UTC but not 13:00.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import pytest

from agent.config.settings import load_config
from agent.reporting.focus_charges import Charge
from agent.reporting.focus_rows import CUSTOM_COLUMNS, Naming, row
from agent.storage.db import open_database, upgrade_database
from tests.agent.focus_validator import Verdict, find_validator
from tests.agent.test_focus_export import GPU0, GPU1, Metered, T, export, meter, write_config

ENERGY = '[energy]\npue = 1.5\ngrams_co2_per_kwh = "grid.csv"\n'  # beside the configuration
GRID = "hour,grams_co2_per_kwh\n2026-11-01T12:00:00Z,400\n2026-11-01T14:00:00Z,200\n"


@pytest.fixture
def metered(db_url: str, tmp_path: Path) -> Iterator[Metered]:
    upgrade_database(db_url)
    (tmp_path / "grid.csv").write_text(GRID)
    path = write_config(tmp_path / "gpuwatch.toml", db_url, ENERGY)
    config = load_config(str(path), {})
    engine = open_database(db_url)
    meter(engine, config, T, 267)  # 12:00 to 14:13 UTC
    yield Metered(config, path, engine)
    engine.dispose()


def by_hour(rows: list[dict[str, str]]) -> dict[tuple[str, str], dict[str, str]]:
    return {(r["ResourceId"], r["ChargePeriodStart"][11:13]): r for r in rows}


def test_hour_rows_carry_the_gpu_energy_and_the_co2_of_hours_with_an_intensity(
    metered: Metered, tmp_path: Path
) -> None:
    rows = by_hour(export(metered, tmp_path / "focus.csv", "--last-month"))
    for gpu in (GPU0, GPU1):
        full, gap, last = rows[(gpu, "12")], rows[(gpu, "13")], rows[(gpu, "14")]
        # 6,000 J in a whole hour; the GPU's own energy: no PUE in it.
        assert full["x_EnergyConsumedKwh"] == gap["x_EnergyConsumedKwh"] == "0.001666667"
        assert full["x_Co2Grams"] == "1.000000"  # 6,000 J x 1.5 / 3.6 MJ x 400 g
        assert gap["x_Co2Grams"] == ""  # no intensity for 13:00: unknown, not 0, not 400
        # 780 s of the last hour: 1,300 J, at 200 g/kWh.
        assert last["x_EnergyConsumedKwh"] == "0.000361111"
        assert last["x_Co2Grams"] == "0.108333"


def test_a_day_row_sums_the_energy_and_has_no_co2_when_an_hour_has_none(
    metered: Metered, tmp_path: Path
) -> None:
    hours = export(metered, tmp_path / "hours.csv", "--last-month")
    days = export(metered, tmp_path / "days.csv", "--last-month", "--granularity", "day")
    for gpu in (GPU0, GPU1):
        (day,) = [r for r in days if r["ResourceId"] == gpu]
        kwh = sum(Decimal(r["x_EnergyConsumedKwh"]) for r in hours if r["ResourceId"] == gpu)
        assert abs(Decimal(day["x_EnergyConsumedKwh"]) - kwh) <= Decimal("2e-9")  # rounding
        assert day["x_Co2Grams"] == ""  # 13:00's CO2 is unknown: a part would pass for all


def test_the_export_with_energy_columns_passes_the_focus_validator(
    metered: Metered, tmp_path: Path
) -> None:
    validator = find_validator(tmp_path / "validator")
    out = tmp_path / "focus.csv"
    rows = export(metered, out, "--last-month")
    assert any(r["x_Co2Grams"] for r in rows) and any(not r["x_Co2Grams"] for r in rows)
    verdict = validator.check(out, tmp_path / "report.xml")
    assert verdict == Verdict(checks=133, failed={}, errors=0, skipped=0)


def test_a_constant_intensity_gives_every_day_its_hours_co2(db_url: str, tmp_path: Path) -> None:
    upgrade_database(db_url)
    energy = "[energy]\npue = 1.2\ngrams_co2_per_kwh = 300\n"
    path = write_config(tmp_path / "gpuwatch.toml", db_url, energy)
    config = load_config(str(path), {})
    engine = open_database(db_url)
    try:
        meter(engine, config, T, 267)
        m = Metered(config, path, engine)
        hours = export(m, tmp_path / "hours.csv", "--last-month")
        days = export(m, tmp_path / "days.csv", "--last-month", "--granularity", "day")
    finally:
        engine.dispose()
    for gpu in (GPU0, GPU1):
        (day,) = [r for r in days if r["ResourceId"] == gpu]
        grams = [Decimal(r["x_Co2Grams"]) for r in hours if r["ResourceId"] == gpu]
        assert grams[0] == Decimal("0.600000")  # 6,000 J x 1.2 / 3.6 MJ x 300 g
        assert abs(Decimal(day["x_Co2Grams"]) - sum(grams)) <= Decimal("2e-6")


def test_without_energy_configured_the_energy_is_kept_and_co2_is_null(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    upgrade_database(db_url)
    path = write_config(tmp_path / "gpuwatch.toml", db_url)
    config = load_config(str(path), {})
    engine = open_database(db_url)
    try:
        meter(engine, config, T, 150)
        rows = export(Metered(config, path, engine), tmp_path / "f.csv", "--last-month")
    finally:
        engine.dispose()
    assert {r["x_EnergyConsumedKwh"] for r in rows if r["ChargePeriodStart"][11:13] == "12"} == {
        "0.001666667"
    }
    assert {r["x_Co2Grams"] for r in rows} == {""}
    assert "x_Co2Grams is empty: set [energy] grams_co2_per_kwh" in capsys.readouterr().err


def test_a_charge_without_energy_has_null_energy_columns() -> None:
    naming = Naming.of(load_config(None, {}).export.focus, "box")
    charge = Charge(
        host="box", gpu_uuid=GPU0, gpu_index="0", gpu_name=None, start=T, end=T,
        billing_period=(T, T), observed_seconds=60.0, busy_seconds=0.0,
        cost_usd=Decimal("0.05"), targets=(), models=(),
    )  # fmt: skip
    values = row(charge, naming)
    assert {c: values[c] for c in CUSTOM_COLUMNS} == {
        "x_EnergyConsumedKwh": None,
        "x_Co2Grams": None,
    }
    # Plain notation, to 3.6 mJ and a microgram; 0 g is a known 0 (a carbon-free supply).
    energy = row(replace(charge, energy_joules=1800.5, co2_grams=0.0), naming)
    assert (energy["x_EnergyConsumedKwh"], energy["x_Co2Grams"]) == ("0.000500139", "0.000000")
