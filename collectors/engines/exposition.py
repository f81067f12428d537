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

from collectors.limits import LimitExceeded

Row = tuple[Mapping[str, str], float]


class ExpositionError(ValueError):
    """The body is not valid Prometheus text exposition."""


def _no_duplicates(family: Metric) -> None:
    """A series twice in one body would be counted twice (Prometheus refuses the sample as a
    duplicate); checked for the families a mapper reads, which are few."""
    seen: set[tuple[str, frozenset[tuple[str, str]]]] = set()
    for sample in family.samples:
        key = (sample.name, frozenset(sample.labels.items()))
        if key in seen:
            shown = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
            raise ExpositionError(f"duplicate sample {sample.name}{{{shown:.200}}} in the body")
        seen.add(key)


def _merge(families: dict[str, Metric], again: Metric, strings: dict[str, str]) -> None:
    """A second block of a family: its samples join the first's when the types agree."""
    first = families.get(again.name)
    if first is None:  # a family nobody reads, seen twice: nothing to keep
        return
    if first.type != again.type:
        raise ExpositionError(
            f"family {again.name} appears twice with different types"
            f" ({first.type} and {again.type})"
        )
    first.samples.extend(_compact(again, strings).samples)


@dataclass(frozen=True, slots=True)
class Exposition:
    """Families by name. Counter families are named without ``_total`` by the parser.

    ``families`` holds those a mapper may read (``keep``); ``all_names`` names every family of
    the body, for engine detection and messages.
    """

    families: Mapping[str, Metric]
    all_names: frozenset[str] = frozenset()

    @classmethod
    def parse(
        cls,
        text: str,
        keep: Callable[[str], bool] | None = None,
        check: Callable[[str, Mapping[str, str]], None] | None = None,
    ) -> Exposition:
        """``keep``: which families to hold on to; the others are dropped as they are parsed,
        so two 150 KB bodies parsed at once do not hold every sample of both (vLLM exposes
        a dozen histograms nobody maps: most of a body's samples). ``check(name, labels)``
        sees every sample of every family and may raise (the per-target label limits).

        A family that appears twice (two blocks, not adjacent) is merged when both blocks
        have one type, and refused when they differ: never half-read."""
        families: dict[str, Metric] = {}
        names: set[str] = set()
        strings: dict[str, str] = {}
        try:
            for family in text_fd_to_metric_families(cast(TextIO, _lines(text))):
                if check is not None:
                    for sample in family.samples:
                        check(sample.name, sample.labels)
                if family.name in names:
                    _merge(families, family, strings)
                names.add(family.name)
                if (keep is None or keep(family.name)) and family.name not in families:
                    families[family.name] = _compact(family, strings)
            for family in families.values():
                _no_duplicates(family)
        except (ValueError, IndexError, KeyError, TypeError) as exc:
            if isinstance(exc, ExpositionError | LimitExceeded):
                raise
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


def _compact(family: Metric, strings: dict[str, str]) -> Metric:
    """``family`` with each sample's name, label names and label values shared with every
    equal string seen in this body. The parser makes new strings for every sample; a vLLM
    histogram repeats the same few (``model_name``, ``engine``, each ``le``) on every bucket of
    every series, so a kept family held them hundreds of times over: about 450 kB of a 150 kB
    body's kept families, now about half that (bench/memory.py: two targets parsed at once are
    the largest part of a 1 s tick's peak)."""
    share = strings.setdefault
    family.samples = [
        sample._replace(
            name=share(sample.name, sample.name),
            labels={share(k, k): share(v, v) for k, v in sample.labels.items()},
        )
        for sample in family.samples
    ]
    return family


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
