"""A parsed /metrics body, indexed for the mappers.

Parsing is prometheus_client's (``text_string_to_metric_families``); this only indexes families
by name so each mapper touches the handful it needs, not every sample of a 100 KB body.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TextIO, cast

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_fd_to_metric_families

Row = tuple[Mapping[str, str], float]


class ExpositionError(ValueError):
    """The body is not valid Prometheus text exposition."""


@dataclass(frozen=True, slots=True)
class Exposition:
    """Families by name. Counter families are named without ``_total`` by the parser.

    ``families`` holds those a mapper may read (``keep``); ``all_names`` names every family of
    the body, for engine detection and messages.
    """

    families: Mapping[str, Metric]
    all_names: frozenset[str] = frozenset()

    @classmethod
    def parse(cls, text: str, keep: Callable[[str], bool] | None = None) -> Exposition:
        """``keep``: which families to hold on to; the others are dropped as they are parsed,
        so two 150 KB bodies parsed at once do not hold every sample of both (vLLM exposes
        a dozen histograms nobody maps: most of a body's samples)."""
        families: dict[str, Metric] = {}
        names: set[str] = set()
        try:
            for family in text_fd_to_metric_families(cast(TextIO, _lines(text))):
                names.add(family.name)
                if keep is None or keep(family.name):
                    families[family.name] = family
        except (ValueError, IndexError, KeyError, TypeError) as exc:
            # prometheus_client raises ValueError mostly, but not only, on a broken line.
            raise ExpositionError(f"not Prometheus text format: {exc}") from exc
        return cls(families, frozenset(names))

    def rows(self, sample_name: str) -> list[Row]:
        """(labels, value) of every sample named ``sample_name``; empty when absent."""
        family = self._family_of(sample_name)
        if family is None:
            return []
        return [(s.labels, float(s.value)) for s in family.samples if s.name == sample_name]

    def has_samples(self, sample_name: str) -> bool:
        return bool(self.rows(sample_name))

    def names(self) -> Iterator[str]:
        return iter(self.all_names or self.families)

    def _family_of(self, sample_name: str) -> Metric | None:
        # A sample "x_total" lives in family "x" (counter) or "x_total" (untyped); histogram
        # series in the family without their suffix; "x_created" in its own gauge family.
        for suffix in ("", "_total", "_bucket", "_count", "_sum"):
            if suffix and not sample_name.endswith(suffix):
                continue
            family = self.families.get(sample_name.removesuffix(suffix) if suffix else sample_name)
            if family is not None:
                return family
        return None


def _lines(text: str) -> Iterator[str]:
    """The lines of ``text`` as ``io.StringIO(text)`` yields them (each with its "\n", split on
    "\n" only), without the copy StringIO makes: it holds a body as 4 bytes a character, 600 kB
    for a 150 kB vLLM body, held through the whole parse (bench/memory.py: the largest part of
    a tick's peak, two targets parsed at once)."""
    start, end = 0, len(text)
    while start < end:
        stop = text.find("\n", start, end)
        stop = end if stop < 0 else stop + 1
        yield text[start:stop]
        start = stop
