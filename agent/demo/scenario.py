"""The demo's fleet and its month: what runs where, what it costs, and how busy it is when.

Two hosts, six GPUs of two kinds, three models (two on vLLM, one on SGLang) and a spare GPU
nobody uses. The story a month of it tells, all of it deterministic (no randomness: the same
instant always gives the same load, so a test can rely on it):

- a working-day curve (busy afternoons UTC, quiet nights, weekends at 60 %);
- idle stretches: the SGLang host serves nothing at night, the small vLLM model nothing for
  three days (a client paused), the H100 host's fourth GPU never;
- a price change: the H100s get cheaper on day 12 of the history;
- an engine restart: the 70B model's vLLM restarts on day 19 (its counters start over, and the
  round it is down is a failed scrape);
- a stress afternoon on day 22: the 70B model's queue and KV cache fill up.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from agent.sim.fakenvml.hardware import GiB
from agent.sim.traffic import Profile

# Load levels: what the engines' gauges say at a given demand (running, waiting, KV usage).
LEVELS: dict[str, tuple[int, int, float]] = {
    "idle": (0, 0, 0.0),
    "low": (4, 0, 0.12),
    "mid": (14, 0, 0.38),
    "high": (32, 2, 0.71),
    "peak": (48, 25, 0.97),
}

# A plausible chat mix (the simulator's default cycle is the tests' edge cases: 150 s queues).
# prompt, cached, generated, max_tokens, n, finish, streaming, preemptions, queue s, prefill s
# fmt: off
PROFILES: tuple[Profile, ...] = (
    Profile(850, 512, 240, 1024, 1, "stop", True, 0, 0.004, 0.061),
    Profile(1900, 1024, 410, 1024, 1, "stop", True, 0, 0.011, 0.118),
    Profile(320, 0, 96, 512, 1, "stop", True, 0, 0.002, 0.031),
    Profile(3200, 2048, 620, 2048, 1, "stop", False, 0, 0.035, 0.214),
    Profile(640, 256, 512, 512, 1, "length", True, 0, 0.006, 0.052),
    Profile(1200, 768, 60, 1024, 1, "abort", True, 0, 0.009, 0.083),
    Profile(450, 0, 180, 1024, 1, "stop", True, 0, 0.003, 0.044),
    Profile(2600, 2048, 350, 1024, 1, "stop", True, 1, 0.052, 0.171),
    Profile(900, 512, 140, 512, 1, "stop", False, 0, 0.005, 0.069),
    Profile(5200, 4096, 280, 1024, 1, "stop", True, 0, 0.120, 0.395),
    Profile(700, 0, 220, 1024, 1, "stop", True, 0, 0.004, 0.058),
    Profile(1500, 1024, 300, 1024, 1, "stop", True, 0, 0.014, 0.097),
)
# fmt: on
ITL_CYCLE: tuple[float, ...] = (
    0.021,
    0.018,
    0.025,
    0.032,
    0.019,
    0.045,
    0.022,
    0.016,
    0.028,
    0.035,
    0.027,
    0.02,
    0.038,
)  # fmt: skip
CYCLE = len(PROFILES)  # requests per cycle: the engines serve whole cycles (see engines.py)
# And per cycle one stream whose client leaves after 60 tokens (the first row, 180 to go):
# vLLM counts its tokens as generated, no request as finished, so the report shows abandoned
# work. Always the same row, so that every cycle adds the same to every counter.
DROPPED_ROW, DROPPED_AFTER_TOKENS = 0, 60


@dataclass(frozen=True, slots=True)
class GpuKind:
    name: str
    memory: int  # bytes
    idle_watts: float
    busy_watts: float
    limit_watts: float
    gpm: bool = False  # NVML's GPM (SM activity): Hopper and newer, not Ada


H100 = GpuKind("NVIDIA H100 80GB HBM3", 80 * GiB, 72.0, 640.0, 700.0, gpm=True)
L40S = GpuKind("NVIDIA L40S", 48 * GiB, 36.0, 310.0, 350.0)


@dataclass(frozen=True, slots=True)
class DemoTarget:
    name: str
    model: str
    version: str  # the simulator's /metrics version (agent.sim.render.VERSIONS)
    engine: str  # the collector's engine name
    gpus: tuple[int, ...]  # GPU indexes it serves on
    peak_requests_per_hour: int


@dataclass(frozen=True, slots=True)
class DemoHost:
    name: str
    kind: GpuKind
    gpus: int
    targets: tuple[DemoTarget, ...]

    def uuid(self, index: int) -> str:
        h = hashlib.sha256(f"gpuwatch-demo/{self.name}/{index}".encode()).hexdigest()
        return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"

    def target_on(self, index: int) -> DemoTarget | None:
        return next((t for t in self.targets if index in t.gpus), None)


LLAMA = DemoTarget("llama-70b", "llama-3.1-70b", "vllm-0.10", "vllm", (0, 1), 5400)
QWEN = DemoTarget("qwen-7b", "qwen2.5-7b", "vllm-0.33", "vllm", (2,), 4800)  # MFU estimates
MISTRAL = DemoTarget("mistral-7b", "mistral-7b-instruct", "sglang-0.5", "sglang", (0, 1), 3600)
HOSTS = (
    DemoHost("demo-h100", H100, 4, (LLAMA, QWEN)),
    DemoHost("demo-l40s", L40S, 2, (MISTRAL,)),
)

H100_PRICE, H100_PRICE_LATER, L40S_PRICE = Decimal("2.99"), Decimal("2.49"), Decimal("0.99")
PRICE_CHANGE_DAY = 12
RESTART_DAY, RESTART_HOUR = 19, 3
STRESS_DAY, STRESS_HOURS = 22, (11, 19)
QWEN_PAUSED_DAYS = (7, 10)  # [from, to) days of the history


@dataclass(frozen=True, slots=True)
class Month:
    """The history's span: ``start`` (a UTC midnight) to ``end``; events are days after start."""

    start: datetime
    end: datetime

    def day(self, n: int, hour: int = 0) -> datetime:
        return self.start + timedelta(days=n, hours=hour)

    @property
    def days(self) -> int:
        return (self.end - self.start).days

    def event_day(self, day: int) -> int:
        """An event's day, moved in to fit a shorter history (tests use a few days)."""
        return min(day, max(0, self.days - 2))


