"""One collection round: every collector run in isolation, timed, and its health recorded.

node_exporter's ``execute()`` with Home Assistant's logging shape: one line when a collector
starts failing, one when it recovers, nothing in between, so a daemon ticking every 10 s does
not flood the journal while a driver is unloaded.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from datetime import datetime

from collectors.base import CollectError, Collector, NoData, Sample
from collectors.values import checked
from foundation.redact import redact_urls

log = logging.getLogger(__name__)

DERIVED_COLLECTOR = "gpuwatch"
# A scrape target reporting this for a GPU profiles it (dcgm-exporter's DCGM_FI_PROF_*); NVML's
# GPM then stays unarmed there, as the two share the GPU's performance counters.
PROFILED_SIGNAL = "gpuwatch_gpu_sm_active_ratio"


@dataclass(frozen=True, slots=True)
class CollectorRun:
    """What one collector produced in one round, and how it went."""

    collector: str
    ts: datetime
    success: bool
    duration_seconds: float
    samples: tuple[Sample, ...]
    error: str | None = None
    target: str | None = None  # the scrape target this collector reads, if any


@dataclass(frozen=True, slots=True)
class Round:
    """Everything one tick collected: per-collector runs plus the samples gpuwatch derives
    itself (collector health, target allocation), stored under the collector "gpuwatch"."""

    ts: datetime
    runs: tuple[CollectorRun, ...]
    derived: tuple[Sample, ...]

    def tagged_samples(self) -> list[tuple[str, Sample]]:
        """(collector name, sample) for every sample of the round, derived ones last."""
        tagged = [(run.collector, s) for run in self.runs for s in run.samples]
        tagged.extend((DERIVED_COLLECTOR, s) for s in self.derived)
        return tagged


@dataclass(frozen=True, slots=True)
class _Outcome:
    samples: tuple[Sample, ...]
    error: str | None
    duration: float


@dataclass
class CollectorRunner:
    """Runs collectors in isolation and remembers their health between rounds.

    Collectors with a ``timeout_seconds`` (network scrapes) run concurrently on a thread pool and
    are given up on after that long, so a slow target never delays the others or the tick by
    more than its own timeout. The rest (NVML) run in the calling thread: they are local, and a
    hung driver call is the systemd watchdog's business, not something a thread could undo.
    """

    host: str
    collectors: Sequence[Collector]
    timer: Callable[[], float] = time.perf_counter
    grace_seconds: float = 1.0
    _last_success: dict[str, datetime] = field(default_factory=dict)
    _failing: set[str] = field(default_factory=set)
    # Samples dropped for impossible values, per (collector, reason), since start; and the
    # collectors whose last round dropped some (logged when that starts and when it stops).
    _dropped: Counter[tuple[str, str]] = field(default_factory=Counter)
    _dropping: set[str] = field(default_factory=set)
    _pool: ThreadPoolExecutor | None = None

    def run(self, now: datetime) -> Round:
        timed = [c for c in self.collectors if _timeout(c) is not None]
        started = {c.name: (self.timer(), self._submit(c, now)) for c in timed}
        outcomes = {c.name: self._attempt(c, now) for c in self.collectors if c not in timed}
        for c in timed:
            start, future = started[c.name]
            outcomes[c.name] = self._await(c, start, future)
        runs = tuple(self._record(c, now, outcomes[c.name]) for c in self.collectors)
        self._tell_profiled(runs)
        self._tell_models(runs)
        return Round(ts=now, runs=runs, derived=tuple(self._health(runs, now)))

    def remember(self, last_success: Mapping[str, datetime]) -> None:
        """Last successes from before this process (collectors failing when it last stopped),
        so "missed collections" and the exposed last-success time go on across a restart."""
        for name, at in last_success.items():
            self._last_success.setdefault(name, at)
            self._failing.add(name)  # already failing: no "failed" line again at the first run

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._pool = None

    def _submit(self, collector: Collector, now: datetime) -> Future[_Outcome]:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=16, thread_name_prefix="gpuwatch-scrape")
        return self._pool.submit(self._attempt, collector, now)

    def _await(self, collector: Collector, start: float, future: Future[_Outcome]) -> _Outcome:
        limit = (_timeout(collector) or 0.0) + self.grace_seconds
        remaining = max(0.0, start + limit - self.timer())
        try:
            return future.result(timeout=remaining)
        except FutureTimeout:
            # The thread cannot be killed; its late result is simply never looked at.
            error = f"did not finish within {limit:g}s"
            return _Outcome((), error, self.timer() - start)

    def _attempt(self, collector: Collector, now: datetime) -> _Outcome:
        start = self.timer()
        error: str | None = None
        samples: tuple[Sample, ...] = ()
        try:
            samples = tuple(collector.collect(now))
        except NoData:
            pass
        except CollectError as exc:
            error = redact_urls(str(exc))  # any collector's URL, without credentials
        except Exception as exc:  # the isolation boundary: a bug in one collector spares the rest
            log.exception("collector %s raised unexpectedly", collector.name)
            error = redact_urls(f"{type(exc).__name__}: {exc}")
        return _Outcome(samples, error, self.timer() - start)

    def _record(self, collector: Collector, now: datetime, outcome: _Outcome) -> CollectorRun:
        self._note(collector.name, outcome.error, now)
        samples, dropped = checked(outcome.samples)
        self._note_dropped(collector.name, dropped)
        return CollectorRun(
            collector.name,
            now,
            outcome.error is None,
            outcome.duration,
            samples,
            outcome.error,
            getattr(collector, "target", None),
        )

    def _tell_profiled(self, runs: Sequence[CollectorRun]) -> None:
        """Hand the GPUs a scrape target profiled this round to collectors that take it (NVML's
        ``profiled_elsewhere``), for their next round."""
        takers = [c for c in self.collectors if callable(getattr(c, "profiled_elsewhere", None))]
        if not takers:
            return
        profiled = frozenset(
            s.labels["gpu_uuid"]
            for run in runs
            if run.target is not None
            for s in run.samples
            if s.metric == PROFILED_SIGNAL and "gpu_uuid" in s.labels
        )
        for collector in takers:
            collector.profiled_elsewhere(profiled)  # type: ignore[attr-defined]

    def _tell_models(self, runs: Sequence[CollectorRun]) -> None:
        """Hand each target's successful scrape to collectors that take it (the OTLP spans'
        ``scraped``: a span without a model is its target's). The samples are handed as they
        are; only a span that needs its target's model makes the taker look into them."""
        takers = [c for c in self.collectors if callable(getattr(c, "scraped", None))]
        if not takers:
            return
        samples = {run.target: run.samples for run in runs if run.target and run.success}
        for collector in takers:
            collector.scraped(samples)  # type: ignore[attr-defined]

    def _note_dropped(self, name: str, dropped: Counter[str]) -> None:
        for reason, count in dropped.items():
            self._dropped[(name, reason)] += count
        if dropped and name not in self._dropping:
            self._dropping.add(name)
            shown = ", ".join(f"{n} {reason.replace('_', '-')}" for reason, n in dropped.items())
            log.warning("collector %s: dropped %s sample value(s); the rest is kept", name, shown)
        elif not dropped and name in self._dropping:
            self._dropping.discard(name)
            log.info("collector %s: sample values valid again", name)

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

        def add(metric: str, value: float, labels: dict[str, str]) -> None:
            out.append(Sample(metric=metric, value=value, labels=labels, ts=now))

        for run in runs:
            labels = {"host": self.host, "collector": run.collector}
            add("gpuwatch_collector_success", float(run.success), labels)
            add("gpuwatch_collector_duration_seconds", run.duration_seconds, labels)
            last = self._last_success.get(run.collector)
            if last is not None:  # never succeeded: absent, not a 1970 timestamp
                add("gpuwatch_collector_last_success_timestamp_seconds", last.timestamp(), labels)
            if run.target is not None:
                target = {"host": self.host, "target": run.target}
                add("gpuwatch_target_up", float(run.success), target)
                add("gpuwatch_target_scrape_duration_seconds", run.duration_seconds, target)
        for (collector, reason), count in sorted(self._dropped.items()):
            labels = {"host": self.host, "collector": collector, "reason": reason}
            add("gpuwatch_samples_dropped_total", float(count), labels)
        return out


def _timeout(collector: Collector) -> float | None:
    value = getattr(collector, "timeout_seconds", None)
    return float(value) if isinstance(value, int | float) else None
