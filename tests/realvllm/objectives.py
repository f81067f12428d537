"""The objectives' check on a real vLLM (issue 41): requests whose client-side truth is known,
judged by gpuwatch from vLLM's own request spans (``--otlp-traces-endpoint``, gRPC).

The threshold is chosen from this machine's speed so that no request lies near it: short
requests (2 tokens) far below, long ones far above. The client waits a little longer than vLLM
measures (the HTTP round trip), so only a request within that margin of the threshold could be
judged differently by the two; the margin makes that impossible, and is asserted.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

from tests.realvllm import promtext, workload
from tests.realvllm.watch import Watch

SHORT, SHORT_N, LONG_N = 2, 7, 3
MARGIN = 1.5  # every request's client time at least this factor away from the threshold
SEPARATION = 16.0  # a long request over the slowest short one: 4x room each side of the threshold


@dataclass(frozen=True)
class Truth:
    threshold: float
    requests: int
    good: int
    good_tokens: int
    histogram_bounds: tuple[float, float]  # what the e2e histogram allows for the same requests


def run(engine: object, watch: Watch, model: str, prompt: str, tries: int = 3) -> Truth:
    """One objective's phase; on a machine busy enough to bring a request near the threshold,
    again with a new threshold (a new objective: the requests judged before do not count)."""
    from tests.realvllm.test_real_vllm import Engine

    assert isinstance(engine, Engine)
    used: set[float] = set()
    for _ in range(tries):
        truth = _attempt(engine, watch, model, prompt, used)
        if truth is not None:
            return truth
    raise AssertionError(f"every one of {tries} tries had a request near its threshold {used}")


def _attempt(
    engine: object, watch: Watch, model: str, prompt: str, used: set[float]
) -> Truth | None:
    from tests.realvllm.test_real_vllm import Engine

    assert isinstance(engine, Engine)
    base, ledger = engine.server.base, engine.ledger
    short_top, long, long_low = _calibrate(base, ledger, prompt)
    _spans_settled(watch)  # every span so far arrived before this objective exists
    threshold = round(math.sqrt(short_top * long_low) * 1000) / 1000
    while threshold in used:  # the same spelling would count the last try's requests too
        threshold += 0.001
    used.add(threshold)
    watch.set_objective(model, threshold, 0.95)
    before = promtext.parse(engine.quiet())
    start = len(ledger.timed)
    for n in [SHORT] * SHORT_N + [long] * LONG_N:
        workload.complete(base, ledger, prompt, n)
    after = promtext.parse(engine.quiet())
    timed = ledger.timed[start:]
    if any(threshold / MARGIN < t < threshold * MARGIN for t, _ in timed):
        print(f"  objective: a request near {threshold} s: {timed}; trying again")
        return None
    _wait(lambda: watch.span_requests(threshold) >= len(timed), "the objective's spans")
    good = [(t, n) for t, n in timed if t <= threshold]
    return Truth(threshold, len(timed), len(good), sum(n for _, n in good),
                 _histogram(before, after, threshold))  # fmt: skip


def _calibrate(base: str, ledger: workload.Ledger, prompt: str) -> tuple[float, int, float]:
    """(the slowest of five short requests, a long request's token count, its time): the long
    one takes SEPARATION times the slowest short one, so the threshold between them (their
    geometric mean) has that factor's square root of room on each side."""
    long = 128
    while True:
        for n in [SHORT] * 5 + [long]:
            workload.complete(base, ledger, prompt, n)
        *shorts, (took, _) = ledger.timed[-6:]
        short_top = max(t for t, _ in shorts)
        if took > short_top * SEPARATION or long >= 4096:
            return short_top, long, took
        long *= 2


def _spans_settled(watch: Watch) -> None:
    """Until the receiver's span count has stood still for longer than vLLM's batch delay (5 s)."""
    last, since = -1.0, time.monotonic()
    deadline = since + 120
    while time.monotonic() < deadline:
        now = _received(watch)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since > 7:
            return
        time.sleep(0.5)
    raise AssertionError("vLLM's spans never settled")


def _received(watch: Watch) -> float:
    assert watch.daemon is not None
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in watch.daemon.metrics().splitlines()
        if line.startswith("gpuwatch_otlp_spans_total{")
    )


def _wait(done: object, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not done():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.5)


def _histogram(before: promtext.Raw, after: promtext.Raw, threshold: float) -> tuple[float, float]:
    from agent.cost.slo_math import attainment

    name = "vllm:e2e_request_latency_seconds"
    increase = promtext.subtract(promtext.buckets(after, name), promtext.buckets(before, name))
    found = attainment(increase, threshold)
    assert found is not None, increase
    return found.lower, found.upper
