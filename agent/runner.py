"""One collection round: every collector run in isolation, timed, and its health recorded.

node_exporter's ``execute()`` with Home Assistant's logging shape: one line when a collector
starts failing, one when it recovers, nothing in between, so a daemon ticking every 10 s does
not flood the journal while a driver is unloaded.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from collectors.base import CollectError, Collector, NoData, Sample

log = logging.getLogger(__name__)

HEALTH_COLLECTOR = "gpuwatch"


@dataclass(frozen=True, slots=True)
class CollectorRun:
    """What one collector produced in one round, and how it went."""

    collector: str
    ts: datetime
    success: bool
    duration_seconds: float
    samples: tuple[Sample, ...]
    error: str | None = None


@dataclass(frozen=True, slots=True)
class Round:
    """Everything one tick collected: per-collector runs plus the derived health samples."""

    ts: datetime
    runs: tuple[CollectorRun, ...]
    health: tuple[Sample, ...]

    def tagged_samples(self) -> list[tuple[str, Sample]]:
        """(collector name, sample) for every sample of the round, health last."""
        tagged = [(run.collector, s) for run in self.runs for s in run.samples]
        tagged.extend((HEALTH_COLLECTOR, s) for s in self.health)
        return tagged


@dataclass
class CollectorRunner:
    """Runs collectors in isolation and remembers their health between rounds."""

    host: str
    collectors: Sequence[Collector]
    timer: Callable[[], float] = time.perf_counter
    _last_success: dict[str, datetime] = field(default_factory=dict)
    _failing: set[str] = field(default_factory=set)

    def run(self, now: datetime) -> Round:
        runs = tuple(self._run_one(c, now) for c in self.collectors)
        return Round(ts=now, runs=runs, health=tuple(self._health(runs, now)))

    def _run_one(self, collector: Collector, now: datetime) -> CollectorRun:
        start = self.timer()
        error: str | None = None
        samples: tuple[Sample, ...] = ()
        try:
            samples = tuple(collector.collect(now))
        except NoData:
            pass
        except CollectError as exc:
            error = str(exc)
        except Exception as exc:  # the isolation boundary: a bug in one collector spares the rest
            log.exception("collector %s raised unexpectedly", collector.name)
            error = f"{type(exc).__name__}: {exc}"
        duration = self.timer() - start
        self._note(collector.name, error, now)
        return CollectorRun(collector.name, now, error is None, duration, samples, error)

    def _note(self, name: str, error: str | None, now: datetime) -> None:
        if error is None:
            self._last_success[name] = now
            if name in self._failing:
                self._failing.discard(name)
                log.info("collector %s recovered", name)
        elif name not in self._failing:
            self._failing.add(name)
            log.error("collector %s failed: %s", name, error)

    def _health(self, runs: Sequence[CollectorRun], now: datetime) -> list[Sample]:
        out: list[Sample] = []
        for run in runs:
            labels = {"host": self.host, "collector": run.collector}
            out.append(
                Sample(
                    metric="gpuwatch_collector_success",
                    value=float(run.success),
                    labels=labels,
                    ts=now,
                )
            )
            out.append(
                Sample(
                    metric="gpuwatch_collector_duration_seconds",
                    value=run.duration_seconds,
                    labels=labels,
                    ts=now,
                )
            )
            last = self._last_success.get(run.collector)
            if last is not None:  # never succeeded: absent, not a 1970 timestamp
                out.append(
                    Sample(
                        metric="gpuwatch_collector_last_success_timestamp_seconds",
                        value=last.timestamp(),
                        labels=labels,
                        ts=now,
                    )
                )
        return out
