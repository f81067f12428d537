"""bench/cost.py's fleet: hosts of 8 GPUs, the models' serving targets round-robin over the
hosts (each with its token rate and one engine restart), and the rate card (a per-GPU price,
an instance price, a mid-month price change and an owned host)."""

from __future__ import annotations

import math
import random
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from agent.config.rates import Rate
from agent.cost.ratecard import RateCard

T0 = datetime(2026, 10, 31, tzinfo=UTC)  # 30 days from here end on 2026-11-30
GPUS_PER_HOST = 8
TAIL = timedelta(minutes=10)  # ticks past the window's end, so its last hour is complete
MODELS = (
    "meta-llama/Llama-3.1-70B-Instruct",
    "Qwen/Qwen2.5-72B-Instruct",
    "mistralai/Mixtral-8x22B-Instruct-v0.1",
    "deepseek-ai/DeepSeek-R1-Distill-Llama-70B",
    "meta-llama/Llama-3.3-70B-Instruct",
    "Qwen/Qwen2.5-Coder-32B-Instruct",
    "google/gemma-2-27b-it",
    "mistralai/Mistral-Large-Instruct-2411",
)


# -- the fleet ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Gpu:
    host: str
    index: int
    uuid: str
    target: str | None  # the target serving on it, None: idle (billed, unallocated)
    phase: float  # of its daily utilisation wave


@dataclass(frozen=True, slots=True)
class Target:
    name: str
    host: str
    engine: str
    model: str
    gpus: tuple[int, ...]  # indices on its host
    tokens_per_busy_second: float  # per GPU
    restart_tick: int  # a failed scrape at this tick, then the counter from 0


@dataclass(frozen=True, slots=True)
class Fleet:
    hosts: tuple[str, ...]
    gpus: tuple[Gpu, ...]
    targets: tuple[Target, ...]
    ticks: int
    step: float
    histograms: bool = False  # also latency histograms and GPU memory (what a report reads)

    def host_gpus(self, host: str) -> list[Gpu]:
        return [g for g in self.gpus if g.host == host]

    def host_targets(self, host: str) -> list[Target]:
        return [t for t in self.targets if t.host == host]

    def offset(self, host_number: int) -> float:
        """Seconds into the minute at which this host's daemon ticks."""
        return (3.0 + 7.3 * host_number) % max(self.step - 1.0, 1.0)


def build_fleet(
    days: float, gpus: int, models: int, step: float, *, histograms: bool = False
) -> Fleet:
    rng = random.Random(20261130)
    host_count = math.ceil(gpus / GPUS_PER_HOST)
    hosts = tuple(f"gpu-node-{h + 1:02d}" for h in range(host_count))
    ticks = int((days * 86400 + TAIL.total_seconds()) // step)
    placed: dict[str, list[int]] = defaultdict(list)  # host -> model numbers
    for m in range(models):
        placed[hosts[m % host_count]].append(m)
    gpu_list: list[Gpu] = []
    targets: list[Target] = []
    for h, host in enumerate(hosts):
        count = min(GPUS_PER_HOST, gpus - h * GPUS_PER_HOST)
        names = [f"{'vllm' if m % 2 == 0 else 'sglang'}-{m}" for m in placed[host]]
        for i in range(count):
            target = names[i % len(names)] if names else None
            uuid = f"GPU-{h:04x}{i:04x}-5a1e-4c0d-8e3b-{rng.getrandbits(48):012x}"
            gpu_list.append(Gpu(host, i, uuid, target, rng.uniform(0, 2 * math.pi)))
        for j, m in enumerate(placed[host]):
            own = tuple(i for i in range(count) if i % len(names) == j)
            targets.append(
                Target(
                    names[j], host, "vllm" if m % 2 == 0 else "sglang",
                    MODELS[m] if m < len(MODELS) else f"org/model-{m}", own,
                    rng.uniform(300.0, 900.0), rng.randrange(ticks // 4, 3 * ticks // 4),
                )
            )  # fmt: skip
    return Fleet(hosts, tuple(gpu_list), tuple(targets), ticks, step, histograms)


def rate_card(fleet: Fleet, days: int) -> RateCard:
    hosts = fleet.hosts
    rates = [Rate(usd_per_hour=Decimal("2.49"))]
    if len(hosts) > 1:  # Lambda-style: the whole 8-GPU instance per hour
        rates.append(Rate(host=hosts[1], usd_per_hour_instance=Decimal("23.92")))
    if len(hosts) > 2:  # a price change mid-window
        change = T0 + timedelta(days=days / 2, hours=5)
        rates.append(Rate(host=hosts[2], usd_per_hour=Decimal("2.99"), valid_to=change))
        rates.append(Rate(host=hosts[2], usd_per_hour=Decimal("2.19"), valid_from=change))
    if len(hosts) > 3:  # owned: amortised purchase plus energy
        rates.append(
            Rate(host=hosts[3], purchase_usd=Decimal("30000"), amortize_months=36,
                 usd_per_kwh=Decimal("0.12"))
        )  # fmt: skip
    return RateCard(tuple(rates))
