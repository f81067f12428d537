"""The GPU cost ledger, pure: observations of one GPU become exact per-minute usage and cost."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from agent.config.rates import Rate
from agent.cost.ledger import Allocation, Observation, PriceAt, Usage, meter, shares
from agent.cost.ratecard import GpuPrice, RateCard

T = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)  # a minute boundary
MINUTE = 60
MAX_GAP = 30.0
# 3.60 USD an hour is exactly 0.001 USD a second: every expected cost below is exact.
FLAT = GpuPrice(Decimal("3.60"))


def at(seconds: float) -> datetime:
    return T + timedelta(seconds=seconds)


def flat(_: datetime) -> GpuPrice | None:
    return FLAT


def nothing(_: datetime) -> GpuPrice | None:
    return None


def card(*rates: Rate) -> PriceAt:
    """The rate card's price of GPU 0 on a one-GPU host, as the rollup asks for it."""
    rate_card = RateCard(rates)

    def price_at(instant: datetime) -> GpuPrice | None:
        return rate_card.price("box", "GPU-a", "0", 1, instant)

    return price_at


def obs(
    seconds: float,
    utilization: float | None = 0.0,
    energy: float | None = None,
    targets: Mapping[str, float] | None = None,
) -> Observation:
    return Observation(at(seconds), utilization, energy, dict(targets or {}))


def seconds_by_bucket(usage: Mapping[datetime, Usage]) -> dict[datetime, float]:
    return {bucket: u.observed_seconds for bucket, u in usage.items()}


# -- spreading intervals over minute buckets -------------------------------------------------


def test_an_interval_across_a_minute_boundary_is_split_exactly() -> None:
    usage = meter([obs(45, 0.5, 1000.0), obs(65, 0.5, 1080.0)], MINUTE, MAX_GAP, flat)

    assert seconds_by_bucket(usage) == {T: 15.0, at(60): 5.0}
    first, second = usage[T], usage[at(60)]
    assert (first.busy_seconds, second.busy_seconds) == (7.5, 2.5)
    assert (first.energy_joules, second.energy_joules) == (60.0, 20.0)  # pro rata
    assert (first.cost_usd, second.cost_usd) == (Decimal("0.015"), Decimal("0.005"))


def test_an_instant_on_a_boundary_closes_the_bucket_before_it() -> None:
    # (T+30, T+60] ends exactly on the boundary: all of it is minute T, none the next.
    closing = meter([obs(30), obs(60)], MINUTE, MAX_GAP, flat)
    assert seconds_by_bucket(closing) == {T: 30.0}
    # (T+60, T+90] starts on the boundary: all of it is the next minute.
    opening = meter([obs(60), obs(90)], MINUTE, MAX_GAP, flat)
    assert seconds_by_bucket(opening) == {at(60): 30.0}


def test_intervals_in_one_bucket_add_up() -> None:
    usage = meter([obs(s, 0.25) for s in (0, 10, 20, 30, 40, 50, 60)], MINUTE, MAX_GAP, flat)

    assert seconds_by_bucket(usage) == {T: 60.0}
    assert usage[T].busy_seconds == 15.0
    assert usage[T].cost_usd == Decimal("0.06")


def test_the_first_observation_only_opens_metering() -> None:
    assert meter([obs(10, 1.0, 500.0)], MINUTE, MAX_GAP, flat) == {}
    assert meter([], MINUTE, MAX_GAP, flat) == {}
    # The time before the first observation is not known to be billed.
    usage = meter([obs(50, 1.0), obs(70, 1.0)], MINUTE, MAX_GAP, flat)
    assert sum(u.observed_seconds for u in usage.values()) == 20.0


def test_a_gap_longer_than_max_gap_is_not_metered() -> None:
    # 10 s, then 31 s of silence (gpuwatch not watching), then 19 s, then exactly max_gap.
    usage = meter([obs(0), obs(10), obs(41), obs(60), obs(90)], MINUTE, MAX_GAP, flat)

    assert seconds_by_bucket(usage) == {T: 29.0, at(60): 30.0}
    assert usage[T].cost_usd == Decimal("0.029")


def test_observations_out_of_order_or_repeated_meter_nothing_between_them() -> None:
    usage = meter([obs(10), obs(10), obs(20)], MINUTE, MAX_GAP, flat)
    assert seconds_by_bucket(usage) == {T: 10.0}


# -- utilisation and energy ------------------------------------------------------------------


