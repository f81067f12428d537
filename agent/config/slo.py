"""The ``[[slo]]`` array: service-level objectives on request latency, per model.

[[slo]]
model = "llama-8b"        # as the engine labels it; "*" (the default): every model without its own
ttft = "500ms"            # time to first token
itl = "50ms"              # inter-token latency (time per output token)
e2e = "10s"               # end-to-end request latency
queue = "1s"              # time queued before scheduling
objective = 0.99          # the fraction of requests that must meet ALL the thresholds given

A request meets the objective when it is within every threshold set (a joint objective), so the
share of requests that did is the goodput's share. Which requests did, and what the others cost,
is the reporting and alerting rooms' business; this module only reads and checks the objectives.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from agent.config.reader import Reader, shown
from collectors.otlp.objective import spell
from foundation.printable import printable

ANY_MODEL = "*"
THRESHOLD_KEYS = ("ttft", "itl", "e2e", "queue")
# A latency objective longer than an hour is no objective anyone serving interactive requests
# holds; it is a unit slip ("500m", minutes, for "500ms"). The engines' latency histograms also
# end far below that, and past a histogram's last finite bucket no request can be judged.
MAX_THRESHOLD = 3600.0
_ALLOWED = {"model", *THRESHOLD_KEYS, "objective"}


@dataclass(frozen=True, slots=True)
class SloConfig:
    """One model's objective: thresholds in seconds (None: not part of it), and the fraction
    of requests that must meet all of those set, in (0, 1)."""

    model: str
    ttft_seconds: float | None
    itl_seconds: float | None
    e2e_seconds: float | None
    queue_seconds: float | None
    objective: float

    def thresholds(self) -> dict[str, float]:
        """The thresholds set, by key ("ttft", "itl", "e2e", "queue"), in seconds."""
        values = (self.ttft_seconds, self.itl_seconds, self.e2e_seconds, self.queue_seconds)
        return {key: v for key, v in zip(THRESHOLD_KEYS, values, strict=True) if v is not None}

    @property
    def key(self) -> str:
        """The thresholds spelled ("ttft<=0.5s,e2e<=10s"): the ``objective`` label of the
        requests judged from their spans by exactly these (collectors.otlp)."""
        return spell(self.ttft_seconds, self.itl_seconds, self.e2e_seconds, self.queue_seconds)


def objective_for(slos: Sequence[SloConfig], model: str) -> SloConfig | None:
    """The objective for ``model``: its own, else the "*" one, else None."""
    fallback = None
    for slo in slos:
        if slo.model == model:
            return slo
        if slo.model == ANY_MODEL:
            fallback = slo
    return fallback


def parse_slos(r: Reader, top: dict[str, Any]) -> tuple[SloConfig, ...]:
    """The ``[[slo]]`` array; problems go to ``r`` with their key paths (``slo[1].ttft``)."""
    out: list[SloConfig] = []
    first: dict[str, int] = {}  # model -> the index of the entry that set it
    for i, item in enumerate(r.array(top, "slo")):
        path = f"slo[{i}]"
        t = r.table(item, path, _ALLOWED)
        if not isinstance(item, dict):
            continue  # "expected a table" said; nothing more to say about it
        model = _model(r, t, f"{path}.model")
        # The index of the entry that set this model first: this one's own unless a duplicate.
        owner = i if model is None else first.setdefault(model, i)
        if owner != i:
            # Two objectives for one model: which counts would be a guess. Said even when
            # either entry has other mistakes, so that one pass lists every problem.
            whose = "every other model" if model == ANY_MODEL else repr(model)
            r.problem(f"{path}.model", f"duplicate: slo[{owner}] already sets the objective "
                                       f"for {whose}")  # fmt: skip
        slo = _slo(r, t, path, model)
        if slo is not None and owner == i:
            out.append(slo)
    return tuple(out)


def _slo(r: Reader, t: dict[str, Any], path: str, model: str | None) -> SloConfig | None:
    """The entry's objective, or None when anything in it (its model included) is wrong."""
    problems_before = len(r.problems)
    ttft, itl, e2e, queue = (_threshold(r, t, f"{path}.{key}") for key in THRESHOLD_KEYS)
    objective = _objective(r, t, f"{path}.objective")
    # Counted from the keys written, valid or not: a wrong value is not also "no threshold".
    if not any(f"{path}.{key}" in t for key in THRESHOLD_KEYS):
        r.problem(path, f"no threshold: set at least one of {', '.join(THRESHOLD_KEYS)}")
    if len(r.problems) > problems_before or model is None or objective is None:
        return None
    return SloConfig(model, ttft, itl, e2e, queue, objective)


def _model(r: Reader, t: dict[str, Any], key: str) -> str | None:
    if key not in t:
        return ANY_MODEL
    model = r.optional_string(t, key)
    if model is None:
        return None  # not a string: already a problem
    # Matched exactly against the engines' `model` label, and shown in reports: a blank name
    # matches nothing, and control characters would reach terminals and Slack.
    if not model.strip() or printable(model) != model:
        r.problem(key, f'expected a model name as the engine labels it, or "*", got {shown(model)}')
        return None
    return model


def _threshold(r: Reader, t: dict[str, Any], key: str) -> float | None:
    """Seconds in a Prometheus duration string; None when absent or wrong."""
    value = t.get(key)
    if value is None:
        return None
    if isinstance(value, int | float) and not isinstance(value, bool):
        # Elsewhere a bare number is seconds, but latencies are spoken of in milliseconds as
        # often as in seconds: `ttft = 500` is one or the other, so the unit must be written.
        r.problem(key, f'expected a duration string like "500ms" or "2s", got the number '
                       f"{shown(value)} (seconds or milliseconds? write the unit)")  # fmt: skip
        return None
    seconds = r.duration(t, key, math.nan, numbers=False, maximum=MAX_THRESHOLD)
    return None if math.isnan(seconds) else seconds


def _objective(r: Reader, t: dict[str, Any], key: str) -> float | None:
    """The objective, a fraction in (0, 1); None (and a problem) when absent or wrong."""
    value = t.get(key)
    if value is None:
        r.problem(key, "missing (the fraction of requests that must meet the thresholds, "
                       "e.g. 0.99)")  # fmt: skip
        return None
    if not isinstance(value, int | float) or isinstance(value, bool):
        r.problem(key, f"expected a number like 0.99, got {shown(value)}")
        return None
    # Compared as given, never through float(): a 400-digit TOML integer does not fit in one.
    if value == 1:
        # Burn-rate alerts divide by the error budget, 1 - objective.
        r.problem(key, "an objective of 1 leaves no error budget; use e.g. 0.999")
        return None
    if 1 < value < 100:
        r.problem(key, f"must be greater than 0 and less than 1, got {value:g}; "
                       f"did you mean {value / 100:g}?")  # fmt: skip
        return None
    if not 0 < value < 1:  # NaN and the infinities included
        r.problem(key, f"must be greater than 0 and less than 1, got {shown(value)}")
        return None
    return float(value)
