"""The collection tick on the monotonic clock.

APScheduler 3's interval trigger computes each run time on the wall clock: a backward step
(an NTP correction, a VM resumed from a snapshot) stopped the ticks for as long as the step,
and nothing noticed, since no tick ran. Here the tick has its own thread, paced by
``time.monotonic``, which no clock step moves; samples keep their wall-clock timestamps (the
tick asks the daemon's clock for "now"). A step larger than the interval is logged once.

A tick that outlasts its interval makes the ticks it overlapped "missed": they are skipped,
not run late and bunched, and counted (agent.daemon.missed), as APScheduler did with one
instance and coalescing.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

log = logging.getLogger(__name__)


@dataclass
class Ticker:
    interval: float
    tick: Callable[[], None]
    missed: Callable[[int], None]
    monotonic: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time
    last_started: float | None = None  # monotonic start of the latest tick
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="gpuwatch-tick", daemon=True)
        self._thread.start()

    def stop(self, timeout: float | None = None) -> None:
        """Stop after the running tick (if any) has finished."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def run(self) -> None:
        """Tick until stopped: the first at once, then every ``interval`` seconds."""
        due = self.monotonic()
        offset = self.wall() - due
        while not self._stop.is_set():
            wait = due - self.monotonic()
            if wait > 0:
                self._stop.wait(wait)
                continue
            offset = self._check_step(offset)
            self.last_started = self.monotonic()
            self.tick()
            due = self._next(due)

    def _next(self, due: float) -> float:
        due += self.interval
        late = self.monotonic() - due
        if late < 0:
            return due
        skipped = int(late // self.interval) + 1  # the slots this tick ran over
        self.missed(skipped)
        return due + skipped * self.interval

    def _check_step(self, offset: float) -> float:
        now = self.wall() - self.monotonic()
        step = now - offset
        if abs(step) > self.interval:
            log.warning(
                "the wall clock stepped %+.0f s; ticks keep their pace (samples carry the new "
                "wall-clock time)", step,
            )  # fmt: skip
        return now
