"""Which money figure a report shows, in words: spend is billed or metered, and cost per
million tokens is always metered. After a FOCUS import a summary showed spend $5.44 (billed)
next to a cost per million tokens computed from $0.38 (metered), with no word on why."""

from __future__ import annotations

from agent.cost.breakeven import usd
from agent.reporting.model import Totals


def spend_kind(t: Totals) -> str:
    """ "billed" when the spend shown is the providers' bill, else "metered"."""
    return "billed" if t.billed_usd is not None and t.spend_usd == t.billed_usd else "metered"


def spend_note(t: Totals, rule: str) -> str:
    """One short line on each figure's basis, for the report's summary (a heading's note: it
    fits the terminal report's 100 columns for amounts up to a few thousand dollars)."""
    if t.billed_usd is None:
        spend = "spend: metered, no billing records"
    elif spend_kind(t) == "billed":  # the bill holds what gpuwatch cannot see: storage, egress
        spend = f"spend: billed {usd(t.billed_usd)}, metered {usd(t.metered_usd)}"
    else:  # bills post hours or days late
        spend = f"spend: metered {usd(t.metered_usd)} (billed {usd(t.billed_usd)} so far)"
    return f"{spend}; $/M: metered cost / useful tokens ({rule})"
