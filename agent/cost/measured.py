"""The workload `gpuwatch breakeven` measures from stored data, per day of *observed* time.

A window of "30d" on a box watched for 12 minutes holds 12 minutes of data: spreading its
requests over 30 calendar days made a load 3,600 times too small. So the requests per day are
the requests over the hours the GPUs were actually observed (the cost ledger's metered time)
x 24, and the result says over how many hours it was measured; below ``[cost] min_observed``
the per-day figures are withheld (:class:`Measured.withheld`).

Observed hours are the longest any GPU was metered in the window: the fleet's GPUs are watched
together (one daemon per box, ticking every few seconds), so that is the time the load was seen.
GPU time per request (busy GPU-seconds of the serving targets / finished requests) does not
depend on the time base at all, so neither does the crossover.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from agent.config.settings import Config
from agent.cost.breakeven import Workload, hours
from foundation.errors import GpuwatchError

HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class Measured:
    """A measured workload (per day of observed time) and the time it stands on."""

    workload: Workload
    observed_hours: float  # wall-clock hours the GPUs were observed in the window
    gpu_hours: float  # GPU-hours metered (observed hours x GPUs, for a fleet watched together)
    min_observed_hours: float  # [cost] min_observed, in hours

    @property
    def basis(self) -> str:
        """'measured over 0.2 h' (how the output names its source)."""
        return f"measured over {hours(self.observed_hours)}"

    @property
    def withheld(self) -> str | None:
        """Why per-day figures are not stated; None when enough time was observed."""
        return withheld_reason(self.observed_hours, self.min_observed_hours)


def withheld_reason(observed_hours: float, min_hours: float) -> str | None:
    """The reason per-day and per-month figures are withheld, or None when they stand."""
    if observed_hours >= min_hours:
        return None
    return (
        f"only {hours(observed_hours)} observed: per-day and per-month figures need at least "
        f"{hours(min_hours)} ([cost] min_observed), so they are withheld"
    )


def per_day(amount: float, observed_hours: float) -> Decimal:
    """``amount`` over the observed hours, scaled to a day of observed time."""
    return Decimal(repr(amount)) * 24 / Decimal(repr(observed_hours))


def measure(config: Config, window_seconds: float, now: datetime, label: str) -> Measured:
    """Requests, GPU time per request and output tokens per request over the window, read as
    `gpuwatch cost` reads it (everything stored, agent.cost.provisional)."""
    from agent.cost.provisional import reading
    from agent.cost.summarize import summarize_on
    from agent.storage.db import open_database

    end = now.replace(second=0, microsecond=0)
    start = end - timedelta(seconds=window_seconds)
    engine = open_database(config.database_url)
    try:
        with reading(engine, config, (), (start, end)) as (conn, coverage):
            s = summarize_on(conn, *coverage.window, useful=config.cost.useful_tokens)
    finally:
        engine.dispose()
    observed = max((g.observed_seconds for g in s.gpus), default=0.0) / HOUR
    if s.requests_finished <= 0 or observed <= 0:
        raise GpuwatchError(
            f"no finished requests on metered GPUs stored over the last {label}: give "
            "--requests-per-day and --gpu-seconds-per-request, or let gpuwatch collect first"
        )
    requests = Decimal(repr(s.requests_finished))
    busy = Decimal(repr(s.allocated_busy_seconds))
    tokens = Decimal(repr(s.fleet.output_tokens))
    workload = Workload(
        requests_per_day=per_day(s.requests_finished, observed),
        gpu_seconds_per_request=busy / requests,
        tokens_per_request=tokens / requests if tokens else None,
    )
    return Measured(workload, observed, s.gpu_seconds / HOUR, config.cost.min_observed / HOUR)
