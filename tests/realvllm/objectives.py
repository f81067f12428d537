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


@dataclass(frozen=True)
class Truth:
    threshold: float
    requests: int
    good: int
    good_tokens: int
    histogram_bounds: tuple[float, float]  # what the e2e histogram allows for the same requests


def run(engine: object, watch: Watch, model: str, prompt: str) -> Truth:
    from tests.realvllm.test_real_vllm import Engine

    assert isinstance(engine, Engine)
    base, ledger = engine.server.base, engine.ledger
    long = _calibrate(base, ledger, prompt)
    _spans_settled(watch)  # every span so far arrived before the objective exists
    short_top = max(t for t, n in ledger.timed[-3:] if n == SHORT)
    long_low = min(t for t, n in ledger.timed[-3:] if n == long)
    threshold = round(math.sqrt(short_top * long_low) * 1000) / 1000
    watch.set_objective(model, threshold, 0.95)
    before = promtext.parse(engine.quiet())
    start = len(ledger.timed)
    for n in [SHORT] * SHORT_N + [long] * LONG_N:
        workload.complete(base, ledger, prompt, n)
    after = promtext.parse(engine.quiet())
    timed = ledger.timed[start:]
    near = [t for t, _ in timed if threshold / MARGIN < t < threshold * MARGIN]
    assert not near, f"requests too near the {threshold} s threshold to judge: {near}"
    _wait(lambda: watch.span_requests() >= len(timed), "the objective's spans to be counted")
    good = [(t, n) for t, n in timed if t <= threshold]
    return Truth(threshold, len(timed), len(good), sum(n for _, n in good),
                 _histogram(before, after, threshold))  # fmt: skip


def _calibrate(base: str, ledger: workload.Ledger, prompt: str) -> int:
    """A long request's token count that takes MARGIN**2 times the short ones' longest time."""
    long = 64
    while True:
        for n in (SHORT, SHORT, long):
            workload.complete(base, ledger, prompt, n)
        (short_a, _), (short_b, _), (took, _) = ledger.timed[-3:]
        if took > max(short_a, short_b) * MARGIN**2 * 1.5 or long >= 1024:
            return long
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
