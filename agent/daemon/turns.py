"""When the daemon's background database work (the hour's packing) takes its next step.

The packing runs in batches on the minute job's thread, beside the ticks. Between two batches
it already lets a tick's call in flight finish and then pauses as long as the batch took
(:meth:`agent.daemon.deadline.Deadline.turn`). At ticks under 10 s one tick in ten is heavier:
it reads the latency rule's 5-minute histogram windows (``LatencyCadence``), and beside a batch
that read slowed past the tick's 1 s deadline, every time (bench/memory.py: 9 of the hour's 10
spooled rounds were those ticks, during the packing). The two threads share one interpreter
lock, and a thread reading rows gives it up at every row and waits for it back behind the
other's switch interval. So a batch that could still be running when that tick reads waits
for the tick's call to end first: at most one wait per read (one in ten ticks), so the packing
is not held up on a backlog, as it was when every batch waited for every tick.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from agent.alerting.inputs import LatencyCadence
from agent.daemon.deadline import MAX_PAUSE, Deadline

# Seconds of slack around the read tick: its start jitters by the scheduler's wake-up, and its
# read comes after the tick's collection and write.
READ_MARGIN = 0.5
MAX_WAITS = 3  # calls waited for per turn; a tick that never comes (stopping) ends the wait


@dataclass(frozen=True)
class BackgroundTurn:
    """``writer_turn`` of the daemon's rollup (see :class:`agent.storage.rollup.Rollup`)."""

    deadline: Deadline
    cadence: LatencyCadence
    clock: Callable[[], datetime]  # the clock the ticks are stamped with
    timeout: float  # the tick's database deadline: no single wait is longer than a tick's call

    def __call__(self, busy: float) -> None:
        self.deadline.turn(self.timeout, busy)
        self.clear_read(busy)

    def clear_read(self, busy: float) -> int:
        """Wait while the window read would fall within the next batch (about ``busy``
        seconds long); returns how many tick calls were waited for."""
        waited = 0
        while waited < MAX_WAITS and self._read_within(busy + READ_MARGIN):
            if not self.deadline.after_next_call(self.cadence.interval_seconds + self.timeout):
                break
            waited += 1
        return waited

    def _read_within(self, seconds: float) -> bool:
        ahead = self.cadence.next_read_in(self.clock())
        return ahead is not None and ahead <= seconds


__all__ = ["MAX_PAUSE", "BackgroundTurn"]
