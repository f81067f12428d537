"""Inference engines' /metrics, mapped to gpuwatch's canonical engine (and dcgm GPU) signals.

One module per engine, each with ``detect(exposition) -> bool`` and
``map_samples(exposition, context) -> list[Sample]``; ``ENGINES`` lists them in detection order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from collectors.base import Sample
from collectors.engines import dcgm, llamacpp, sglang, tgi, vllm
from collectors.engines.exposition import Exposition
from collectors.engines.rules import Context


@dataclass(frozen=True, slots=True)
class Engine:
    name: str
    detect: Callable[[Exposition], bool]
    map_samples: Callable[[Exposition, Context], list[Sample]]


ENGINES: dict[str, Engine] = {
    m.NAME: Engine(m.NAME, m.detect, m.map_samples) for m in (vllm, sglang, tgi, llamacpp, dcgm)
}


def detect(exposition: Exposition) -> Engine | None:
    """The engine whose metric families these are, or None when no known prefix is there."""
    return next((e for e in ENGINES.values() if e.detect(exposition)), None)
