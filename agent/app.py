"""Wiring: from a Config to the collectors, the runner and the store, and one tick over them."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime

from sqlalchemy.engine import Engine
from sqlalchemy.exc import SQLAlchemyError

from agent.allocation import Allocator, TargetPlacement
from agent.billing import BillingJob
from agent.config import Config, TargetConfig
from agent.cost_metrics import cost_samples, hourly_prices
from agent.db import open_database
from agent.rollup import Rollup
from agent.runner import CollectorRunner, Round
from agent.store import Store
from collectors.base import Collector, Sample
from collectors.scrape import ScrapeCollector, TargetSpec

log = logging.getLogger(__name__)

Clock = Callable[[], datetime]


def utc_now() -> datetime:
    return datetime.now(UTC)


def build_collectors(config: Config) -> list[Collector]:
    """The enabled collectors, in the order they run each tick: NVML, then one per target."""
    collectors: list[Collector] = []
    if config.collectors.nvml.enabled:
        from collectors.nvml import NvmlCollector  # imports pynvml, which needs no GPU to import

        collectors.append(NvmlCollector(host=config.host))
    collectors.extend(ScrapeCollector(target_spec(t), host=config.host) for t in config.targets)
    return collectors


def target_spec(target: TargetConfig) -> TargetSpec:
    """The collector's view of a configured target (the token revealed only to its client)."""
    return TargetSpec(
        name=target.name,
        url=target.url,
        engine=target.engine,
        model=target.model,
        timeout_seconds=target.timeout_seconds,
        max_bytes=target.max_response_bytes,
        bearer_token=target.bearer_token.reveal() if target.bearer_token else None,
    )


@dataclass
class App:
    """What one daemon (or one `collect --once`) works with."""

    config: Config
    engine: Engine
    store: Store
    runner: CollectorRunner
    allocator: Allocator
    rollup: Rollup
    billing: BillingJob
    _store_failing: bool = False

    @classmethod
    def open(cls, config: Config, collectors: list[Collector] | None = None) -> App:
        """Open the database (SQLite upgraded, PostgreSQL checked) and build the collectors."""
        engine = open_database(config.database_url)
        chosen = build_collectors(config) if collectors is None else collectors
        placements = [TargetPlacement(t.name, t.url, t.unit, t.gpus) for t in config.targets]
        return cls(
            config,
            engine,
            Store(engine, config.host),
            CollectorRunner(config.host, chosen),
            Allocator(config.host, placements),
            Rollup.from_config(engine, config),
            BillingJob(engine, config.billing),
        )

    def tick(self, now: datetime) -> Round:
        """Collect once and store the round in one transaction.

        A failed write is logged and the round still returned (and exposed): the database being
        briefly unavailable must not blind /metrics, and the next tick writes again.
        """
        round_ = self.runner.run(now)
        samples = [s for _, s in round_.tagged_samples()]
        derived = self.allocator.samples(samples, now) + hourly_prices(self.config, samples, now)
        round_ = replace(round_, derived=round_.derived + tuple(derived))
        try:
            self.store.write_round(round_)
        except SQLAlchemyError as exc:
            if not self._store_failing:  # once, not every tick while the database is away
                log.error("storing rounds failed (retrying every tick): %s", _brief(exc))
            self._store_failing = True
        else:
            if self._store_failing:
                log.info("storing rounds recovered")
            self._store_failing = False
        return round_

    def roll_up(self, now: datetime) -> list[Sample]:
        """Roll up what is complete, then recompute the cost signals from the rollups."""
        self.rollup.run(now)
        return cost_samples(self.engine, self.config, now)

    def close(self) -> None:
        """Release the collectors (NVML session, HTTP clients), the workers and the database."""
        self.runner.close()
        self.billing.close()
        for collector in self.runner.collectors:
            close = getattr(collector, "close", None)
            if callable(close):
                close()
        self.engine.dispose()


def _brief(exc: SQLAlchemyError) -> str:
    # SQLAlchemy's str() appends the full SQL and parameters; the first line is the cause.
    cause = getattr(exc, "orig", None) or exc
    return (str(cause).splitlines() or [type(cause).__name__])[0]
