"""Per-target limits on what one scrape may bring: Prometheus' names and meaning, and ours.

A monitoring agent must not be blinded by one target: an engine that labels each request, or a
proxy that answers with someone else's metrics, could bring a hundred thousand series in one
body and make every later tick slow (the alert inputs, the rollup and the store all grow with
the series ever stored). Like Prometheus (``scrape_config``), a target over a limit is a failed
scrape, nothing of it stored, with the limit named:

- ``sample_limit``: samples in the body (Prometheus counts after relabelling; we have none);
- ``label_limit``: labels of one sample, its name included (Prometheus counts ``__name__``);
- ``label_name_length_limit``, ``label_value_length_limit``: bytes of one label's name or value;
- ``series_per_day_limit`` (ours): new series a target may create in a UTC day, counted by
  this process since it started; a body within the limits whose labels change every scrape
  (a request id in a label) is caught here.

0 means no limit, as in Prometheus. The defaults are well above what engines expose (a vLLM
with two models and four data-parallel engines: about 1,500 samples). ``label_limit`` counts
every family, as Prometheus does, info families included: a real vLLM 0.32's
``vllm:cache_config_info`` carries 37 labels (38 with its name), so the default is 64 (it was
30, which refused every scrape of that vLLM).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime

from collectors.base import Sample

LIMIT_KEYS = (
    "sample_limit",
    "label_limit",
    "label_name_length_limit",
    "label_value_length_limit",
    "series_per_day_limit",
)


class LimitExceeded(ValueError):
    """A scrape over one of its target's limits; the message names the limit and the value."""


@dataclass(frozen=True, slots=True)
class ScrapeLimits:
    sample_limit: int = 50_000
    label_limit: int = 64
    label_name_length_limit: int = 128
    label_value_length_limit: int = 2_048
    series_per_day_limit: int = 20_000

    def check_sample_count(self, body: str) -> None:
        """Before parsing: a body with more sample lines than ``sample_limit`` is refused
        without building a single sample (counting lines costs no memory)."""
        if not self.sample_limit:
            return
        count = sample_lines(body)
        if count > self.sample_limit:
            raise LimitExceeded(
                f"sample_limit exceeded (samples: {count}, limit: {self.sample_limit})"
            )

    def check_labels(self, metric: str, labels: Mapping[str, str]) -> None:
        """Prometheus' ``verifyLabelLimits``, with its messages."""
        count = len(labels) + 1  # the metric name is a label to Prometheus
        if self.label_limit and count > self.label_limit:
            raise LimitExceeded(
                f"label_limit exceeded (metric: {metric:.50}, number of labels: {count},"
                f" limit: {self.label_limit})"
            )
        names, values = self.label_name_length_limit, self.label_value_length_limit
        for name, value in labels.items():
            # Bytes, as Prometheus counts; a UTF-8 character is at most 4, so short text
            # needs no encoding (this runs for every sample of every body).
            if names and len(name) * 4 > names and len(name.encode()) > names:
                size = len(name.encode())
                raise LimitExceeded(
                    f"label_name_length_limit exceeded (metric: {metric:.50}, label name:"
                    f" {name:.50}, length: {size}, limit: {names})"
                )
            if values and len(value) * 4 > values and len(value.encode()) > values:
                size = len(value.encode())
                raise LimitExceeded(
                    f"label_value_length_limit exceeded (metric: {metric:.50}, label name:"
                    f" {name:.50}, value: {value[:50]!r}, length: {size}, limit: {values})"
                )


def sample_lines(body: str) -> int:
    """Lines that are samples: neither blank nor comments (``# HELP``, ``# TYPE``, ``# EOF``)."""
    lines = body.count("\n") + (0 if body.endswith("\n") or not body else 1)
    comments = body.count("\n#") + body.startswith("#")
    blank = body.count("\n\n") + body.startswith("\n")
    return max(0, lines - comments - blank)


@dataclass
class NewSeries:
    """The series one target created today (UTC), against ``series_per_day_limit``. Kept as
    hashes: 20,000 of them cost about a megabyte, the price of noticing label churn."""

    limit: int
    _day: date | None = None
    _seen: set[int] = field(default_factory=set)

    def admit(self, samples: Iterable[Sample], now: datetime) -> None:
        """Remember the round's series, or raise when they would take the day over the limit
        (the round is then refused whole, and its series are not remembered)."""
        if not self.limit:
            return
        if now.date() != self._day:
            self._day, self._seen = now.date(), set()
        keys = {hash((s.metric, tuple(sorted(s.labels.items())))) for s in samples}
        fresh = keys - self._seen
        if len(self._seen) + len(fresh) > self.limit:
            raise LimitExceeded(
                f"series_per_day_limit exceeded (new series today: "
                f"{len(self._seen) + len(fresh)}, limit: {self.limit})"
            )
        self._seen |= fresh
