"""Per model: serving efficiency beside cost, from :mod:`agent.reporting.serving_reads`.

Bases, said out loud (each row's ``*_basis``):

- prefix-cache hit ratio: cached over all prompt tokens, where cached is all prompt tokens
  (``prompt_tokens_total``, cached included) minus those computed
  (``prompt_tokens_computed_total``). Only where every target of the model that counts prompt
  tokens also says which it computed (vLLM 0.16+, llama.cpp builds with
  ``prompt_tokens_cached_total``); otherwise unknown, never a guess from one target's share.
- dollars the cache saved: the cached tokens at the model's average cost per computed token,
  its cost over (computed prompt + generated tokens). Every computed token is priced alike:
  a prefill token costs a GPU less than a decode step's token, so where decode dominates this
  overstates what a cached prompt token saved; it is a ceiling at the average, stated as such.
  Unknown where the cost or the hit ratio is.
- speculative-decoding acceptance: accepted over draft tokens (vLLM's ``spec_decode_*``
  counters); unknown where no draft token was proposed in the window.
- KV-cache peak and longest queue: the highest value of the engine's gauges over the window,
  as the rollups keep it (the highest per minute, hour or day row), over the model's targets.
  The two peaks need not fall in the same minute.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from decimal import Decimal

from agent.cost.summarize import TokenKey
from agent.reporting.model import ModelRow, Serving
from agent.reporting.serving_reads import (
    ACCEPTED,
    COMPUTED,
    DRAFT,
    GENERATED,
    KV,
    PROMPT,
    WAITING,
    TargetServing,
)

PREFIX_BASIS = "engine prompt counters: all minus computed prompt tokens"
SAVED_BASIS = "cached tokens x the model's cost per computed (prompt + generated) token"
SPEC_BASIS = "vllm spec_decode accepted / draft tokens"
KV_BASIS = "highest engine KV-cache usage and queue gauges (rollup max)"


def with_serving(
    rows: Sequence[ModelRow], reads: Mapping[TokenKey, TargetServing]
) -> tuple[ModelRow, ...]:
    """The model rows with their serving efficiency (unknown where nothing was read)."""
    by_model: dict[str, list[TargetServing]] = {}
    for (_, _, model), read in reads.items():
        by_model.setdefault(model, []).append(read)
    out = []
    for row in rows:
        parts = by_model.get(row.model)
        cost = None if row.cost_unknown_reason else row.cost_usd
        out.append(row if not parts else replace(row, serving=model_serving(parts, cost)))
    return tuple(out)


def model_serving(parts: Sequence[TargetServing], cost: Decimal | None) -> Serving:
    """One model's serving efficiency over its targets' reads; ``cost`` None: unknown."""
    cached, ratio, saved = _prefix(parts, cost)
    draft = _sum(p.increase(DRAFT) for p in parts)
    accepted = _sum(p.increase(ACCEPTED) for p in parts)
    acceptance = accepted / draft if draft and accepted is not None else None
    kv = _peak(p.peak(KV) for p in parts)
    waiting = _peak(p.peak(WAITING) for p in parts)
    return Serving(
        prefix_cache_hit_ratio=ratio,
        cached_prompt_tokens=cached,
        cache_saved_usd=saved,
        prefix_cache_basis=PREFIX_BASIS if cached is not None else None,
        spec_decode_acceptance_ratio=acceptance,
        spec_decode_basis=SPEC_BASIS if acceptance is not None else None,
        kv_cache_peak_ratio=kv,
        requests_waiting_peak=waiting,
        kv_cache_basis=KV_BASIS if kv is not None or waiting is not None else None,
    )


def _prefix(
    parts: Sequence[TargetServing], cost: Decimal | None
) -> tuple[float | None, float | None, Decimal | None]:
    """(cached prompt tokens, hit ratio, dollars saved); None where unknown."""
    counting = [p for p in parts if p.increase(PROMPT) is not None]
    if not counting or any(p.increase(COMPUTED) is None for p in counting):
        return None, None, None
    every = sum(p.increase(PROMPT) or 0.0 for p in counting)
    computed = sum(p.increase(COMPUTED) or 0.0 for p in counting)
    # A counter reset between scrapes could leave computed above all: never negative hits.
    cached = max(0.0, every - computed)
    ratio = cached / every if every > 0 else None
    generated = _sum(p.increase(GENERATED) for p in counting)
    worked = computed + generated if generated is not None else 0.0
    if cost is None or ratio is None or worked <= 0:
        return cached, ratio, None
    return cached, ratio, cost * Decimal(repr(round(cached / worked, 12)))


def _sum(values: Iterable[float | None]) -> float | None:
    """The sum of the values given; None when none is (absent, not zero)."""
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _peak(values: Iterable[float | None]) -> float | None:
    return max((v for v in values if v is not None), default=None)
