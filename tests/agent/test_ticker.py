"""The tick's pace on the monotonic clock: wall-clock steps in either direction neither stop
nor bunch ticks (a backward NTP step stops APScheduler's interval trigger for as long as the
step), an overrun skips and counts the slots it covered, and a step is logged."""

from __future__ import annotations

import logging
from collections.abc import Callable

import pytest

from agent.daemon.ticker import Ticker


class Clocks:
    """A monotonic and a wall clock the test moves; waiting advances the monotonic one."""

    def __init__(self) -> None:
        self.mono = 1000.0
        self.offset = 1_796_000_000.0  # wall = mono + offset

    def monotonic(self) -> float:
        return self.mono

    def wall(self) -> float:
        return self.mono + self.offset


def run(
    clocks: Clocks, ticks: int, work: Callable[[int], None] = lambda _: None
) -> tuple[list[float], list[int]]:
    """Run the ticker until ``ticks`` ticks happened; (monotonic tick starts, skips)."""
    started: list[float] = []
    skipped: list[int] = []

    def tick() -> None:
        started.append(clocks.mono)
        work(len(started))
        if len(started) == ticks:
            ticker.stop()

    ticker = Ticker(10.0, tick, skipped.append, clocks.monotonic, clocks.wall)

    class Waiting:  # the ticker's sleep, on the test's clock
        def is_set(self) -> bool:
            return len(started) >= ticks

        def set(self) -> None:
            pass

        def wait(self, seconds: float) -> bool:
            clocks.mono += seconds
            return False

    ticker._stop = Waiting()  # type: ignore[assignment]
    ticker.run()
    return started, skipped


def test_ticks_keep_their_pace_through_wall_clock_steps(caplog: pytest.LogCaptureFixture) -> None:
    clocks = Clocks()

    def step(n: int) -> None:
        if n == 3:
            clocks.offset -= 3600  # NTP steps the wall clock back an hour
        if n == 6:
            clocks.offset += 7200  # a VM resumed: two hours forward

    with caplog.at_level(logging.WARNING, logger="agent.daemon.ticker"):
        started, skipped = run(clocks, 9, step)

    assert [t - started[0] for t in started] == [10.0 * i for i in range(9)]
    assert skipped == []
    assert [r.getMessage()[:32] for r in caplog.records] == [
        "the wall clock stepped -3600 s; ",
        "the wall clock stepped +7200 s; ",
    ]


def test_a_tick_that_outlasts_its_slots_skips_and_counts_them() -> None:
    clocks = Clocks()

    def slow(n: int) -> None:
        clocks.mono += 25.0 if n == 2 else 1.0  # the second tick takes 25 s at 10 s ticks

    started, skipped = run(clocks, 4, slow)

    offsets = [t - started[0] for t in started]
    assert offsets == [0.0, 10.0, 40.0, 50.0]  # 20 and 30 skipped, not run late and bunched
    assert skipped == [2]
