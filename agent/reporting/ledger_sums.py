"""The cost ledger's sums as a report reads them: per GPU (``gpu_usage``) and per target on a
GPU (``gpu_allocations``), over a day or a window.

``None`` is "unknown": energy where no counter or power reading covered the time, CO2 where no
grid intensity was configured. SM figures count only the seconds a profiling source (GPM or
dcgm-exporter) gave SM activity (``sm_observed``); with none, SM activity is unknown rather
than borrowed from NVML's busy flag.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from agent.storage.buckets import sum_opt


@dataclass(frozen=True, slots=True)
class Usage:
    """A GPU's metered sums from the cost ledger (``gpu_usage``)."""

    index: str = ""
    cost: Decimal = Decimal(0)
    idle: Decimal = Decimal(0)
    observed: float = 0.0
    busy: float = 0.0
    unpriced: float = 0.0  # observed seconds no rate priced: the cost is unknown
    sm_observed: float = 0.0  # seconds with a known SM activity
    sm_active: float = 0.0
    sm_idle: Decimal = Decimal(0)  # cost x (1 - SM activity) over sm_observed
    energy: float | None = None  # joules
    co2: float | None = None  # grams
    power_integrated: float = 0.0  # seconds whose energy is power x time (no counter)

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.index or other.index,
            self.cost + other.cost,
            self.idle + other.idle,
            self.observed + other.observed,
            self.busy + other.busy,
            self.unpriced + other.unpriced,
            self.sm_observed + other.sm_observed,
            self.sm_active + other.sm_active,
            self.sm_idle + other.sm_idle,
            sum_opt(self.energy, other.energy),
            sum_opt(self.co2, other.co2),
            self.power_integrated + other.power_integrated,
        )

    @property
    def utilization(self) -> float | None:
        return self.busy / self.observed if self.observed else None

    @property
    def sm_activity(self) -> float | None:
        """SM-active over the seconds SM activity was known; None: never known."""
        return self.sm_active / self.sm_observed if self.sm_observed else None

    @property
    def activity_basis(self) -> str:
        """Which "busy" the GPU's time has: "sm_active" (profiling covered all of it),
        "utilization_flag" (NVML's flag only) or "sm_active+utilization_flag" (part of it)."""
        if self.sm_observed <= 0:
            return "utilization_flag"
        # Profiling starts one tick after the flag (GPM needs two samples): a few seconds short.
        if self.sm_observed >= self.observed - 60:
            return "sm_active"
        return "sm_active+utilization_flag"

    @property
    def energy_basis(self) -> str | None:
        """ "energy_counter", "power_integrated" (no counter: power x time), both "+"-joined,
        or None where the energy is unknown."""
        if self.energy is None:
            return None
        if self.power_integrated <= 0:
            return "energy_counter"
        if self.power_integrated >= self.observed - 60:
            return "power_integrated"
        return "energy_counter+power_integrated"


@dataclass(frozen=True, slots=True)
class Allocated:
    """A target's sums on a GPU from the cost ledger (``gpu_allocations``)."""

    cost: Decimal = Decimal(0)
    seconds: float = 0.0
    busy: float = 0.0
    unpriced: float = 0.0  # seconds no rate priced
    energy: float | None = None  # joules: its share of the GPU's
    co2: float | None = None  # grams

    def __add__(self, other: Allocated) -> Allocated:
        return Allocated(
            self.cost + other.cost,
            self.seconds + other.seconds,
            self.busy + other.busy,
            self.unpriced + other.unpriced,
            sum_opt(self.energy, other.energy),
            sum_opt(self.co2, other.co2),
        )
