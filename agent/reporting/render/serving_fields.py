"""A model's serving efficiency as named cells (agent.reporting.serving_parts): the JSON keys
on each model, and the columns of the "Serving efficiency" section."""

from __future__ import annotations

from agent.reporting.model import Serving
from agent.reporting.render.values import Cell, Kind

Record = dict[str, Cell]  # as agent.reporting.render.fields names it

# The line under the section's heading: each figure's basis, in short.
SERVING_NOTE = (
    "cache hits: cached / all prompt tokens (engines that separate them); cache saved: cached "
    "tokens at the model's cost per computed token; spec accept: accepted / draft tokens; "
    "KV peak and max queue: the window's highest gauges"
)


def serving_record(s: Serving) -> Record:
    return {
        "prefix_cache_hit_ratio": Cell(Kind.RATIO, s.prefix_cache_hit_ratio),
        "cached_prompt_tokens": Cell(Kind.COUNT, s.cached_prompt_tokens),
        "cache_saved_usd": Cell(Kind.USD, s.cache_saved_usd),
        "prefix_cache_basis": Cell(Kind.TEXT, s.prefix_cache_basis),
        "spec_decode_acceptance_ratio": Cell(Kind.RATIO, s.spec_decode_acceptance_ratio),
        "spec_decode_basis": Cell(Kind.TEXT, s.spec_decode_basis),
        "kv_cache_peak_ratio": Cell(Kind.RATIO, s.kv_cache_peak_ratio),
        "requests_waiting_peak": Cell(Kind.COUNT, s.requests_waiting_peak),
        "kv_cache_basis": Cell(Kind.TEXT, s.kv_cache_basis),
    }
