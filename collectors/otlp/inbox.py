"""Between the receiver's threads and the collection tick: request facts waiting to be counted,
bounded in number and in rate.

The receiver answers an exporter at once and the tick counts what arrived since the last one,
so a slow database or a long tick never holds an engine's export. Two bounds keep a flood from
costing the daemon its memory or its tick: a token bucket on spans per second (over it, the
export is refused with 429 and the exporter retries later, as OTLP asks) and a cap on waiting
facts (over it, the oldest go, counted: the tick has fallen behind, and recent requests say
more about now).
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from collectors.otlp.facts import SpanFacts


@dataclass(frozen=True, slots=True)
class Arrival:
    """A request's facts and the target the export's URL path named (None: none named)."""

    target: str | None
    facts: SpanFacts


class SpanInbox:
    """Thread-safe: receiver threads ``admit`` and ``put``; the tick ``take``s."""

    def __init__(
        self,
        max_pending: int,
        spans_per_second: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._pending: deque[Arrival] = deque(maxlen=max_pending)  # the oldest go first
        self._rate = spans_per_second
        self._burst = max(spans_per_second, 1.0)  # a second's worth may arrive at once
        self._tokens = self._burst
        self._clock = clock
        self._stamp = clock()
        self._lock = threading.Lock()
        self.counts: Counter[str] = Counter()  # spans by outcome since start (see outcome())

    def set_limits(self, max_pending: int, spans_per_second: float) -> None:
        """New bounds (a reloaded configuration); what is waiting stays, newest kept."""
        with self._lock:
            if max_pending != self._pending.maxlen:
                self._pending = deque(self._pending, maxlen=max_pending)
            self._rate = spans_per_second
            self._burst = max(spans_per_second, 1.0)
            self._tokens = min(self._tokens, self._burst)

    def admit(self, spans: int) -> bool:
        """Whether an export of ``spans`` spans fits the rate now (and take its tokens)."""
        with self._lock:
            now = self._clock()
            self._tokens = min(self._burst, self._tokens + (now - self._stamp) * self._rate)
            self._stamp = now
            # An export larger than a second's worth (exporters batch up to 512 spans) goes in
            # once the bucket is full, and the debt it leaves is paid back before the next: the
            # long-run rate holds without refusing such an export forever.
            if self._tokens < min(spans, self._burst):
                self.counts["refused_rate"] += spans
                return False
            self._tokens -= spans
            return True

    def put(self, arrivals: Sequence[Arrival], skipped: int) -> None:
        with self._lock:
            limit = self._pending.maxlen or 0
            overflow = max(0, len(self._pending) + len(arrivals) - limit)
            self._pending.extend(arrivals)
            self.counts["accepted"] += len(arrivals)
            self.counts["not_a_request"] += skipped
            if overflow > 0:
                self.counts["dropped_backlog"] += overflow

    def refuse(self, reason: str, spans: int = 1) -> None:
        with self._lock:
            self.counts[reason] += spans

    def take(self) -> list[Arrival]:
        """Everything waiting, oldest first; the inbox is empty afterwards."""
        with self._lock:
            taken = list(self._pending)
            self._pending.clear()
            return taken

    def snapshot(self) -> dict[str, int]:
        with self._lock:
            return dict(self.counts)
