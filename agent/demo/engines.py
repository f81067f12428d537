"""The history's engines: the simulator's /metrics, read by the real scrape collector.

A month of rounds cannot each render and parse a /metrics body (about 30 ms a target here,
and the simulator recounts every request ever served on each render). What saves it: the
engines serve whole request cycles (scenario.PROFILES), and every counter and histogram of a
body is a sum over the requests served, so the collector's samples after ``n`` cycles are
``S(1) + (n - 1) * (S(2) - S(1))``, exactly, while the gauges are those of the load level.
:class:`FastForwardScrape` takes ``S(0)``, ``S(1)`` and ``S(2)`` from the real path (the
simulator's body for that traffic through httpx into :class:`collectors.scrape.ScrapeCollector`,
its parse and its engine mapper), once per load level and engine start, and each round is then
that arithmetic. tests/demo/test_engines.py checks it against the real path at other counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import httpx

from agent.demo.scenario import (
    CYCLE,
    DROPPED_AFTER_TOKENS,
    DROPPED_ROW,
    ITL_CYCLE,
    LEVELS,
    PROFILES,
    DemoTarget,
)
from agent.sim.render import render_for_accept
from agent.sim.traffic import Traffic
from collectors.base import CollectError, Sample
from collectors.scrape import ScrapeCollector, TargetSpec

Key = tuple[str, tuple[tuple[str, str], ...]]


def sim_traffic(target: DemoTarget, started_at: float) -> Traffic:
    """A fresh engine of ``target`` (nothing served yet) that started at ``started_at``."""
    return Traffic(
        (target.model,),
        gpus=0,
        hostname=target.name,
        clock=lambda: started_at,
        profiles=PROFILES,
        itl_cycle=ITL_CYCLE,
    )


def set_level(traffic: Traffic, level: str) -> None:
    running, waiting, kv = LEVELS[level]
    traffic.set_gauges(running=running, waiting=waiting, kv_usage=kv)


def scrape_through_sim(
    target: DemoTarget, host: str, traffic: Traffic, now: datetime
) -> list[Sample]:
    """The real collector's samples for ``traffic``'s body (httpx's in-process transport)."""

    def answer(request: httpx.Request) -> httpx.Response:
        body, ctype = render_for_accept(target.version, traffic, request.headers.get("Accept", ""))
        return httpx.Response(200, text=body, headers={"Content-Type": ctype})

    client = httpx.Client(transport=httpx.MockTransport(answer))
    spec = TargetSpec(
        target.name, f"http://127.0.0.1/{target.name}/metrics", target.engine, target.model
    )
    collector = ScrapeCollector(spec, host=host, client=client)
    try:
        return collector.collect(now)
    finally:
        collector.close()


@dataclass(frozen=True, slots=True)
class _Row:
    metric: str
    labels: dict[str, str]
    base: float
    step: float  # per cycle beyond the first


class FastForwardScrape:
    """A :class:`collectors.base.Collector` for one target of the history (see the module)."""

    def __init__(self, target: DemoTarget, host: str, started_at: datetime) -> None:
        self.name = f"target/{target.name}"
        self.target = target.name
        self.spec = target
        self._host = host
        self.cycles = 0  # served since the engine started
        self.level = "idle"
        self.down = False  # the engine is restarting: the scrape fails
        self._start(started_at)

    def restart(self, at: datetime) -> None:
        """The engine process restarted at ``at``: counters start over."""
        self.cycles = 0
        self._start(at)

    def serve(self, cycles: int) -> None:
        self.cycles += cycles

    def _start(self, at: datetime) -> None:
        self._started = at.timestamp()
        self._rows: dict[tuple[str, int], list[_Row]] = {}
        self._step: dict[Key, float] | None = None

    def collect(self, now: datetime) -> list[Sample]:
        if self.down:
            raise CollectError(
                f"target {self.target} (http://127.0.0.1/{self.target}/metrics): "
                "ConnectError: [Errno 111] Connection refused"
            )
        n = self.cycles
        rows = self._rows_for(self.level, min(n, 1))
        extra = max(0, n - 1)
        return [
            Sample(metric=r.metric, value=r.base + extra * r.step, labels=r.labels, ts=now)
            for r in rows
        ]

    def _rows_for(self, level: str, cycles: int) -> list[_Row]:
        rows = self._rows.get((level, cycles))
        if rows is None:
            step = self._steps() if cycles else {}
            found = self._real(level, cycles)
            rows = [_Row(s.metric, dict(s.labels), s.value, step.get(_key(s), 0.0)) for s in found]
            self._rows[(level, cycles)] = rows
        return rows

    def _steps(self) -> dict[Key, float]:
        """What one more cycle adds to each sample (0 for gauges and ratios)."""
        if self._step is None:
            one = {_key(s): s.value for s in self._real("idle", 1)}
            two = {_key(s): s.value for s in self._real("idle", 2)}
            if one.keys() != two.keys():  # the arithmetic would not hold: say so, loudly
                raise AssertionError(f"{self.target}: series differ between 1 and 2 cycles")
            self._step = {k: two[k] - one[k] for k in one}
        return self._step

    def _real(self, level: str, cycles: int) -> list[Sample]:
        traffic = sim_traffic(self.spec, self._started)
        serve_cycles(traffic, self.spec.model, cycles)
        set_level(traffic, level)
        when = datetime.fromtimestamp(self._started).astimezone()
        return scrape_through_sim(self.spec, self._host, traffic, when)


def _key(s: Sample) -> Key:
    return s.metric, s.label_key()


def serve_cycles(traffic: Traffic, model: str, cycles: int) -> None:
    """``cycles`` whole request cycles of ``model``, each with its one abandoned stream."""
    traffic.serve(cycles * CYCLE, model=model)
    traffic.drop(cycles, after_tokens=DROPPED_AFTER_TOKENS, model=model, row=DROPPED_ROW)
