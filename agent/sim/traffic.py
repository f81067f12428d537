"""A deterministic traffic model with known truth, for the engine simulator.

Every simulated request takes the next row of :data:`PROFILES` (request ``seq`` uses row
``seq % 12``; ``seq`` counts from 0 per :class:`Traffic` and is not reset by a restart), so
``serve(12)`` on a fresh :class:`Traffic` completes exactly one of each row.

A row fixes the token counts, the finish reason and two latencies given as exact decimals
(queue time and prefill time). The inter-token latencies of a request are ``gen - 1`` values of
:data:`ITL_CYCLE`, starting at position ``row % 25`` and wrapping around. Everything else is
derived and rounded to the microsecond, so every latency prints as a short decimal:

- ``ttft = queue + prefill``;
- ``decode = sum(itls)``, ``inference = prefill + decode``, ``e2e = queue + inference``;
- ``tpot = decode / (gen - 1)``, absent (None) when ``gen == 1``.

The values reach past both ends of the engines' bucket sets
(TTFT 0.0008 s and 150.05 s, ITL 0.001 s and 3.2 s, e2e above 146 s, prompt 6000 tokens
above the 5000 bucket of max_model_len 8192) and land exactly on bucket bounds too
(TTFT 0.25 and 1.0, ITL 0.025), so ``le`` inclusivity and ``+Inf`` both matter.

Every request is prefilled and gets its first token; the abort and error rows stop during
decode. So all engines see the same prompt tokens, and every request has a TTFT.

The truth: :meth:`Traffic.totals` (token and request totals), :meth:`Traffic.observed` (the
raw values a histogram observes, in observation order) and :meth:`Traffic.requests`, all over
the requests since the last :meth:`Traffic.restart`. :func:`cumulative_counts` turns observed
values into the cumulative bucket counts for any bucket set.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent.sim.gpus import GpuReading, default_gpu

FINISH_REASONS = ("stop", "length", "abort", "error")
SUCCESSFUL = frozenset({"stop", "length"})
DROPPED = "dropped"  # a stream its client left mid-way: no engine counts it as finished

# Exact decimals; mean about 0.2 s. Includes 0.001 (below SGLang's first ITL bucket),
# 0.005 (below vLLM's), 0.025 (on a vLLM bound) and 3.2 (above V0's 2.5 s top bucket).
ITL_CYCLE: tuple[float, ...] = (
    0.021, 0.018, 0.025, 0.032, 0.019, 0.045, 0.022, 0.005, 0.028, 0.035, 0.06, 0.02, 0.075,
    0.015, 0.1, 0.024, 0.03, 0.001, 0.15, 0.04, 0.3, 0.027, 0.75, 0.05, 3.2,
)  # fmt: skip


@dataclass(frozen=True)
class Profile:
    """One row of the request cycle; the latencies here are exact decimals in seconds."""

    prompt_tokens: int
    cached_tokens: int
    generation_tokens: int
    max_tokens: int
    n: int
    finish_reason: str
    streaming: bool
    preemptions: int
    queue_time: float
    prefill_time: float


# fmt: off
PROFILES: tuple[Profile, ...] = (
    Profile(512, 0, 128, 256, 1, "stop", True, 0, 0.002, 0.048),       # ttft 0.05
    Profile(1024, 512, 64, 64, 1, "length", False, 0, 0.05, 0.2),      # ttft 0.25 (a bound)
    Profile(37, 0, 8, 512, 1, "stop", True, 0, 0.0003, 0.0005),        # ttft below 0.001
    Profile(2048, 1536, 256, 1024, 1, "stop", True, 1, 0.4, 0.6),      # ttft 1.0 (a bound)
    Profile(6000, 0, 32, 32, 2, "length", False, 0, 3.5, 9.0),         # ttft 12.5 > V0's 10
    Profile(300, 256, 3, 128, 1, "abort", True, 0, 0.9, 0.012),        # client gave up
    Profile(128, 0, 16, 64, 1, "stop", True, 0, 0.01, 0.015),
    Profile(4096, 4000, 200, 2048, 1, "stop", False, 2, 45.0, 0.1),    # e2e > V0's 60
    Profile(256, 128, 40, 512, 1, "abort", True, 0, 0.02, 0.03),
    Profile(800, 0, 1, 1, 1, "length", False, 0, 0.005, 0.095),        # one token: no ITL
    Profile(1500, 0, 2, 256, 1, "error", True, 0, 0.03, 0.17),         # engine error
    Profile(64, 48, 100, 4096, 20, "stop", True, 0, 150.0, 0.05),      # e2e > TGI's 146
)
# fmt: on

# What a histogram can observe; see Request.observations.
OBSERVABLES = (
    "ttft", "itl", "tpot", "e2e", "queue", "prefill", "decode", "inference", "prompt_tokens",
    "cached_tokens", "computed_prompt_tokens", "generation_tokens", "max_tokens", "n",
    "preemptions", "iteration_tokens",
)  # fmt: skip


def _us(x: float) -> float:
    return round(x, 6)


@dataclass(frozen=True)
class Request:
    """One completed request, with everything the engines derive their metrics from."""

    seq: int
    model: str
    engine: str
    prompt_tokens: int
    cached_tokens: int
    generation_tokens: int
    max_tokens: int
    n: int
    finish_reason: str
    streaming: bool
    preemptions: int
    queue_time: float
    prefill_time: float
    ttft: float
    itls: tuple[float, ...]
    decode_time: float
    inference_time: float
    e2e_latency: float
    tpot: float | None

    @property
    def computed_prompt_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens

    @property
    def successful(self) -> bool:
        return self.finish_reason in SUCCESSFUL

    def observations(self, metric: str) -> tuple[float, ...]:
        """The values this request contributes to a histogram of ``metric`` (OBSERVABLES)."""
        if metric == "itl":
            return self.itls
        if metric == "tpot":
            return () if self.tpot is None else (self.tpot,)
        if metric == "iteration_tokens":
            # Batch size 1: a prefill step (prompt plus the first token), then one per token.
            return (float(self.prompt_tokens + 1),) + (1.0,) * (self.generation_tokens - 1)
        return (float(_SCALARS[metric](self)),)


_SCALARS: dict[str, Callable[[Request], float]] = {
    "ttft": lambda r: r.ttft,
    "e2e": lambda r: r.e2e_latency,
    "queue": lambda r: r.queue_time,
    "prefill": lambda r: r.prefill_time,
    "decode": lambda r: r.decode_time,
    "inference": lambda r: r.inference_time,
    "prompt_tokens": lambda r: r.prompt_tokens,
    "cached_tokens": lambda r: r.cached_tokens,
    "computed_prompt_tokens": lambda r: r.computed_prompt_tokens,
    "generation_tokens": lambda r: r.generation_tokens,
    "max_tokens": lambda r: r.max_tokens,
    "n": lambda r: r.n,
    "preemptions": lambda r: r.preemptions,
}


def make_request(
    seq: int,
    model: str,
    engine: str,
    profiles: Sequence[Profile] = PROFILES,
    itl_cycle: Sequence[float] = ITL_CYCLE,
) -> Request:
    """The ``seq``-th request of the cycle, served by ``model`` on ``engine``."""
    row = seq % len(profiles)
    p = profiles[row]
    itls = tuple(itl_cycle[(row + j) % len(itl_cycle)] for j in range(p.generation_tokens - 1))
    decode = _us(sum(itls, 0.0))
    inference = _us(p.prefill_time + decode)
    gen = p.generation_tokens
    return Request(
        seq=seq,
        model=model,
        engine=engine,
        prompt_tokens=p.prompt_tokens,
        cached_tokens=p.cached_tokens,
        generation_tokens=gen,
        max_tokens=p.max_tokens,
        n=p.n,
        finish_reason=p.finish_reason,
        streaming=p.streaming,
        preemptions=p.preemptions,
        queue_time=p.queue_time,
        prefill_time=p.prefill_time,
        ttft=_us(p.queue_time + p.prefill_time),
        itls=itls,
        decode_time=decode,
        inference_time=inference,
        e2e_latency=_us(p.queue_time + inference),
        tpot=_us(decode / (gen - 1)) if gen > 1 else None,
    )


def cumulative_counts(values: Iterable[float], bounds: Sequence[float]) -> tuple[int, ...]:
    """Cumulative bucket counts (``le`` is inclusive), one per bound and a last one for +Inf."""
    vals = list(values)
    return tuple(sum(1 for v in vals if v <= b) for b in bounds) + (len(vals),)


@dataclass(frozen=True)
class Gauges:
    """The settable engine gauges of one (model, engine)."""

    running: int = 0
    waiting_capacity: int = 0  # waiting for KV space / a batch slot
    waiting_deferred: int = 0  # skipped by the scheduler (vLLM 0.20+ "deferred")
    kv_usage: float = 0.0  # fraction 0..1

    @property
    def waiting(self) -> int:
        return self.waiting_capacity + self.waiting_deferred


@dataclass(frozen=True)
class Totals:
    """Truth over a set of requests. Prompt tokens include cached ones; computed excludes them."""

    requests: int
    prompt_tokens: int
    cached_prompt_tokens: int
    computed_prompt_tokens: int
    generation_tokens: int
    preemptions: int
    finished: Mapping[str, int]  # every reason in FINISH_REASONS, zeros included

    @property
    def successful(self) -> int:
        return sum(self.finished[r] for r in SUCCESSFUL)


def totals_of(requests: Sequence[Request]) -> Totals:
    return Totals(
        requests=len(requests),
        prompt_tokens=sum(r.prompt_tokens for r in requests),
        cached_prompt_tokens=sum(r.cached_tokens for r in requests),
        computed_prompt_tokens=sum(r.computed_prompt_tokens for r in requests),
        generation_tokens=sum(r.generation_tokens for r in requests),
        preemptions=sum(r.preemptions for r in requests),
        finished={k: sum(1 for r in requests if r.finish_reason == k) for k in FINISH_REASONS},
    )


@dataclass(frozen=True)
class Snapshot:
    """An immutable copy of a :class:`Traffic`'s state; renderers read only this."""

    models: tuple[str, ...]
    engines: tuple[str, ...]
    started_at: float
    requests: tuple[Request, ...]
    gauges: Mapping[tuple[str, str], Gauges]
    gpus: tuple[GpuReading, ...]
    hostname: str
    max_model_len: int
    window_start: Mapping[str, int] = field(default_factory=dict)
    # Streams a client dropped mid-way (finish_reason "dropped"): never in ``requests``.
    dropped: tuple[Request, ...] = ()

    def dropped_of(self, model: str, engine: str | None = None) -> tuple[Request, ...]:
        """The dropped streams of ``model`` (on ``engine``; None: any), in serve order."""
        return tuple(
            r for r in self.dropped if r.model == model and (engine is None or r.engine == engine)
        )

    def select(
        self,
        model: str | None = None,
        engine: str | None = None,
        reasons: Iterable[str] | None = None,
    ) -> tuple[Request, ...]:
        """Requests in serve order, filtered; None means any."""
        wanted = None if reasons is None else frozenset(reasons)
        return tuple(
            r
            for r in self.requests
            if (model is None or r.model == model)
            and (engine is None or r.engine == engine)
            and (wanted is None or r.finish_reason in wanted)
        )

    def totals(self, model: str | None = None, engine: str | None = None) -> Totals:
        return totals_of(self.select(model, engine))

    def observed(
        self,
        metric: str,
        model: str | None = None,
        engine: str | None = None,
        reasons: Iterable[str] | None = None,
    ) -> tuple[float, ...]:
        if metric not in OBSERVABLES:
            raise ValueError(f"unknown observable {metric!r}; one of {OBSERVABLES}")
        return tuple(v for r in self.select(model, engine, reasons) for v in r.observations(metric))

    def gauges_of(self, model: str, engine: str) -> Gauges:
        return self.gauges[(model, engine)]

    def window(self, model: str) -> tuple[Request, ...]:
        """llama.cpp's throughput bucket: requests of ``model`` since the last metrics read."""
        return self.select(model)[self.window_start.get(model, 0) :]


