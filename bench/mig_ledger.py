"""Benchmark: what pricing each MIG instance adds to the cost ledger's metering and to a
tick's target allocation, next to the same work on a plain GPU, in the same run.

    python bench/mig_ledger.py [--instances 2] [--ticks 360] [--rounds 20]

Per metering: A, ``agent.cost.ledger.meter`` over ``--ticks`` observations of one MIG GPU (10 s
apart: an hour by default) with ``--instances`` instances, each with its slices, memory, GPM
SM activity and one target; baseline, the same observations without MIG (one target per
instance splitting the whole GPU by memory). Per tick: B, ``Allocator.samples`` over a MIG
GPU's process samples (the per-instance target memory it adds); baseline, the same processes
on a plain GPU. Medians of ``--rounds``. No target: CPU costs on the daemon's hot path, which
should stay a small part of a 10 s tick.
"""

from __future__ import annotations

import argparse
import sys
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from agent.cost.allocation import Allocator, TargetPlacement  # noqa: E402
from agent.cost.ledger import Observation, meter  # noqa: E402
from agent.cost.mig import MigGpu, MigInstance  # noqa: E402
from agent.cost.ratecard import GpuPrice  # noqa: E402
from bench.common import ms, timed  # noqa: E402
from collectors.base import Sample  # noqa: E402

T0 = datetime(2026, 11, 2, tzinfo=UTC)
GiB = 2**30


def observations(ticks: int, instances: int, mig: bool) -> list[Observation]:
    targets = {f"t{i}": 8.0 * GiB for i in range(instances)}
    layout = MigGpu(7.0, 80.0 * GiB, {
        f"MIG-{i:04d}": MigInstance(1.0, 10.0 * GiB, 0.1 * (i + 1), True, (f"t{i}",))
        for i in range(instances)
    })  # fmt: skip
    return [
        Observation(T0 + timedelta(seconds=10 * i), None if mig else 0.8, 1000.0 * i,
                    targets=targets, mig=layout if mig else None)
        for i in range(ticks)
    ]  # fmt: skip


def tick_samples(instances: int, mig: bool) -> list[Sample]:
    gpu = {"host": "box", "gpu_uuid": "GPU-0000", "gpu_index": "0"}
    out = [Sample(metric="gpuwatch_gpu_memory_used_bytes", value=40.0 * GiB, ts=T0, labels=gpu)]
    for i in range(instances):
        labels = gpu | {"pid": str(1000 + i), "unit": f"t{i}.service"}
        if mig:
            labels["mig_instance"] = f"MIG-{i:04d}"
        out.append(Sample(metric="gpuwatch_gpu_process_memory_bytes", value=8.0 * GiB, ts=T0,
                          labels=labels))  # fmt: skip
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--instances", type=int, default=2)
    parser.add_argument("--ticks", type=int, default=360)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    n, rounds = args.instances, args.rounds

    price = GpuPrice(Decimal("2.72"))
    with_mig = observations(args.ticks, n, mig=True)
    plain = observations(args.ticks, n, mig=False)
    a = timed(lambda _: meter(with_mig, 60, 30, lambda _: price), rounds)
    base = timed(lambda _: meter(plain, 60, 30, lambda _: price), rounds)
    print(f"one GPU, {args.ticks} ticks 10 s apart, {n} MIG instances, minute buckets")
    print(f"A  meter with the MIG instances:    {ms(a)}")
    print(f"   baseline meter without MIG:      {ms(base)}")

    targets = [TargetPlacement(f"t{i}", f"http://10.0.0.1:{8000 + i}/metrics",
                               unit=f"t{i}.service") for i in range(n)]  # fmt: skip
    allocator = Allocator("box", targets)
    mig_samples, plain_samples = tick_samples(n, mig=True), tick_samples(n, mig=False)
    b = timed(lambda _: allocator.samples(mig_samples, T0), rounds)
    b_base = timed(lambda _: allocator.samples(plain_samples, T0), rounds)
    print(f"B  Allocator.samples, MIG GPU:      {ms(b)}")
    print(f"   baseline on a plain GPU:         {ms(b_base)}")


if __name__ == "__main__":
    main()
