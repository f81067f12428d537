"""A parsed /metrics body, indexed for the mappers.

Parsing is prometheus_client's (``text_string_to_metric_families``); this only indexes families
by name so each mapper touches the handful it needs, not every sample of a 100 KB body.

Where prometheus_client is stricter than the parser Prometheus scrapes with (model/textparse
promparse.go), a body is read as Prometheus reads it, so a target Prometheus scrapes is not down
here: label terms need no comma between them (``{ a = "1" b = "2" }``), and label names that
begin with ``__`` (``__type__``, ``__unit__``) are labels like any other. Those bodies are rare,
so they cost a second parse, with the label sets rewritten, rather than a slower first one.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TextIO, cast

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_fd_to_metric_families

from collectors.limits import LimitExceeded

Row = tuple[Mapping[str, str], float]
_UNTYPED = "unknown"  # prometheus_client's type for a family without a TYPE line

# prometheus_client refuses label names that begin with "__"; the tolerant reading passes them
# through it quoted behind this private-use character and takes it off again (_restore_reserved).
# A line that has the character itself is left as it is.
_RESERVED = "\ue000"
_QUOTED = r'"(?:[^"\\]|\\.)*"'
# One label term as promparse's lexer reads it: a name (or a quoted name), "=", a quoted value
# and an optional comma, blanks allowed between them. A quoted string alone is a metric name.
_TERM = re.compile(
    rf"[ \t]*(?:([a-zA-Z_][a-zA-Z0-9_]*)|({_QUOTED}))[ \t]*(?:=[ \t]*({_QUOTED}))?[ \t]*(,?)"
)
_CLOSE = re.compile(r"[ \t]*\}")


class ExpositionError(ValueError):
    """The body is not valid Prometheus text exposition."""


class _Unreadable(ValueError):
    """prometheus_client could not read a line (as opposed to a body it read and we refuse)."""


def _no_duplicates(families: Iterable[Metric]) -> None:
    """A series twice in one body would be counted twice (Prometheus refuses the sample as a
    duplicate); checked for the families a mapper reads, which are few, across families, since
    a series of a later untyped block is a family of its own name (``x_count``)."""
    seen: set[tuple[str, frozenset[tuple[str, str]]]] = set()
    for family in families:
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            if key in seen:
                shown = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                raise ExpositionError(f"duplicate sample {sample.name}{{{shown:.200}}} in the body")
            seen.add(key)


def _merge(families: dict[str, Metric], again: Metric, strings: dict[str, str]) -> None:
    """A second block of a family: its samples join the first's.

    A block without a TYPE line (prometheus_client's "unknown") claims no type, so it joins a
    typed one, as Prometheus ingests every sample of both. Two TYPE lines that disagree are
    refused: the body contradicts itself about what its samples mean."""
    first = families.get(again.name)
    if first is None:  # a family nobody reads, seen twice: nothing to keep
        return
    if first.type != again.type and _UNTYPED not in (first.type, again.type):
        raise ExpositionError(
            f"family {again.name} appears twice with different types"
            f" ({first.type} and {again.type})"
        )
    if first.type == _UNTYPED:
        first.type = again.type
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
        try:
            return cls._read(_lines(text), keep, check, tolerant=False)
        except _Unreadable:
            pass
        try:  # as promparse reads it (see the module's docstring)
            return cls._read(map(_as_promparse_reads, _lines(text)), keep, check, tolerant=True)
        except _Unreadable as exc:
            raise ExpositionError(f"not Prometheus text format: {exc}") from exc.__cause__

    @classmethod
    def _read(
        cls,
        lines: Iterable[str],
        keep: Callable[[str], bool] | None,
        check: Callable[[str, Mapping[str, str]], None] | None,
        tolerant: bool,
    ) -> Exposition:
        families: dict[str, Metric] = {}
        names: set[str] = set()
        strings: dict[str, str] = {}
        try:
            for family in text_fd_to_metric_families(cast(TextIO, lines)):
                if tolerant:
                    _restore_reserved(family)
                if check is not None:
                    for sample in family.samples:
                        check(sample.name, sample.labels)
                if family.name in names:
                    _merge(families, family, strings)
                names.add(family.name)
                if (keep is None or keep(family.name)) and family.name not in families:
                    families[family.name] = _compact(family, strings)
        except (ValueError, IndexError, KeyError, TypeError) as exc:
            if isinstance(exc, ExpositionError | LimitExceeded):
                raise
            # prometheus_client raises ValueError mostly, but not only, on a broken line.
            raise _Unreadable(str(exc)) from exc
        _no_duplicates(families.values())
        return cls(families, frozenset(names))

    def rows(self, sample_name: str) -> list[Row]:
        """(labels, value) of every sample named ``sample_name``; empty when absent."""
        return [
            (s.labels, float(s.value))
            for family in self._families_of(sample_name)
            for s in family.samples
            if s.name == sample_name
        ]

    def has_samples(self, sample_name: str) -> bool:
        return bool(self.rows(sample_name))

    def names(self) -> Iterator[str]:
        return iter(self.all_names or self.families)

    def _families_of(self, sample_name: str) -> list[Metric]:
        # A sample "x_total" lives in family "x" (counter) or "x_total" (untyped); histogram
        # series in the family without their suffix; "x_created" in its own gauge family. A
        # histogram's or summary's series that come again in a block without a TYPE line are
        # a family of their own name (``x_count``): the series of both are the family's.
        found: list[Metric] = []
        for suffix in ("", "_total", "_bucket", "_count", "_sum"):
            if suffix and not sample_name.endswith(suffix):
                continue
            family = self.families.get(sample_name.removesuffix(suffix) if suffix else sample_name)
            if family is not None and all(family is not f for f in found):
                found.append(family)
        return found


def _compact(family: Metric, strings: dict[str, str]) -> Metric:
    """``family`` with each sample's name, label names and label values shared with every
    equal string seen in this body. The parser makes new strings for every sample; a vLLM
    histogram repeats the same few (``model_name``, ``engine``, each ``le``) on every bucket of
    every series, so unshared, a kept family holds them hundreds of times over, about half of
    what its families take (two targets parsed at once are the largest part of a 1 s tick's
    peak)."""
    share = strings.setdefault
    family.samples = [
        sample._replace(
            name=share(sample.name, sample.name),
            labels={share(k, k): share(v, v) for k, v in sample.labels.items()},
        )
        for sample in family.samples
    ]
    return family


def _as_promparse_reads(line: str) -> str:
    """``line`` with its label set spelled as prometheus_client reads it, where promparse reads
    it and prometheus_client would not: a comma between every two terms, and names that begin
    with "__" marked (``_RESERVED``). Any other line, and any label set promparse would refuse
    too, comes back as it was, for prometheus_client to judge."""
    brace = line.find("{")
    if brace < 0 or line.lstrip().startswith("#") or '"' in line[:brace] or _RESERVED in line:
        return line
    terms: list[str] = []
    pos, comma, changed = brace + 1, True, False
    while (close := _CLOSE.match(line, pos)) is None:
        term = _TERM.match(line, pos)
        if term is None:
            return line
        name, quoted, value, after = term.groups()
        if value is None and name is not None:
            return line  # a bare name is promparse's error too ("expected equal")
        changed |= not comma
        if name is not None and name.startswith("__") and name != "__name__":
            name, changed = f'"{_RESERVED}{name}"', True
        elif value is not None and quoted is not None and quoted.startswith('"__'):
            name, changed = f'"{_RESERVED}{quoted[1:]}', True
        label = name if name is not None else quoted
        terms.append(label if value is None else f"{label}={value}")
        pos, comma = term.end(), bool(after)
    if not changed:
        return line
    return f"{line[:brace]}{{{','.join(terms)}}}{line[close.end() :]}"


def _restore_reserved(family: Metric) -> None:
    """The label names ``_as_promparse_reads`` marked, as the body spelled them."""
    for i, sample in enumerate(family.samples):
        if any(k.startswith(_RESERVED) for k in sample.labels):
            labels = {k.removeprefix(_RESERVED): v for k, v in sample.labels.items()}
            family.samples[i] = sample._replace(labels=labels)


def _lines(text: str) -> Iterator[str]:
    """The lines of ``text`` as ``io.StringIO(text)`` yields them (each with its "\n", split on
    "\n" only), without the copy StringIO makes: it holds a body as 4 bytes a character, 600 kB
    for a 150 kB vLLM body, held through the whole parse (the largest part of a tick's peak,
    two targets parsed at once)."""
    start, end = 0, len(text)
    while start < end:
        stop = text.find("\n", start, end)
        stop = end if stop < 0 else stop + 1
        yield text[start:stop]
        start = stop