def test_utilization_of_the_closing_observation_makes_busy_seconds() -> None:
    # NVML's utilisation describes the sample period that ends at the reading.
    usage = meter([obs(0, 1.0), obs(20, 0.25), obs(40, None)], MINUTE, MAX_GAP, flat)

    assert usage[T].observed_seconds == 40.0
    assert usage[T].busy_seconds == 5.0  # 20 s at 25 %; unreported counts as not busy


def test_energy_counter_reset_counts_the_value_after_it() -> None:
    # The driver was reloaded between the readings: the counter restarted from 0.
    usage = meter([obs(0, energy=9_000.0), obs(20, energy=300.0)], MINUTE, MAX_GAP, flat)
    assert usage[T].energy_joules == 300.0


def test_energy_not_reported_stays_unknown_not_zero() -> None:
    usage = meter([obs(0, energy=None), obs(20, energy=100.0)], MINUTE, MAX_GAP, flat)

    assert usage[T].energy_joules is None
    assert usage[T].cost_usd == Decimal("0.02")  # uptime is still billed


def test_energy_is_priced_per_kwh_pro_rata() -> None:
    # Owned hardware: 0.36 USD/kWh and no hourly price; 72 kJ over 20 s, 15 s in minute T.
    price = GpuPrice(Decimal(0), usd_per_kwh=Decimal("0.36"))
    usage = meter([obs(45, energy=0.0), obs(65, energy=72_000.0)], MINUTE, MAX_GAP, lambda _: price)

    assert (usage[T].energy_joules, usage[at(60)].energy_joules) == (54_000.0, 18_000.0)
    assert usage[T].cost_usd == Decimal("0.0054")
    assert usage[at(60)].cost_usd == Decimal("0.0018")


# -- prices ----------------------------------------------------------------------------------


def test_a_price_change_mid_interval_is_honoured_per_slice() -> None:
    change = at(60)
    price_at = card(
        Rate(usd_per_hour=Decimal("3.60"), valid_to=change),
        Rate(usd_per_hour=Decimal("7.20"), valid_from=change),
    )
    usage = meter([obs(50), obs(70)], MINUTE, MAX_GAP, price_at)

    assert usage[T].cost_usd == Decimal("0.010")  # 10 s at 0.001 USD/s
    assert usage[at(60)].cost_usd == Decimal("0.020")  # 10 s at 0.002 USD/s


def test_a_price_change_inside_a_bucket_slice_is_honoured_from_its_instant() -> None:
    change = at(65)  # inside the (T+60, T+70] slice, not on a minute boundary
    price_at = card(
        Rate(usd_per_hour=Decimal("3.60"), valid_to=change),
        Rate(usd_per_hour=Decimal("7.20"), valid_from=change),
    )
    usage = meter([obs(60), obs(70)], MINUTE, MAX_GAP, price_at)

    # 5 s at 0.001 USD/s, then 5 s at 0.002 USD/s.
    assert usage[at(60)].cost_usd == Decimal("0.015")


def test_cost_is_unknown_when_no_rate_covers_the_gpu() -> None:
    usage = meter(
        [obs(0, 0.5, targets={"a": 1.0}), obs(20, 0.5, targets={"a": 1.0})],
        MINUTE,
        MAX_GAP,
        nothing,
    )

    u = usage[T]
    assert (u.observed_seconds, u.busy_seconds) == (20.0, 10.0)  # still metered
    assert (u.cost_usd, u.idle_cost_usd) == (None, None)  # unknown, not free
    assert u.allocations == {"a": Allocation(seconds=20.0, busy_seconds=10.0, cost_usd=None)}


def test_cost_is_known_only_for_the_time_a_rate_covers() -> None:
    price_at = card(Rate(usd_per_hour=Decimal("3.60"), valid_from=at(60)))
    usage = meter([obs(50), obs(70)], MINUTE, MAX_GAP, price_at)

    assert usage[T].cost_usd is None
    assert usage[at(60)].cost_usd == Decimal("0.010")


def test_idle_cost_is_cost_times_the_share_not_busy() -> None:
    usage = meter([obs(0), obs(20, 0.25), obs(40, None)], MINUTE, MAX_GAP, flat)

    assert usage[T].cost_usd == Decimal("0.040")
    # 20 s at 25 % busy: 0.015 idle; 20 s not reported: all 0.020 idle.
    assert usage[T].idle_cost_usd == Decimal("0.035")


