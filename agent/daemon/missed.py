"""Ticks the scheduler could not start because the previous one was still running.

APScheduler logs a warning for each one: a slow database or a hung scrape at 1 s ticks wrote
a line a second. Here they are counted for /metrics (``gpuwatch_ticks_missed_total``) and
logged once when they begin, at most once a minute while they go on (with the count), and once
when ticks start on time again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from collectors.base import Sample

log = logging.getLogger(__name__)

LOG_EVERY = 60.0  # seconds between lines while ticks keep being missed
METRIC = "gpuwatch_ticks_missed_total"


@dataclass
class MissedTicks:
    clock: Callable[[], float] = time.monotonic
    total: int = 0
    _logged_at: float | None = None  # None: no stretch of missed ticks going on
    _unlogged: int = 0  # missed since the last line
    _stretch: int = 0  # missed in the current stretch
    _since_run: int = 0  # missed since the last tick that did start

    def missed(self, count: int = 1) -> None:
        """The scheduler skipped ``count`` ticks (called from its thread)."""
        self.total += count
        self._unlogged += count
        self._stretch += count
        self._since_run += count
        now = self.clock()
        if self._logged_at is None or now - self._logged_at >= LOG_EVERY:
            log.warning(
                "%d tick(s) skipped: the previous tick was still running (%d in this stretch)",
                self._unlogged, self._stretch,
            )  # fmt: skip
            self._logged_at, self._unlogged = now, 0

    def ran(self) -> None:
        """A tick started. Two in a row with nothing missed between them end a stretch."""
        if self._logged_at is not None and self._since_run == 0:
            log.warning("ticks start on time again; %d skipped in that stretch", self._stretch)
            self._logged_at, self._unlogged, self._stretch = None, 0, 0
        self._since_run = 0

    def sample(self, host: str, at: datetime) -> Sample:
        return Sample(metric=METRIC, value=float(self.total), labels={"host": host}, ts=at)