class Traffic:
    """The mutable simulated box: engines serving models, and its GPUs. Thread-safe.

    ``engines`` is the data-parallel size; engine indexes are the strings "0".."N-1".
    ``clock`` gives the Unix time used for start times (``_created``); inject one for tests.
    ``profiles`` and ``itl_cycle`` replace the request cycle (the demo's is a plausible chat
    mix; the default's edge cases are for the tests).
    """

    def __init__(
        self,
        models: Sequence[str] = ("llama-8b",),
        engines: int = 1,
        *,
        gpus: int = 1,
        max_model_len: int = 8192,
        hostname: str = "gpu-box-01",
        clock: Callable[[], float] = time.time,
        profiles: Sequence[Profile] = PROFILES,
        itl_cycle: Sequence[float] = ITL_CYCLE,
    ) -> None:
        if not models or engines < 1 or gpus < 0 or not profiles or not itl_cycle:
            raise ValueError("need at least one model, one engine, one profile and one ITL")
        self._lock = threading.RLock()
        self._profiles, self._itl_cycle = tuple(profiles), tuple(itl_cycle)
        self._models = tuple(models)
        self._engines = tuple(str(i) for i in range(engines))
        self._clock = clock
        self._hostname = hostname
        self._max_model_len = max_model_len
        self._seq = 0
        self._gpus = [default_gpu(hostname, i) for i in range(gpus)]
        self._started_at = clock()
        self._reset_engines()

    def _reset_engines(self) -> None:
        self._requests: list[Request] = []
        self._dropped: list[Request] = []
        self._gauges = {(m, e): Gauges() for m in self._models for e in self._engines}
        self._window_start: dict[str, int] = {}

    @property
    def models(self) -> tuple[str, ...]:
        return self._models

    @property
    def engines(self) -> tuple[str, ...]:
        return self._engines

    @property
    def started_at(self) -> float:
        with self._lock:
            return self._started_at

    def _check(self, model: str | None, engine: str) -> str:
        name = self._models[0] if model is None else model
        if name not in self._models or engine not in self._engines:
            raise ValueError(f"unknown model {name!r} or engine {engine!r}")
        return name

    def serve(
        self,
        n: int,
        *,
        model: str | None = None,
        engine: str = "0",
        e2e_latency: float | None = None,
    ) -> tuple[Request, ...]:
        """Complete the next ``n`` requests of the cycle on ``model`` (default: the first);
        ``e2e_latency``: each took exactly that long end to end (a test's known truth)."""
        name = self._check(model, engine)
        with self._lock:
            done = tuple(
                make_request(self._seq + i, name, engine, self._profiles, self._itl_cycle)
                for i in range(n)
            )
            if e2e_latency is not None:
                done = tuple(dataclasses.replace(r, e2e_latency=e2e_latency) for r in done)
            self._seq += n
            self._requests.extend(done)
        return done

    def drop(
        self,
        n: int,
        *,
        after_tokens: int,
        model: str | None = None,
        engine: str = "0",
        row: int | None = None,
    ) -> tuple[Request, ...]:
        """The next ``n`` requests of the cycle are streams whose client went away after
        ``after_tokens`` output tokens (fewer if the request would have stopped sooner). As
        in vLLM, what the engine generated for them counts in its token counters, but no
        finish reason and no per-request histogram sees them (vLLM 0.32 on a real server:
        a dropped stream is not an "abort"). ``row``: every one is that row of the cycle,
        which then does not move on (the demo's fixed per-cycle arithmetic needs that)."""
        name = self._check(model, engine)
        seqs = [row] * n if row is not None else [self._seq + i for i in range(n)]
        with self._lock:
            gone = tuple(
                dataclasses.replace(
                    request,
                    generation_tokens=min(after_tokens, request.generation_tokens),
                    finish_reason=DROPPED,
                )
                for request in (
                    make_request(seq, name, engine, self._profiles, self._itl_cycle) for seq in seqs
                )
            )
            self._seq += 0 if row is not None else n
            self._dropped.extend(gone)
        return gone

    def set_gauges(
        self,
        *,
        model: str | None = None,
        engine: str = "0",
        running: int | None = None,
        waiting: int | None = None,
        deferred: int | None = None,
        kv_usage: float | None = None,
    ) -> Gauges:
        """Set some gauges of one (model, engine); ``waiting`` is the capacity-waiting part."""
        key = (self._check(model, engine), engine)
        with self._lock:
            old = self._gauges[key]
            self._gauges[key] = Gauges(
                running=old.running if running is None else running,
                waiting_capacity=old.waiting_capacity if waiting is None else waiting,
                waiting_deferred=old.waiting_deferred if deferred is None else deferred,
                kv_usage=old.kv_usage if kv_usage is None else kv_usage,
            )
            return self._gauges[key]

    def set_gpu(self, index: int, **changes: Any) -> GpuReading:
        """Replace fields of one GPU's reading (names as in :class:`GpuReading`)."""
        with self._lock:
            self._gpus[index] = dataclasses.replace(self._gpus[index], **changes)
            return self._gpus[index]

    def restart(self) -> None:
        """The engine process restarted: counters, histograms and gauges start over at 0,
        and the start time (``_created``) moves forward. GPU readings are untouched."""
        with self._lock:
            self._reset_engines()
            # Strictly later even with a coarse or frozen clock, so a reset is always visible.
            self._started_at = max(self._clock(), self._started_at + 0.001)

    def reset_throughput_window(self, model: str | None = None) -> None:
        """What a llama.cpp /metrics read does to its throughput gauges' bucket."""
        name = self._check(model, "0")
        with self._lock:
            self._window_start[name] = sum(1 for r in self._requests if r.model == name)

    def snapshot(self) -> Snapshot:
        with self._lock:
            return Snapshot(
                models=self._models,
                engines=self._engines,
                started_at=self._started_at,
                requests=tuple(self._requests),
                gauges=dict(self._gauges),
                gpus=tuple(self._gpus),
                hostname=self._hostname,
                max_model_len=self._max_model_len,
                window_start=dict(self._window_start),
                dropped=tuple(self._dropped),
            )

    # The truth, over the requests since the last restart.

    def requests(
        self, *, model: str | None = None, engine: str | None = None
    ) -> tuple[Request, ...]:
        return self.snapshot().select(model, engine)

    def totals(self, *, model: str | None = None, engine: str | None = None) -> Totals:
        return self.snapshot().totals(model, engine)

    def observed(
        self,
        metric: str,
        *,
        model: str | None = None,
        engine: str | None = None,
        reasons: Iterable[str] | None = None,
    ) -> tuple[float, ...]:
        """Raw values of a histogram in observation order (see OBSERVABLES)."""
        return self.snapshot().observed(metric, model, engine, reasons)
