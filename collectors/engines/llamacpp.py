"""llama.cpp server (``--metrics``) to the canonical engine signals.

No labels at all (the target's configured model names it); deferred requests are the queue.
Newer builds count only computed prompt tokens in ``prompt_tokens_total`` and add
``prompt_tokens_cached_total``; with both, all prompt tokens are their sum. The KV-cache gauges
were removed upstream (PR #13660), so KV usage is absent, never guessed.
"""

from __future__ import annotations

from collections.abc import Mapping

from collectors.base import Sample
from collectors.engines.exposition import Exposition
from collectors.engines.rules import Context, Counter, Gauge, Mapper

NAME = "llamacpp"

RULES = (
    Gauge("gpuwatch_engine_requests_running", ("llamacpp:requests_processing",)),
    Gauge("gpuwatch_engine_requests_waiting", ("llamacpp:requests_deferred",)),
    Counter("gpuwatch_engine_generation_tokens_total", ("llamacpp:tokens_predicted_total",)),
)

PROMPT = "llamacpp:prompt_tokens_total"
CACHED = "llamacpp:prompt_tokens_cached_total"
# Every series map_samples reads (the scrape keeps only these families of a body).
READS = tuple(src for rule in RULES for src in rule.sources) + (PROMPT, CACHED)


def detect(exposition: Exposition) -> bool:
    return any(name.startswith("llamacpp:") for name in exposition.names())


def map_samples(exposition: Exposition, context: Context) -> list[Sample]:
    def model_of(_labels: Mapping[str, str]) -> str:
        return context.model

    mapper = Mapper(exposition, context, model_of)
    mapper.apply_all(RULES)
    prompt = mapper.counter_value((PROMPT,)).get(context.model)
    cached = mapper.counter_value((CACHED,)).get(context.model)
    if prompt is not None and cached is not None:
        mapper.emit("gpuwatch_engine_prompt_tokens_total", prompt + cached, context.model)
        mapper.emit("gpuwatch_engine_prompt_tokens_computed_total", prompt, context.model)
    elif prompt is not None:  # an older build: whether cache hits are in it is not said
        mapper.emit("gpuwatch_engine_prompt_tokens_total", prompt, context.model)
    return mapper.samples
