"""The text that prometheus_client writes, reproduced by hand (vLLM and SGLang use it).

Two dialects, both checked against prometheus_client 0.26 itself in the tests:

- single process (``generate_latest`` over the default registry): labels sorted by name
  (``le`` included), histogram lines ``_bucket``.. ``_count`` ``_sum``, and each counter,
  histogram and summary followed by its own ``<name>_created`` gauge family, unless created
  series are off. A labelled family with no children prints HELP and TYPE only;
- multiprocess (``MultiProcessCollector``): no ``_created``, a family without samples is not
  printed at all, and histogram lines come out ``_sum``, ``_bucket``.., ``_count``.

Values and ``le`` go through :func:`go_float`, prometheus_client's ``floatToGoString``.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass

from prometheus_client.core import Metric
from prometheus_client.openmetrics.exposition import generate_latest
from prometheus_client.registry import Collector

from agent.sim.traffic import cumulative_counts

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class Scalar:
    labels: Labels
    value: float


@dataclass(frozen=True)
class Buckets:
    labels: Labels
    bounds: tuple[float, ...]  # finite upper bounds
    cumulative: tuple[int, ...]  # one per bound, then +Inf
    total: float

    @property
    def count(self) -> int:
        return self.cumulative[-1]


@dataclass(frozen=True)
class Summary:
    labels: Labels
    count: int
    total: float


Series = Scalar | Buckets | Summary


@dataclass(frozen=True)
class Family:
    """One metric family as prometheus_client holds it: ``name`` without a counter's _total."""

    name: str
    kind: str  # counter | gauge | histogram | summary
    help: str
    series: tuple[Series, ...]
    created: float | None = None  # start time for the _created family; None: none printed

    @property
    def exposed(self) -> str:
        return self.name + "_total" if self.kind == "counter" else self.name


def histogram(labels: Labels, bounds: Sequence[float], values: Sequence[float]) -> Buckets:
    # The running sum is a left fold in observation order, as Histogram.observe adds it up.
    return Buckets(labels, tuple(bounds), cumulative_counts(values, bounds), sum(values, 0.0))


def go_float(value: float) -> str:
    """prometheus_client's floatToGoString: repr, but Go-style exponents from 1e+06 up."""
    d = float(value)
    if math.isinf(d):
        return "+Inf" if d > 0 else "-Inf"
    if math.isnan(d):
        return "NaN"
    s = repr(d)
    dot = s.find(".")
    if d > 0 and dot > 6:
        mantissa = f"{s[0]}.{s[1:dot]}{s[dot + 1 :]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return s


def _escape(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _line(name: str, labels: Iterable[tuple[str, str]], value: float) -> str:
    pairs = ",".join(f'{k}="{_escape(v)}"' for k, v in sorted(labels))
    return f"{name}{{{pairs}}} {go_float(value)}\n" if pairs else f"{name} {go_float(value)}\n"


def _bucket_lines(name: str, s: Buckets) -> Iterator[str]:
    bounds = tuple(go_float(b) for b in s.bounds) + ("+Inf",)
    for le, count in zip(bounds, s.cumulative, strict=True):
        yield _line(f"{name}_bucket", s.labels + (("le", le),), count)


def _series_lines(f: Family, s: Series, multiprocess: bool) -> Iterator[str]:
    if isinstance(s, Scalar):
        yield _line(f.exposed, s.labels, s.value)
    elif isinstance(s, Summary):
        yield _line(f"{f.name}_count", s.labels, s.count)
        yield _line(f"{f.name}_sum", s.labels, s.total)
    elif multiprocess:
        yield _line(f"{f.name}_sum", s.labels, s.total)
        yield from _bucket_lines(f.name, s)
        yield _line(f"{f.name}_count", s.labels, s.count)
    else:
        yield from _bucket_lines(f.name, s)
        yield _line(f"{f.name}_count", s.labels, s.count)
        yield _line(f"{f.name}_sum", s.labels, s.total)


def _header(name: str, kind: str, help_: str) -> str:
    doc = help_.replace("\\", r"\\").replace("\n", r"\n")
    return f"# HELP {name} {doc}\n# TYPE {name} {kind}\n"


def _family_text(f: Family, multiprocess: bool) -> str:
    out = [_header(f.exposed, f.kind, f.help)]
    for s in f.series:
        out.extend(_series_lines(f, s, multiprocess))
    if f.created is not None and f.kind != "gauge" and f.series and not multiprocess:
        out.append(_header(f"{f.name}_created", "gauge", f.help))
        out.extend(_line(f"{f.name}_created", s.labels, f.created) for s in f.series)
    return "".join(out)


def render_text(families: Iterable[Family], *, multiprocess: bool = False) -> str:
    """The classic text format exactly as prometheus_client's generate_latest writes it."""
    return "".join(_family_text(f, multiprocess) for f in families if f.series or not multiprocess)


def render_openmetrics(families: Iterable[Family], *, multiprocess: bool = False) -> str:
    """What the same registry answers to ``Accept: application/openmetrics-text``."""
    # prometheus_client's own OpenMetrics writer, fed with the families rebuilt as Metrics.
    metrics: list[Metric] = []
    for f in families:
        if multiprocess and not f.series:
            continue
        m = Metric(f.name, f.help, f.kind)
        for s in f.series:
            _add_om_samples(m, f, s, multiprocess)
            if f.created is not None and f.kind != "gauge" and not multiprocess:
                m.add_sample(f"{f.name}_created", dict(s.labels), f.created)
        metrics.append(m)
    return _generate_openmetrics(_Fixed(metrics))


def _generate_openmetrics(collector: Collector) -> str:
    try:
        from prometheus_client.openmetrics.exposition import ALLOWUTF8
    except ImportError:  # before 0.22 there is no escaping, names print as they are
        return generate_latest(collector).decode()
    # ALLOWUTF8 keeps "vllm:" names as they are: 0.26's default escaping turns the colon of
    # sample names (not of HELP/TYPE) into "_", which the engines' older releases never did.
    return generate_latest(collector, escaping=ALLOWUTF8).decode()


def _add_om_samples(m: Metric, f: Family, s: Series, multiprocess: bool) -> None:
    labels = dict(s.labels)
    if isinstance(s, Scalar):
        m.add_sample(f.exposed, labels, s.value)
        return
    if isinstance(s, Summary):
        m.add_sample(f"{f.name}_count", labels, s.count)
        m.add_sample(f"{f.name}_sum", labels, s.total)
        return
    if multiprocess:  # MultiProcessCollector puts _sum first
        m.add_sample(f"{f.name}_sum", labels, s.total)
    bounds = tuple(go_float(b) for b in s.bounds) + ("+Inf",)
    for le, count in zip(bounds, s.cumulative, strict=True):
        m.add_sample(f"{f.name}_bucket", {**labels, "le": le}, count)
    m.add_sample(f"{f.name}_count", labels, s.count)
    if not multiprocess:
        m.add_sample(f"{f.name}_sum", labels, s.total)


class _Fixed(Collector):
    """A Collector that yields a fixed list."""

    def __init__(self, metrics: Sequence[Metric]) -> None:
        self._metrics = metrics

    def collect(self) -> Iterable[Metric]:
        return iter(self._metrics)
