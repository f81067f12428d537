"""Ollama's ``GET /api/ps`` (JSON: the models loaded now) to the canonical engine signals.

Ollama has no Prometheus endpoint (ollama#3144 is open). ``/api/ps`` lists each loaded model
with ``size`` (its whole footprint) and ``size_vram`` (the part in device memory), bytes; the
model label is its ``name`` (``mistral:latest``). So an Ollama target gives one signal,
``gpuwatch_engine_model_memory_bytes`` per loaded model; requests, tokens and latencies are not
counted (absent, never 0): its GPUs are priced like any target's, its cost per token is unknown.
A model that is not loaded is not listed, so its series ends rather than reading 0.

The body is read under the target's limits like a /metrics body: ``sample_limit`` caps the
models listed, the label limits apply to their names, and the size cap and timeout of the fetch
are the scrape's own. A body that is not this JSON is refused with what was wrong and where.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from collectors.base import Sample
from collectors.engines.exposition import ExpositionError
from collectors.engines.rules import Context
from collectors.limits import LimitExceeded, ScrapeLimits

NAME = "ollama"
MEMORY = "gpuwatch_engine_model_memory_bytes"


@dataclass(frozen=True, slots=True)
class LoadedModel:
    name: str
    size_vram: int | None  # None: not reported (an older or a foreign answer)


# An /api/ps answer as ``auto`` knows it: a JSON object whose first key is "models" (a
# Prometheus 3 body may begin with ``{"metric.name"``, never with ``{"models":``).
_PS = re.compile(r'\A\s*\{\s*"models"\s*:')


def wanted(engine: str, body: str) -> bool:
    """Whether this body goes to the JSON reader: a target configured ``ollama``, or ``auto``
    with an /api/ps answer."""
    return engine == NAME or (engine == "auto" and _PS.match(body) is not None)


def parse(body: str, limits: ScrapeLimits) -> list[LoadedModel]:
    try:
        document = json.loads(body)
    except ValueError as exc:
        raise ExpositionError(f"not Ollama /api/ps JSON: {exc}") from exc
    if not isinstance(document, dict) or "models" not in document:
        raise ExpositionError('not Ollama /api/ps JSON: no "models" in the answer')
    listed = document["models"]
    if listed is None:  # Go writes a nil slice as null: nothing loaded
        listed = []
    if not isinstance(listed, list):
        raise ExpositionError('Ollama /api/ps: "models" is not a list')
    if limits.sample_limit and len(listed) > limits.sample_limit:
        raise LimitExceeded(
            f"sample_limit exceeded (samples: {len(listed)}, limit: {limits.sample_limit})"
        )
    models = [_model(entry, i) for i, entry in enumerate(listed)]
    seen: set[str] = set()
    for m in models:
        limits.check_labels(MEMORY, {"model": m.name})
        if m.name in seen:
            raise ExpositionError(f"Ollama /api/ps: model {m.name!r:.100} listed twice")
        seen.add(m.name)
    return models


def _model(entry: Any, index: int) -> LoadedModel:
    where = f"Ollama /api/ps: models[{index}]"
    if not isinstance(entry, Mapping):
        raise ExpositionError(f"{where} is not an object")
    name = entry.get("name") or entry.get("model")
    if not isinstance(name, str) or not name:
        raise ExpositionError(f'{where} has no "name"')
    vram = entry.get("size_vram")
    if vram is not None and (isinstance(vram, bool) or not isinstance(vram, int) or vram < 0):
        shown = f"{vram!r:.50}"
        raise ExpositionError(f'{where} ({name:.100}): "size_vram" is not a byte count: {shown}')
    return LoadedModel(name, vram)


def map_models(models: list[LoadedModel], context: Context) -> list[Sample]:
    labels = {"host": context.host, "target": context.target, "engine": NAME}
    return [
        Sample(
            metric=MEMORY,
            value=float(m.size_vram),
            labels={**labels, "model": m.name},
            ts=context.now,
        )
        for m in models
        if m.size_vram is not None
    ]
