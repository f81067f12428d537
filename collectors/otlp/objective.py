"""Whether one request met a latency objective: every threshold set, at once (a joint
objective), judged from the request's own span, so the share is exact."""

from __future__ import annotations

from dataclasses import dataclass

from collectors.otlp.facts import SpanFacts


@dataclass(frozen=True, slots=True)
class Objective:
    """Thresholds in seconds (None: not part of it). ``key`` spells them ("e2e<=1s") and is the
    counters' ``objective`` label, so requests judged by other thresholds are never mixed."""

    key: str
    ttft: float | None = None
    itl: float | None = None  # judged as the request's mean time per output token (TPOT)
    e2e: float | None = None
    queue: float | None = None


def spell(ttft: float | None, itl: float | None, e2e: float | None, queue: float | None) -> str:
    parts = zip(("ttft", "itl", "e2e", "queue"), (ttft, itl, e2e, queue), strict=True)
    return ",".join(f"{name}<={seconds:g}s" for name, seconds in parts if seconds is not None)


def met(facts: SpanFacts, objective: Objective) -> bool | None:
    """True when the request is within every threshold, False when over any one; None when a
    threshold's latency is not on the span and no other threshold already failed (unjudged)."""
    unknown = False
    for limit, value in (
        (objective.ttft, facts.ttft),
        (objective.itl, facts.tpot),
        (objective.e2e, facts.e2e),
        (objective.queue, facts.queue),
    ):
        if limit is None:
            continue
        if value is None:
            unknown = True
        elif value > limit:
            return False
    return None if unknown else True
