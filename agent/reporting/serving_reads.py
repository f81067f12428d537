"""The database read behind the report's serving efficiency: per (host, target, model), the
window's increases of the prompt, generation and speculative-decoding counters and the highest
KV-cache usage and queue the rollups kept (``rollups.max``, one per series per minute, hour or
day row). Readers name the metrics through :func:`agent.storage.rolled_up.rolled_up`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from sqlalchemy import Connection

from agent.cost.split import Split
from agent.cost.summarize import TokenKey
from agent.reporting.queries import Wanted, _series, _series_sums
from agent.storage import rolled_up

PROMPT, COMPUTED, GENERATED, DRAFT, ACCEPTED = rolled_up.rolled_up(
    rolled_up.PROMPT_TOKENS,
    rolled_up.PROMPT_TOKENS_COMPUTED,
    rolled_up.GENERATION_TOKENS,
    rolled_up.SPEC_DECODE_DRAFT_TOKENS,
    rolled_up.SPEC_DECODE_ACCEPTED_TOKENS,
)
KV, WAITING = rolled_up.rolled_up(rolled_up.KV_CACHE_USAGE, rolled_up.REQUESTS_WAITING)
# vLLM's per-GPU work estimates (agent.cost.efficiency): a model's MFU and MBU.
ESTIMATES = rolled_up.rolled_up(
    rolled_up.ESTIMATED_FLOPS, rolled_up.ESTIMATED_READ_BYTES, rolled_up.ESTIMATED_WRITE_BYTES
)
COUNTERS = (PROMPT, COMPUTED, GENERATED, DRAFT, ACCEPTED)
GAUGES = (KV, WAITING)


@dataclass(frozen=True, slots=True)
class TargetServing:
    """One (host, target, model) over the window. A counter or gauge the engine does not
    export is absent (None), never 0."""

    increases: Mapping[str, float]  # counter metric -> the window's restart-safe increase
    peaks: Mapping[str, float]  # gauge metric -> the window's highest value

    def increase(self, metric: str) -> float | None:
        return self.increases.get(metric)

    def peak(self, metric: str) -> float | None:
        return self.peaks.get(metric)


def serving_reads(conn: Connection, split: Split, wanted: Wanted) -> dict[TokenKey, TargetServing]:
    """The serving-efficiency counters' increases and gauges' peaks (:func:`target_reads`)."""
    return target_reads(conn, split, wanted, COUNTERS, GAUGES)


def estimates(
    conn: Connection, split: Split, wanted: Wanted
) -> dict[TokenKey, Mapping[str, float]]:
    """Per (host, target, model), the work-estimate counters' increases over the window."""
    return {k: t.increases for k, t in target_reads(conn, split, wanted, ESTIMATES).items()}


def target_reads(
    conn: Connection,
    split: Split,
    wanted: Wanted,
    counters: Sequence[str],
    gauges: Sequence[str] = (),
) -> dict[TokenKey, TargetServing]:
    """Per (host, target, model) of the wanted models: the counters' increases and the gauges'
    peaks over the window (several series of one key, e.g. vLLM's per-pid KV gauge, combine:
    increases add up, peaks take the highest)."""
    meta = _series(conn, (*counters, *gauges), wanted)
    increases: dict[TokenKey, dict[str, float]] = {}
    peaks: dict[TokenKey, dict[str, float]] = {}
    for (sid, _), (increase, highest) in _series_sums(conn, split, meta, None).items():
        s = meta[sid]
        model = s.labels.get("model", "")
        if not wanted.model(model):
            continue
        key = (s.host, s.labels.get("target", ""), model)
        if s.metric in gauges:
            if highest is not None:
                into = peaks.setdefault(key, {})
                into[s.metric] = max(into.get(s.metric, highest), highest)
        elif increase is not None:
            into = increases.setdefault(key, {})
            into[s.metric] = into.get(s.metric, 0.0) + increase
    keys = increases.keys() | peaks.keys()
    return {k: TargetServing(increases.get(k, {}), peaks.get(k, {})) for k in keys}
