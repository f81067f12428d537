"""How long the report's advice was measured over: the hours the GPUs were observed, not the
period's calendar length.

A month-to-date report on a box installed 12 minutes ago holds 12 minutes of data; dividing
them by the days since the 1st made "$0.02/h" of an H100 at $2.72/h. A model's observed hours
are the longest any GPU serving it (allocated to one of its targets) was metered in the period:
its GPUs are watched together, so that is how long its load was seen. Per-day figures are
amounts over those hours x 24; per-month figures, per hour x 730.
"""

from __future__ import annotations

from collections import defaultdict

from agent.cost.summarize import model_shares
from agent.reporting.figures import HOUR, Figures
from agent.reporting.ledger_sums import Usage


def model_observed_hours(f: Figures) -> dict[str, float]:
    """Model -> the hours its GPUs were observed in the period (0: none metered)."""
    gpus_of: dict[tuple[str, str], set[tuple[str, str]]] = defaultdict(set)
    for (host, gpu, target), days in f.window.allocations.items():
        if sum(a.seconds for a in days.values()) > 0:
            gpus_of[(host, target)].add((host, gpu))
    observed = {
        key: sum(days.values(), Usage()).observed / HOUR for key, days in f.window.usage.items()
    }
    shares = model_shares(f.target_totals(), f.all_tokens, f.rule)
    out: dict[str, float] = defaultdict(float)
    for key, by_model in shares.items():
        seen = max((observed.get(g, 0.0) for g in gpus_of.get(key, set())), default=0.0)
        for model, share in by_model.items():
            if share > 0:
                out[model] = max(out[model], seen)
    return dict(out)
