"""Mapping rules as data: which engine series feed which canonical signal, and how to combine them.

Per model, the rows of one engine series are combined over every other label: counters and
queue gauges are summed (data-parallel ``engine`` ranks, multiprocess ``pid`` children,
``is_streaming`` splits), ratios take the maximum (a KV cache is as full as its fullest rank),
and per-GPU counters the mean (each rank's rows count the work of one of its GPUs).
Histograms add bucket counts le by le, only when every child has the same buckets.
A series the engine does not expose yields no sample: absent is unknown, never zero.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum

from prometheus_client.utils import floatToGoString

from collectors.base import Sample
from collectors.engines.exposition import Exposition, Row


class Agg(Enum):
    SUM = "sum"
    MAX = "max"
    MEAN = "mean"  # counters only: a per-GPU figure of several ranks, as one rank's GPU


@dataclass(frozen=True, slots=True)
class Context:
    """Where a scrape came from; ``model`` names the model for engines without a model label."""

    host: str
    target: str
    engine: str
    model: str
    now: datetime


@dataclass(frozen=True, slots=True)
class Gauge:
    canonical: str
    sources: tuple[str, ...]  # sample names; the first one present wins (renames across versions)
    agg: Agg = Agg.SUM
    scale: float = 1.0
    where: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Counter:
    canonical: str
    sources: tuple[str, ...]
    where: Mapping[str, str] = field(default_factory=dict)
    # An engine label that becomes a canonical label, e.g. finished_reason -> reason.
    split: tuple[str, str] | None = None
    labels: Mapping[str, str] = field(default_factory=dict)  # fixed extra labels
    agg: Agg = Agg.SUM  # SUM or MEAN (the mean of counters is one while the ranks stay)


@dataclass(frozen=True, slots=True)
class Histogram:
    canonical: str
    sources: tuple[str, ...]  # family base names (without _bucket)
    where: Mapping[str, str] = field(default_factory=dict)
    # The engine's unit per canonical unit, e.g. 1000 for a histogram in milliseconds (Triton):
    # each ``le`` and the ``_sum`` are divided by it, counts are not. Dividing (not multiplying
    # by 0.001) keeps le="100" exactly 0.1.
    divide_by: float = 1.0


ModelOf = Callable[[Mapping[str, str]], str]
RowFilter = Callable[[Mapping[str, str]], bool]
Rule = Gauge | Counter | Histogram


def _everything(_labels: Mapping[str, str]) -> bool:
    return True


@dataclass
class Mapper:
    """Applies rules to one exposition, emitting canonical samples for one context."""

    exposition: Exposition
    context: Context
    model_of: ModelOf
    # Rows to ignore everywhere, e.g. SGLang's per-priority breakdowns beside their totals.
    keep: RowFilter = _everything
    samples: list[Sample] = field(default_factory=list)

    def apply_all(self, rules: Iterable[Rule]) -> list[Sample]:
        for rule in rules:
            if isinstance(rule, Gauge):
                self.gauge(rule)
            elif isinstance(rule, Counter):
                self.counter(rule)
            else:
                self.histogram(rule)
        return self.samples

    def rows(self, name: str, where: Mapping[str, str] = {}) -> list[Row]:
        """Rows of a sample name that match ``where`` and the mapper's filter."""
        return [
            (labels, value)
            for labels, value in self.exposition.rows(name)
            if self.keep(labels) and all(labels.get(k) == v for k, v in where.items())
        ]

    def emit(self, metric: str, value: float, model: str, extra: Mapping[str, str] = {}) -> None:
        c = self.context
        labels = {"host": c.host, "target": c.target, "engine": c.engine, "model": model}
        self.samples.append(
            Sample(metric=metric, value=value, labels={**labels, **extra}, ts=c.now)
        )

    def first_present(self, sources: Sequence[str], where: Mapping[str, str]) -> list[Row]:
        for name in sources:
            rows = self.rows(name, where)
            if rows:
                return rows
        return []

    def gauge(self, rule: Gauge) -> None:
        combine = sum if rule.agg is Agg.SUM else max
        for model, values in self._by_model(self.first_present(rule.sources, rule.where)).items():
            self.emit(rule.canonical, combine(values) * rule.scale, model)

    def counter(self, rule: Counter) -> None:
        for source in rule.sources:
            rows = self.rows(source, rule.where)
            if rows:
                self._counter_rows(rule, source, rows)
                return

    def _counter_rows(self, rule: Counter, source: str, rows: list[Row]) -> None:
        created = _created_by_key(self.exposition, source, self.model_of, rule.split)
        totals: dict[tuple[str, str], float] = defaultdict(float)
        children: dict[tuple[str, str], int] = defaultdict(int)
        for labels, value in rows:
            key = (self.model_of(labels), labels.get(rule.split[0], "") if rule.split else "")
            totals[key] += value
            children[key] += 1
        for (model, split_value), total in totals.items():
            if rule.agg is Agg.MEAN:
                total /= children[(model, split_value)]
            extra = {**rule.labels, **({rule.split[1]: split_value} if rule.split else {})}
            self.emit(rule.canonical, total, model, extra)
            when = created.get((model, split_value))
            if when is not None:
                self.emit(rule.canonical.removesuffix("_total") + "_created", when, model, extra)

    def counter_value(
        self, sources: Sequence[str], where: Mapping[str, str] = {}
    ) -> dict[str, float]:
        """Per model, the summed value of the first present source (for derived counters)."""
        out: dict[str, float] = defaultdict(float)
        for labels, value in self.first_present(sources, where):
            out[self.model_of(labels)] += value
        return dict(out)

    def histogram(self, rule: Histogram) -> None:
        for base in rule.sources:
            rows = self.rows(base + "_bucket", rule.where)
            if rows:
                self._histogram_rows(rule, base, rows)
                return

    def _histogram_rows(self, rule: Histogram, base: str, buckets: list[Row]) -> None:
        per_model = _sum_buckets(buckets, self.model_of)
        counts = self._by_model(self.rows(base + "_count", rule.where))
        sums = self._by_model(self.rows(base + "_sum", rule.where))
        created = _created_by_key(self.exposition, base, self.model_of, None)
        for model, les in per_model.items():
            if les is None:  # children disagree on buckets: refuse rather than mix them
                continue
            for le, count in sorted(les.items()):
                bound = floatToGoString(le / rule.divide_by)
                self.emit(rule.canonical + "_bucket", count, model, {"le": bound})
            if model in counts:
                self.emit(rule.canonical + "_count", sum(counts[model]), model)
            if model in sums:
                self.emit(rule.canonical + "_sum", sum(sums[model]) / rule.divide_by, model)
            if (model, "") in created:
                self.emit(rule.canonical + "_created", created[(model, "")], model)

    def _by_model(self, rows: Iterable[Row]) -> dict[str, list[float]]:
        out: dict[str, list[float]] = defaultdict(list)
        for labels, value in rows:
            out[self.model_of(labels)].append(value)
        return out


