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
    """One sentence on each figure's basis, for the report's summary."""
    if t.billed_usd is None:
        spend = (
            f"spend is metered ({usd(t.metered_usd)}: rate card x GPU time observed); no billing "
            "records for this period"
        )
    elif spend_kind(t) == "billed":
        spend = (
            f"spend is billed: providers billed {usd(t.billed_usd)}, more than the "
            f"{usd(t.metered_usd)} metered (a bill includes what gpuwatch cannot see: storage, "
            "egress, GPUs it does not watch)"
        )
    else:
        spend = (
            f"spend is metered ({usd(t.metered_usd)}): providers billed {usd(t.billed_usd)} so "
            "far (bills post hours or days late)"
        )
    return (
        f"{spend}; cost per million useful tokens is the metered cost over the useful tokens "
        f"({rule}), the cost gpuwatch can match to the tokens"
    )
