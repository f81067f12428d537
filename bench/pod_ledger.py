"""Benchmark: what splitting each GPU's cost by Kubernetes pod adds to a tick and to the cost
ledger's metering, next to the same work without pods, in the same run.

    python bench/pod_ledger.py [--gpus 8] [--pods 4] [--ticks 360] [--rounds 20]

A node with ``--gpus`` GPUs, each time-sliced by ``--pods`` pods (one process each, with SM
utilization). Measured, per tick: A, ``agent.cost.pods.pod_samples`` over the tick's NVML and
kubelet samples (what the App derives each tick on Kubernetes); baseline, the target
``Allocator.samples`` over the same samples (the derivation every tick already pays). Per
metering: B, ``agent.cost.ledger.meter`` over ``--ticks`` observations of one GPU (10 s
apart: an hour by default) with the pods' shares; baseline, the same observations without
pods. Medians of ``--rounds``. No target: these are CPU costs on the daemon's hot path, which
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
from agent.cost.pods import pod_samples  # noqa: E402
from agent.cost.ratecard import GpuPrice  # noqa: E402
from bench.common import ms, timed  # noqa: E402
from collectors.base import Sample  # noqa: E402

T0 = datetime(2026, 11, 2, tzinfo=UTC)
GiB = 2**30


def tick_samples(gpus: int, pods: int) -> list[Sample]:
    out = [Sample(metric="gpuwatch_collector_success", value=1.0, ts=T0,
                  labels={"collector": "kubelet"})]  # fmt: skip
    for g in range(gpus):
        gpu = {"host": "node", "gpu_uuid": f"GPU-{g:04d}", "gpu_index": str(g)}
        out.append(Sample(metric="gpuwatch_gpu_memory_used_bytes", value=40.0 * GiB, ts=T0,
                          labels=gpu))  # fmt: skip
        for p in range(pods):
            pid = str(1000 + g * pods + p)
            labels = gpu | {"pid": pid, "unit": f"cri-{pid}", "namespace": f"ns-{p % 2}",
                            "pod": f"pod-{g}-{p}", "container": "c"}  # fmt: skip
            out.append(Sample(metric="gpuwatch_gpu_process_memory_bytes", value=8.0 * GiB,
                              ts=T0, labels=labels))  # fmt: skip
            out.append(Sample(metric="gpuwatch_gpu_process_utilization_ratio", value=0.2,
                              ts=T0, labels=labels))  # fmt: skip
    return out


def observations(ticks: int, pods: int, with_pods: bool) -> list[Observation]:
    shares = {(f"ns-{p % 2}", f"pod-{p}"): 8.0 * GiB for p in range(pods)}
    sm = {key: 0.1 * (i + 1) for i, key in enumerate(shares)}
    return [
        Observation(T0 + timedelta(seconds=10 * i), 0.8, 1000.0 * i,
                    pods=shares if with_pods else {}, pod_sm=sm if with_pods else {})
        for i in range(ticks)
    ]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--pods", type=int, default=4)
    parser.add_argument("--ticks", type=int, default=360)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()

    samples = tick_samples(args.gpus, args.pods)
    remote = [TargetPlacement(name, f"http://10.0.0.1:{port}/metrics")
              for name, port in (("a", 8000), ("b", 8001))]  # fmt: skip
    allocator = Allocator("node", remote)
    of_pid = allocator.target_of_pid
    rounds = args.rounds
    pods = timed(lambda _: pod_samples("node", samples, T0, of_pid), rounds)
    targets = timed(lambda _: allocator.samples(samples, T0), rounds)
    print(f"node: {args.gpus} GPUs x {args.pods} pods, {len(samples)} samples a tick")
    print(f"A  pod_samples per tick:            {ms(pods)}")
    print(f"   baseline Allocator.samples:      {ms(targets)}")

    price = GpuPrice(Decimal("2.72"))
    plain = observations(args.ticks, args.pods, with_pods=False)
    split = observations(args.ticks, args.pods, with_pods=True)
    with_pods = timed(lambda _: meter(split, 60, 30, lambda _: price), rounds)
    without = timed(lambda _: meter(plain, 60, 30, lambda _: price), rounds)
    print(f"one GPU, {args.ticks} ticks 10 s apart, {args.pods} pods, minute buckets")
    print(f"B  meter with the pods' split:      {ms(with_pods)}")
    print(f"   baseline meter without pods:     {ms(without)}")


if __name__ == "__main__":
    main()