def _created_by_key(
    exposition: Exposition, source: str, model_of: ModelOf, split: tuple[str, str] | None
) -> dict[tuple[str, str], float]:
    """The newest ``_created`` per (model, split value): a restart of any child moves it."""
    name = _base_of(source) + "_created"
    out: dict[tuple[str, str], float] = {}
    for labels, value in exposition.rows(name):
        key = (model_of(labels), labels.get(split[0], "") if split else "")
        out[key] = max(value, out.get(key, value))
    return out


def _base_of(source: str) -> str:
    """The name a source's ``_created`` series is named after: a counter without ``_total``, a
    histogram's ``_sum`` or ``_count`` (read as a counter) without its suffix."""
    for suffix in ("_total", "_sum", "_count"):
        if source.endswith(suffix):
            return source.removesuffix(suffix)
    return source


def _sum_buckets(rows: list[Row], model_of: ModelOf) -> dict[str, dict[float, float] | None]:
    """Per model, cumulative count per le summed over children; None when bucket sets differ."""
    children: dict[str, dict[tuple[tuple[str, str], ...], dict[float, float]]] = defaultdict(
        lambda: defaultdict(dict)
    )
    for labels, value in rows:
        rest = tuple(sorted((k, v) for k, v in labels.items() if k != "le"))
        child = children[model_of(labels)][rest]
        le = float(labels["le"])
        # One bound spelled twice ("0.2" and "2e-1") is one bucket to histogram_quantile,
        # which sums the series that share it: so do we, rather than keep the last one read.
        child[le] = child.get(le, 0.0) + value
    out: dict[str, dict[float, float] | None] = {}
    for model, by_child in children.items():
        sets = {frozenset(les) for les in by_child.values()}
        if len(sets) != 1:
            out[model] = None
            continue
        total: dict[float, float] = defaultdict(float)
        for les in by_child.values():
            for le, count in les.items():
                total[le] += count
        out[model] = dict(total)
    return out
