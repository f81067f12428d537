"""What people read about how shared GPUs were split (agent.cost.split_basis)."""

from __future__ import annotations

from agent.cost.split_basis import SplitBasis, shared_note

NAMES = {("box", "GPU-a"): "box GPU 0", ("box", "GPU-b"): "box GPU 1"}


def test_each_rule_and_a_mix_are_said_as_such() -> None:
    assert SplitBasis(sm_ticks=60).basis == "sm_utilization"
    assert SplitBasis(memory_ticks=60).basis == "memory"
    mixed = SplitBasis(sm_ticks=45, memory_ticks=15)
    assert mixed.basis == "sm_utilization+memory"
    assert mixed.describe() == "split by SM utilization 75% of the time, else by memory share"


def test_the_note_groups_gpus_by_rule_and_says_nothing_without_a_shared_gpu() -> None:
    bases = {("box", "GPU-a"): SplitBasis(sm_ticks=60), ("box", "GPU-b"): SplitBasis(sm_ticks=9)}
    assert shared_note(bases, NAMES, "memory") == (
        "shared GPUs: box GPU 0, box GPU 1 split by SM utilization"
    )
    assert shared_note({}, NAMES, "memory") == ""
    # The operator chose equal shares: utilization and memory played no part.
    assert shared_note(bases, NAMES, "equal") == "shared GPUs split equally (cost.shared_gpu_split)"
