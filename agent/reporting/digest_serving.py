"""The weekly digest's serving-efficiency lines: per model, the prefix-cache hit rate and the
dollars it saved, speculative-decoding acceptance where the engine reports it, the KV-cache and
queue peaks, and whether the report advises another replica (agent.reporting.replica_advice).

The figures are the report's (agent.reporting.serving_parts), with their bases: the dollars
saved price every cached prompt token at the model's average cost per computed token, which a
prefill token seldom costs, so the digest states them as a ceiling ("saved at most"), as the
report's note does. A figure no engine gave is "n/a", never 0; spec-decode acceptance is left
out where no draft token was proposed (most deployments do not use it, and a line of "n/a"
for each would hide the figures that are there).
"""

from __future__ import annotations

from collections.abc import Sequence

from agent.cost.breakeven import usd
from agent.reporting.digest_text import NAME_LIMIT, fit, percent
from agent.reporting.model import ModelRow, Recommendation, Report, Serving

TITLE = "Serving efficiency (prefix cache · KV cache and queue peaks)"
NA = "n/a"


def serving_lines(report: Report, models: Sequence[ModelRow]) -> list[str]:
    """One line per model of ``models`` (in their order) when any of them has a serving figure
    or a replica recommendation; none otherwise (the section is then left out)."""
    replicas = _replica_models(report.recommendations)
    if not any(_known(row.serving) or row.model in replicas for row in models):
        return []
    return [_line(row, row.model in replicas) for row in models]


def _line(row: ModelRow, replica: bool) -> str:
    s = row.serving
    parts = [_prefix(s)]
    if s.spec_decode_acceptance_ratio is not None:
        parts.append(f"spec decode {percent(s.spec_decode_acceptance_ratio)} accepted")
    kv = NA if s.kv_cache_peak_ratio is None else percent(s.kv_cache_peak_ratio)
    waiting = NA if s.requests_waiting_peak is None else f"{s.requests_waiting_peak:,.0f}"
    parts.append(f"KV cache peak {kv}, queue peak {waiting}")
    if replica:
        parts.append("*add a replica* (KV cache full while requests waited)")
    return f"*{fit(row.model, NAME_LIMIT)}*: " + " · ".join(parts)


def _prefix(s: Serving) -> str:
    if s.prefix_cache_hit_ratio is None:
        return f"prefix cache {NA}"
    saved = NA if s.cache_saved_usd is None else f"at most {usd(s.cache_saved_usd)}"
    return f"prefix cache {percent(s.prefix_cache_hit_ratio)} of prompt tokens, saved {saved}"


def _known(s: Serving) -> bool:
    return any(
        v is not None
        for v in (
            s.prefix_cache_hit_ratio,
            s.spec_decode_acceptance_ratio,
            s.kv_cache_peak_ratio,
            s.requests_waiting_peak,
        )
    )


def _replica_models(recommendations: Sequence[Recommendation]) -> frozenset[str]:
    """The models the report advises another replica for: replica_advice titles each
    "<model>: add a replica" (tests/agent/test_serving_efficiency.py holds it to that)."""
    suffix = ": add a replica"
    return frozenset(
        r.title.removesuffix(suffix)
        for r in recommendations
        if r.kind == "replica" and r.title.endswith(suffix)
    )