def demand(target: DemoTarget, at: datetime, month: Month) -> float:
    """The target's load at ``at``, 0 to 1: a working-day curve, the idle stretches."""
    day = (at - month.start).days
    paused = month.event_day(QWEN_PAUSED_DAYS[0]), month.event_day(QWEN_PAUSED_DAYS[1])
    if target is QWEN and paused[0] <= day < max(paused[1], paused[0] + 1):
        return 0.0
    hour = at.hour + at.minute / 60
    if target is MISTRAL and hour < 6:
        return 0.0
    daylight = max(0.0, math.sin(math.pi * (hour - 6) / 16)) if 6 <= hour <= 22 else 0.0
    weekend = 0.6 if at.weekday() >= 5 else 1.0
    return min(1.0, (0.12 + 0.85 * daylight) * weekend * _wobble(target.name, at))


def _wobble(name: str, at: datetime) -> float:
    """A deterministic +-12 % per target and hour, so days do not look copied."""
    key = f"{name}/{at.year}-{at.month}-{at.day}-{at.hour}".encode()
    return 0.88 + 0.24 * hashlib.sha256(key).digest()[0] / 255


def level(target: DemoTarget, at: datetime, month: Month, load: float) -> str:
    """The gauges' level at ``at``: the stress afternoon, else from the demand."""
    stressed = at.date() == month.day(month.event_day(STRESS_DAY)).date()
    if target is LLAMA and stressed and STRESS_HOURS[0] <= at.hour < STRESS_HOURS[1]:
        return "peak"
    if load <= 0:
        return "idle"
    return "low" if load < 0.3 else "mid" if load < 0.7 else "high"


def restart_at(target: DemoTarget, month: Month) -> datetime | None:
    """When the target's engine restarts in this history, if it does."""
    return month.day(month.event_day(RESTART_DAY), RESTART_HOUR) if target is LLAMA else None


def price_change_at(month: Month) -> datetime:
    return month.day(month.event_day(PRICE_CHANGE_DAY))
