"""gpuwatch's own /metrics: the latest round under canonical names, via prometheus_client.

A custom Collector (client_python's protocol) yields whatever the last tick produced, so a
series that disappears (a GPU lost, a field not supported) disappears from /metrics too,
instead of lingering with a stale value as a Gauge set once would.
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Iterator, Sequence

from prometheus_client.core import Metric
from prometheus_client.registry import CollectorRegistry

from agent.collect.runner import Round
from collectors.base import Sample
from collectors.signals import SIGNALS, Kind, signal_of


class LatestRoundCollector:
    """Exposes the most recent :class:`Round`; thread-safe swap from the tick thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._samples: tuple[Sample, ...] = ()
        self._cost: tuple[Sample, ...] = ()  # refreshed after each rollup, not each tick
        self._fleet: tuple[Sample, ...] = ()  # leadership, refreshed when it is checked
        self._daemon: tuple[Sample, ...] = ()  # the daemon's own counters (missed ticks)
        self._billing: tuple[Sample, ...] = ()  # each billing source's health, hourly

    def update(self, round_: Round) -> None:
        samples = tuple(s for _, s in round_.tagged_samples())
        with self._lock:
            self._samples = samples

    def update_cost(self, samples: Sequence[Sample]) -> None:
        with self._lock:
            self._cost = tuple(samples)

    def update_fleet(self, samples: Sequence[Sample]) -> None:
        with self._lock:
            self._fleet = tuple(samples)

    def update_daemon(self, samples: Sequence[Sample]) -> None:
        with self._lock:
            self._daemon = tuple(samples)

    def update_billing(self, samples: Sequence[Sample]) -> None:
        with self._lock:
            self._billing = tuple(samples)

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            samples = self._samples + self._cost + self._fleet + self._daemon + self._billing
        families: dict[str, list[Sample]] = defaultdict(list)
        for s in samples:
            if s.metric.endswith("_created"):
                continue  # stored to see engine restarts; not part of our own exposition
            signal = signal_of(s.metric)
            families[signal.name if signal else s.metric].append(s)
        for name in sorted(families):
            yield _family(name, families[name])


def _family(name: str, samples: list[Sample]) -> Metric:
    signal = SIGNALS.get(name)
    kind = signal.kind if signal else Kind.GAUGE
    help_ = signal.help if signal else name
    # client_python names a counter family without its _total suffix and adds it to samples.
    family_name = name.removesuffix("_total") if kind is Kind.COUNTER else name
    family = Metric(family_name, help_, kind.value)
    for s in samples:
        family.add_sample(s.metric, dict(s.labels), s.value)
    return family


def make_registry(latest: LatestRoundCollector) -> CollectorRegistry:
    """A fresh registry holding only gpuwatch's signals (no default process collectors)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(latest)
    return registry
