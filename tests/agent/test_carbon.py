"""Energy and carbon arithmetic (agent.cost.carbon): facility kWh, CO2 at the hour's intensity,
energy's cost in exact money, per-token figures; unknown inputs give unknown figures."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from agent.config.energy import EnergyConfig, Intensity
from agent.cost import carbon

H0 = datetime(2026, 11, 1, tzinfo=UTC)
KWH = 3.6e6  # joules


def hourly(*grams: float) -> Intensity:
    """An hourly table from H0 on, one value per hour."""
    starts = tuple((H0 + timedelta(hours=i)).timestamp() for i in range(len(grams)))
    return Intensity(starts=starts, grams=tuple(grams), source="test.csv")


def test_facility_kwh_is_gpu_energy_times_pue() -> None:
    assert carbon.facility_kwh(KWH, 1.0) == 1.0
    assert carbon.facility_kwh(2 * KWH, 1.3) == pytest.approx(2.6)
    assert carbon.facility_kwh(0.0, 1.5) == 0.0
    assert carbon.facility_kwh(None, 1.3) is None


@pytest.mark.parametrize("bad", [-1.0, math.nan, math.inf])
def test_impossible_energy_is_a_bug_not_a_figure(bad: float) -> None:
    with pytest.raises(ValueError, match="joules"):
        carbon.facility_kwh(bad, 1.0)
    with pytest.raises(ValueError, match="joules"):
        carbon.energy_cost_usd(bad, EnergyConfig(usd_per_kwh=Decimal("0.1")))


def test_a_pue_under_one_is_refused() -> None:
    with pytest.raises(ValueError, match="PUE"):
        carbon.facility_kwh(1.0, 0.9)


def test_co2_is_facility_kwh_times_the_constant_intensity() -> None:
    energy = EnergyConfig(pue=1.3, intensity=Intensity(constant=390.0))
    assert carbon.co2_grams(10 * KWH, H0, energy) == pytest.approx(10 * 1.3 * 390)
    assert carbon.co2_grams(0.0, H0, energy) == 0.0
    assert carbon.co2_grams(None, H0, energy) is None


def test_co2_is_unknown_without_an_intensity() -> None:
    assert carbon.co2_grams(KWH, H0, EnergyConfig(pue=1.3)) is None
    assert carbon.co2_of(EnergyConfig(pue=1.3)) is None  # the ledger counts no CO2 at all


def test_co2_takes_the_intensity_of_its_hour_and_none_for_a_missing_hour() -> None:
    energy = EnergyConfig(pue=1.0, intensity=hourly(100.0, 200.0))
    assert carbon.co2_grams(KWH, H0 + timedelta(minutes=59), energy) == 100.0
    assert carbon.co2_grams(KWH, H0 + timedelta(hours=1), energy) == 200.0
    # After the table, before it: unknown, neither 0 nor the neighbouring hour's.
    assert carbon.co2_grams(KWH, H0 + timedelta(hours=2), energy) is None
    assert carbon.co2_grams(KWH, H0 - timedelta(seconds=1), energy) is None


def test_co2_of_is_co2_grams_at_the_configuration() -> None:
    energy = EnergyConfig(pue=1.2, intensity=hourly(100.0))
    of = carbon.co2_of(energy)
    assert of is not None
    assert of(KWH, H0) == carbon.co2_grams(KWH, H0, energy) == pytest.approx(120.0)
    assert of(KWH, H0 + timedelta(hours=1)) is None


def test_energy_cost_is_exact_money_for_the_facility_energy() -> None:
    energy = EnergyConfig(pue=1.3, usd_per_kwh=Decimal("0.12"))
    assert carbon.energy_cost_usd(KWH, energy) == Decimal("0.156")
    # 0.1 J: the float's shortest spelling, not its binary expansion.
    assert carbon.energy_cost_usd(0.1, energy) == Decimal("0.000000004333")
    assert carbon.energy_cost_usd(None, energy) is None
    assert carbon.energy_cost_usd(KWH, EnergyConfig(pue=1.3)) is None  # no price configured


def test_energy_cost_of_a_month_in_slices_sums_to_the_month_without_drift() -> None:
    energy = EnergyConfig(pue=1.0, usd_per_kwh=Decimal("0.15"))
    slices = [KWH / 3] * 3 * 720  # a month of hours, a third of a kWh each twentieth of an hour
    parts = sum((carbon.energy_cost_usd(j, energy) or Decimal(0) for j in slices), Decimal(0))
    assert abs(parts - Decimal("0.15") * 720) < Decimal("1e-8")


def test_per_token_figures_are_unknown_without_tokens_or_inputs() -> None:
    assert carbon.joules_per_token(1000.0, 250) == 4.0
    assert carbon.joules_per_token(1000.0, 0) is None
    assert carbon.joules_per_token(None, 250) is None
    assert carbon.joules_per_token(1000.0, None) is None
    assert carbon.grams_per_million_tokens(39.0, 1_000_000) == 39.0
    assert carbon.grams_per_million_tokens(39.0, 500_000) == 78.0
    assert carbon.grams_per_million_tokens(0.0, 500_000) == 0.0
    assert carbon.grams_per_million_tokens(39.0, 0) is None
    assert carbon.grams_per_million_tokens(None, 10) is None


def test_the_intensity_is_reexported_for_the_cost_room() -> None:
    assert carbon.Intensity is Intensity
