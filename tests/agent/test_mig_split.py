"""agent.cost.mig over hand-built MIG layouts: which basis splits a GPU, busy by presence where
GPM gives no SM activity, and parts that add up to the slice's cost to the digit."""

from __future__ import annotations

from decimal import Decimal

from agent.cost.mig import (
    FREE,
    MigGpu,
    MigInstance,
    MigShare,
    add_mig,
    gpu_busy,
    instance_split,
    slice_parts,
)

GiB = 2**30


def test_without_every_slice_count_the_split_falls_back_to_memory_and_says_so() -> None:
    gpu = MigGpu(
        7.0, 80.0 * GiB, {"a": MigInstance(3.0, 40.0 * GiB), "b": MigInstance(None, 20.0 * GiB)}
    )
    split = instance_split(gpu, "slices")
    assert split is not None and split.basis == "memory"
    assert split.shares() == {"a": 0.5, "b": 0.25}
    # Neither basis known for every instance: no split, the GPU is priced whole.
    assert instance_split(MigGpu(None, None, {"a": MigInstance(3.0)}), "slices") is None


def test_without_gpm_an_instance_is_busy_while_a_process_is_on_it() -> None:
    gpu = MigGpu(7.0, None, {
        "held": MigInstance(3.0, held=True, targets=("chat",)),
        "empty": MigInstance(3.0),
    })  # fmt: skip
    split = instance_split(gpu, "slices")
    assert split is not None
    assert gpu_busy(gpu, split.shares()) == 3 / 7
    into: dict[str, MigShare] = {}
    add_mig(into, 60.0, Decimal("0.07"), gpu, split)
    assert (into["held"].cost_usd, into["held"].idle_cost_usd) == (Decimal("0.03"), Decimal(0))
    assert into["empty"].idle_cost_usd == into["empty"].cost_usd == Decimal("0.03")
    assert into[FREE].cost_usd == Decimal("0.01") and into[FREE].slices == 1.0
    assert into["held"].sm_seconds == 0.0  # busy by presence, not SM activity


def test_parts_add_up_exactly_and_a_shared_instance_is_split_equally() -> None:
    gpu = MigGpu(7.0, None, {
        "a": MigInstance(3.0, sm_active=0.35, targets=("x", "y", "z")),
        "b": MigInstance(2.0, sm_active=0.9, targets=("x",)),
    })  # fmt: skip
    split = instance_split(gpu, "slices")
    assert split is not None
    cost = Decimal("0.0123456789")
    into: dict[str, MigShare] = {}
    add_mig(into, 60.0, cost, gpu, split)
    idle, targets = slice_parts(cost, gpu, split)
    assert sum((m.cost_usd or Decimal(0) for m in into.values()), Decimal(0)) == cost.quantize(
        Decimal("1e-12")
    )
    assert idle == sum((m.idle_cost_usd or Decimal(0) for m in into.values()), Decimal(0))
    a, b = into["a"].cost_usd, into["b"].cost_usd
    assert a is not None and b is not None
    # a's three targets a third each, the last in name order taking the rounding; b is x's.
    assert targets["x"] - b == targets["y"] and abs(targets["z"] - targets["y"]) <= Decimal("1e-12")
    assert sum(targets.values(), Decimal(0)) == a + b
