"""The ``otlp`` collector for a configuration: the request spans in the daemon's inbox, judged
against each model's ``[[slo]]`` objective (collectors.otlp)."""

from __future__ import annotations

from functools import lru_cache

from agent.config.settings import Config
from agent.config.slo import SloConfig, objective_for
from collectors.otlp.collector import SpanCollector
from collectors.otlp.inbox import SpanInbox
from collectors.otlp.objective import Objective, spell


def span_collector(config: Config, inbox: SpanInbox) -> SpanCollector:
    slos = config.slos

    # A model's objective is fixed for the configuration's life; spans may name any model.
    @lru_cache(maxsize=1024)
    def objective_of(model: str) -> Objective | None:
        slo = objective_for(slos, model)
        return None if slo is None else as_objective(slo)

    targets = {t.name: t.model for t in config.targets}
    return SpanCollector(config.host, inbox, objective_of, targets)


def as_objective(slo: SloConfig) -> Objective:
    """The collector's view of an objective; its key is also what readers match
    (agent.cost.slo_spans), so a changed threshold never mixes with requests judged before."""
    t = (slo.ttft_seconds, slo.itl_seconds, slo.e2e_seconds, slo.queue_seconds)
    return Objective(spell(*t), *t)