# -- sharing a GPU between targets -----------------------------------------------------------


def test_shares_by_memory_by_equal_rule_and_unallocated() -> None:
    assert shares({"a": 30.0, "b": 10.0}, "memory") == {"a": 0.75, "b": 0.25}
    assert shares({"a": 30.0, "b": 10.0}, "equal") == {"a": 0.5, "b": 0.5}
    assert shares({"a": 0.0, "b": 0.0}, "memory") == {"a": 0.5, "b": 0.5}  # no basis: equal
    assert shares({}, "memory") == {}


def test_allocations_split_seconds_busy_time_and_cost_by_memory() -> None:
    targets = {"a": 30.0, "b": 10.0}
    usage = meter(
        [obs(0, 0.5, targets=targets), obs(20, 0.5, targets=targets)], MINUTE, MAX_GAP, flat
    )

    assert usage[T].allocations == {
        "a": Allocation(seconds=15.0, busy_seconds=7.5, cost_usd=Decimal("0.015")),
        "b": Allocation(seconds=5.0, busy_seconds=2.5, cost_usd=Decimal("0.005")),
    }


def test_the_equal_rule_splits_evenly_whatever_the_memory() -> None:
    targets = {"a": 30.0, "b": 10.0}
    usage = meter(
        [obs(0, 1.0, targets=targets), obs(20, 1.0, targets=targets)],
        MINUTE,
        MAX_GAP,
        flat,
        split_rule="equal",
    )

    assert usage[T].allocations == {
        "a": Allocation(seconds=10.0, busy_seconds=10.0, cost_usd=Decimal("0.010")),
        "b": Allocation(seconds=10.0, busy_seconds=10.0, cost_usd=Decimal("0.010")),
    }


def test_the_closing_observation_decides_who_used_the_interval() -> None:
    usage = meter(
        [obs(0, targets={"a": 1.0}), obs(20, targets={"b": 1.0}), obs(40, targets={})],
        MINUTE,
        MAX_GAP,
        flat,
    )

    # (T, T+20] was b's; (T+20, T+40] nobody's: billed, but unallocated.
    assert usage[T].observed_seconds == 40.0
    assert usage[T].cost_usd == Decimal("0.040")
    assert usage[T].allocations == {
        "b": Allocation(seconds=20.0, busy_seconds=0.0, cost_usd=Decimal("0.020"))
    }


def test_a_gpu_no_target_uses_is_metered_but_unallocated() -> None:
    usage = meter([obs(0, 0.5), obs(20, 0.5)], MINUTE, MAX_GAP, flat)

    assert usage[T].observed_seconds == 20.0
    assert usage[T].cost_usd == Decimal("0.020")
    assert usage[T].allocations == {}


def test_shares_by_sm_utilization_where_every_target_has_one() -> None:
    memory = {"a": 30.0, "b": 10.0}
    assert shares(memory, "memory", {"a": 0.7, "b": 0.1}) == pytest.approx({"a": 7 / 8, "b": 1 / 8})
    # A target without one, or none busy: the memory share, as before.
    assert shares(memory, "memory", {"a": 0.7}) == {"a": 0.75, "b": 0.25}
    assert shares(memory, "memory", {"a": 0.0, "b": 0.0}) == {"a": 0.75, "b": 0.25}
    # "equal" is the operator's choice: utilization does not override it.
    assert shares(memory, "equal", {"a": 0.7, "b": 0.1}) == {"a": 0.5, "b": 0.5}


def test_allocations_split_by_sm_utilization_when_the_observation_has_it() -> None:
    def sm_obs(seconds: float, sm: Mapping[str, float]) -> Observation:
        return Observation(at(seconds), 0.5, None, {"a": 30.0, "b": 10.0}, dict(sm))

    # (T, T+16] split 7:1 by utilization; (T+16, T+24] by memory (3:1): no utilization then.
    sm = {"a": 0.875, "b": 0.125}  # exact in binary: the sums below are exact
    usage = meter([sm_obs(0, {}), sm_obs(16, sm), sm_obs(24, {})], MINUTE, MAX_GAP, flat)

    assert usage[T].allocations == {
        "a": Allocation(seconds=20.0, busy_seconds=10.0, cost_usd=Decimal("0.020")),
        "b": Allocation(seconds=4.0, busy_seconds=2.0, cost_usd=Decimal("0.004")),
    }
    assert usage[T].cost_usd == Decimal("0.024")  # the GPU's cost itself is unchanged
