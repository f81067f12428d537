"""Which engine a /metrics body is, and which families any engine's mapper reads.

``ENGINES`` lists the engine modules in detection order; each has ``detect(exposition) -> bool``
and ``map_samples(exposition, context) -> list[Sample]``. The order settles bodies with two
engines' families: Dynamo's frontend first (it sees every request, whatever serves them);
vLLM before Triton (Triton's vLLM backend prints ``vllm:`` families beside ``nv_inference_*``,
and vLLM's count tokens); NIM last, its names having no prefix to tell them by.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from collectors.base import Sample
from collectors.engines import dcgm, dynamo, llamacpp, lmdeploy, nim, sglang, tgi, triton, vllm
from collectors.engines.exposition import Exposition
from collectors.engines.rules import Context


@dataclass(frozen=True, slots=True)
class Engine:
    name: str
    detect: Callable[[Exposition], bool]
    map_samples: Callable[[Exposition, Context], list[Sample]]


MODULES = (dynamo, vllm, sglang, tgi, llamacpp, lmdeploy, triton, dcgm, nim)
ENGINES: dict[str, Engine] = {m.NAME: Engine(m.NAME, m.detect, m.map_samples) for m in MODULES}


def _read_families() -> frozenset[str]:
    """Every family a mapper may read: each engine's ``READS``, as the parser names their
    families (counters without ``_total``, histograms without their suffixes), and the
    ``_created`` companions restarts are told by. A histogram's series that come again in a
    block without a TYPE line are families of their own names (``x_bucket``, ``x_count``)."""
    out: set[str] = set()
    suffixes = ("_total", "_bucket", "_count", "_sum")
    for name in (n for m in MODULES for n in m.READS):
        base = name
        for suffix in suffixes:
            base = base.removesuffix(suffix)
        out |= {name, base, base + "_created", *(base + suffix for suffix in suffixes)}
    return frozenset(out)


READ_FAMILIES = _read_families()


def read_by_a_mapper(family: str) -> bool:
    """Whether some engine's mapper reads ``family`` (Exposition.parse's ``keep``)."""
    return family in READ_FAMILIES


def detect(exposition: Exposition) -> Engine | None:
    """The engine whose metric families these are, or None when no known prefix is there."""
    return next((e for e in ENGINES.values() if e.detect(exposition)), None)
