"""The ``otlp`` collector: each tick, the request spans that arrived since the last one, judged
against their model's objective and added to cumulative counters.

Counters rather than stored spans: ``gpuwatch_slo_span_requests_total`` and
``gpuwatch_slo_span_output_tokens_total`` by target, model, objective and result (met or missed)
are rolled up per minute like the engines' token counters, so the per-minute counts of requests
and tokens within and outside the objective are the rollup rows, restart-safe and forwarded to
a fleet's database with the rest. A counter child starts at 0 on the tick it first appears and
counts from the next, so the rollup's first increase holds its first requests.

Which target and model a span is for: the target the export's URL path names
(``/v1/traces/<target>``), else the target whose name is the span's ``service.name``, else the
box's only target; the model the span names (``gen_ai.response.model``), else the target's
configured ``model``, else the one model its last scrape reported. A span that stays unplaced
for a minute is counted as such and dropped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from collectors.base import Sample
from collectors.otlp.inbox import Arrival, SpanInbox
from collectors.otlp.objective import Objective, met

REQUESTS = "gpuwatch_slo_span_requests_total"
OUTPUT_TOKENS = "gpuwatch_slo_span_output_tokens_total"
SPANS = "gpuwatch_otlp_spans_total"
MAX_KEYS = 1000  # (target, model, objective, result) counted: a box serves a handful
WAIT_TICKS = 6  # a target's model is known after its first scrape; a minute at 10 s ticks

Key = tuple[str, str, str, str]  # target, model, objective key, result


@dataclass
class SpanCollector:
    host: str
    inbox: SpanInbox
    objective_of: Callable[[str], Objective | None]
    target_models: Mapping[str, str | None]  # configured targets -> their configured model
    name: str = "otlp"
    _requests: dict[Key, float] = field(default_factory=dict)
    _tokens: dict[Key, float] = field(default_factory=dict)
    _shown: set[tuple[str, ...]] = field(default_factory=set)  # (metric, *key) shown so far
    _scraped: dict[str, Sequence[Sample]] = field(default_factory=dict)  # the last good scrape
    _models: dict[str, frozenset[str]] = field(default_factory=dict)  # read from it when needed
    _waiting: list[tuple[int, Arrival]] = field(default_factory=list)
    _outcomes: dict[str, float] = field(default_factory=dict)

    def scraped(self, samples: Mapping[str, Sequence[Sample]]) -> None:
        """Each target's last successful scrape (the runner tells, every round); kept only for
        the targets whose model the configuration does not name."""
        wanted = {t: s for t, s in samples.items() if t in self.target_models}
        self._scraped.update({t: s for t, s in wanted.items() if not self.target_models[t]})
        self._models.clear()

    def collect(self, now: datetime) -> Iterable[Sample]:
        arrivals = [(0, a) for a in self.inbox.take()]
        waiting, self._waiting = self._waiting, []
        for age, arrival in waiting + arrivals:
            self._count(age, arrival)
        return self._samples(now)

    def _count(self, age: int, arrival: Arrival) -> None:
        target = self._target(arrival)
        if target is None:
            self._outcome("unplaced_target")
            return
        model = self._model(target, arrival)
        if model is None:
            if age < WAIT_TICKS:
                self._waiting.append((age + 1, arrival))
            else:
                self._outcome("unplaced_model")
            return
        objective = self.objective_of(model)
        if objective is None:
            self._outcome("no_objective")
            return
        verdict = met(arrival.facts, objective)
        if verdict is None:
            self._outcome("unjudged")  # a threshold's latency is not on the span
            return
        key = (target, model, objective.key, "met" if verdict else "missed")
        if key not in self._requests and len(self._requests) >= MAX_KEYS:
            # The model comes from the span: a client naming a new one per request would grow
            # the counters (and /metrics) without end, as a scrape's series limit prevents.
            self._outcome("over_limit")
            return
        self._requests[key] = self._requests.get(key, 0.0) + 1
        tokens = arrival.facts.output_tokens
        if tokens is not None:
            self._tokens[key] = self._tokens.get(key, 0.0) + tokens
        self._outcome("counted")

    def _target(self, arrival: Arrival) -> str | None:
        named = arrival.target or arrival.facts.service
        if named in self.target_models:
            return named
        if arrival.target is None and len(self.target_models) == 1:
            return next(iter(self.target_models))
        return None

    def _model(self, target: str, arrival: Arrival) -> str | None:
        if arrival.facts.model:
            return arrival.facts.model
        configured = self.target_models.get(target)
        if configured:
            return configured
        if target not in self._models:
            found = self._scraped.get(target, ())
            self._models[target] = frozenset(m for s in found if (m := s.labels.get("model")))
        models = self._models[target]
        return next(iter(models)) if len(models) == 1 else None

    def _outcome(self, outcome: str) -> None:
        self._outcomes[outcome] = self._outcomes.get(outcome, 0.0) + 1

    def _samples(self, now: datetime) -> list[Sample]:
        out: list[Sample] = []
        for metric, totals in ((REQUESTS, self._requests), (OUTPUT_TOKENS, self._tokens)):
            for key, total in totals.items():
                target, model, objective, result = key
                labels = {"host": self.host, "target": target, "model": model,
                          "objective": objective, "result": result}  # fmt: skip
                # First shown at 0: its first requests become the rollup's first increase.
                value = total if (metric, *key) in self._shown else 0.0
                self._shown.add((metric, *key))
                out.append(Sample(metric=metric, value=value, labels=labels, ts=now))
        received = self.inbox.snapshot() | self._outcomes
        for outcome, count in sorted(received.items()):
            labels = {"host": self.host, "outcome": outcome}
            out.append(Sample(metric=SPANS, value=float(count), labels=labels, ts=now))
        return out
