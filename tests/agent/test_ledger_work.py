"""The ledger's real-work figures: SM-active time beside NVML's busy flag, and energy and CO2
per target. A GPU whose kernels run all the time while a quarter of its SMs work is busy by
the flag and three quarters idle by SM activity; the two are kept apart, never mixed."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from agent.cost.ledger import Observation, meter
from agent.cost.ratecard import GpuPrice

T = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
FLAT = GpuPrice(Decimal("3.60"))  # 0.001 USD a second


def at(seconds: float) -> datetime:
    return T + timedelta(seconds=seconds)


def flat(_: datetime) -> GpuPrice | None:
    return FLAT


def obs(
    seconds: float,
    utilization: float = 1.0,
    sm_active: float | None = None,
    energy: float | None = None,
    targets: dict[str, float] | None = None,
) -> Observation:
    return Observation(at(seconds), utilization, energy, targets or {}, {}, sm_active)


def test_a_saturated_looking_gpu_is_a_quarter_active_by_its_sms() -> None:
    usage = meter([obs(0, sm_active=0.25), obs(10, sm_active=0.25), obs(20, sm_active=0.25)],
                  60, 30.0, flat)[T]  # fmt: skip
    assert usage.busy_seconds == 20.0  # NVML's flag: a kernel ran all the time
    assert usage.idle_cost_usd == Decimal(0)
    assert usage.sm_observed_seconds == 20.0
    assert usage.sm_active_seconds == 5.0
    assert usage.sm_idle_cost_usd == Decimal("0.015")  # 20 s x $0.001 x (1 - 0.25)


def test_without_sm_activity_the_sm_figures_stay_unknown() -> None:
    usage = meter([obs(0), obs(10), obs(20)], 60, 30.0, flat)[T]
    assert usage.sm_observed_seconds == 0.0
    assert usage.sm_active_seconds == 0.0
    assert usage.sm_idle_cost_usd is None  # unknown, not the flag's $0


def test_sm_activity_counts_only_the_intervals_it_covers() -> None:
    # GPM gives no value on the first tick after a start: the first interval has none.
    usage = meter([obs(0), obs(10), obs(20, sm_active=0.5)], 60, 30.0, flat)[T]
    assert usage.observed_seconds == 20.0
    assert usage.sm_observed_seconds == 10.0
    assert usage.sm_active_seconds == 5.0
    assert usage.sm_idle_cost_usd == Decimal("0.005")


def test_energy_and_co2_are_shared_among_targets_as_the_cost_is() -> None:
    targets = {"a": 3.0, "b": 1.0}  # memory bytes: a holds three quarters
    observations = [obs(0, energy=1000.0, targets=targets), obs(10, energy=4600.0, targets=targets)]

    def co2_of(joules: float, _: datetime) -> float:
        return joules / 3.6e6 * 400  # 400 g/kWh

    usage = meter(observations, 60, 30.0, flat, co2_of=co2_of)[T]
    assert usage.energy_joules == 3600.0
    assert usage.co2_grams == 0.4
    a, b = usage.allocations["a"], usage.allocations["b"]
    assert (a.energy_joules, b.energy_joules) == (2700.0, 900.0)
    assert a.co2_grams is not None and b.co2_grams is not None
    assert abs(a.co2_grams - 0.3) < 1e-12 and abs(b.co2_grams - 0.1) < 1e-12


def test_without_an_energy_counter_energy_and_co2_are_unknown() -> None:
    usage = meter([obs(0, targets={"a": 1.0}), obs(10, targets={"a": 1.0})], 60, 30.0, flat,
                  co2_of=lambda j, _: j)[T]  # fmt: skip
    assert usage.energy_joules is None and usage.co2_grams is None
    assert usage.allocations["a"].energy_joules is None


def test_power_is_integrated_where_the_energy_counter_is_missing() -> None:
    observations = [
        Observation(at(0), 1.0, None, power_watts=300.0),
        Observation(at(10), 1.0, None, power_watts=500.0),
        Observation(at(20), 1.0, 9000.0, power_watts=500.0),  # the counter appears: 2 points
        Observation(at(30), 1.0, 12000.0, power_watts=500.0),
    ]
    usage = meter(observations, 60, 30.0, flat)[T]
    # 10 s at (300 + 500) / 2 W, 10 s at 500 W (the counter has no start yet), then 3000 J.
    assert usage.energy_joules == 4000.0 + 5000.0 + 3000.0
    assert usage.power_integrated_seconds == 20.0
