"""The ``SloBurnRate`` rule's condition: both windows of a workbook pair burn an objective's
error budget faster than the pair's factor (the burns themselves: agent.alerting.slo_burn,
read by agent.alerting.inputs; this module sits above both, so neither imports it)."""

from __future__ import annotations

from agent.alerting.inputs import AlertInputs
from agent.alerting.slo_burn import window_label
from agent.cost.slo_math import fires
from alerts.duration import format_duration
from alerts.model import AlertKey, Condition, Severity
from alerts.rules import RuleSpec


def slo_burn_rate(spec: RuleSpec, inputs: AlertInputs) -> list[Condition] | None:
    """Both windows of a workbook pair burn faster than its factor. Page pairs carry the
    rule's severity (critical by default), the ticket pair warning."""
    if inputs.slo_burns is None:
        return None
    out = []
    for burn in inputs.slo_burns:
        if fires(burn.window, burn.long, burn.short) is not True:
            continue
        assert burn.long is not None and burn.short is not None  # fires says both are known
        window = burn.window
        labels = {"host": inputs.host, "model": burn.model, "window": window_label(window)}
        severity = spec.severity if window.severity == "page" else Severity.WARNING
        short = format_duration(window.short_seconds)
        thresholds = ", ".join(f"{k} <= {v:g}s" for k, v in burn.slo.thresholds().items())
        summary = (
            f"{spec.render_summary(labels, burn.long)}; {short}: {burn.short:.1f}x"
            f" (limit {window.factor:g}x); objective {burn.slo.objective:.4g} within {thresholds}"
        )
        annotations = {
            "burn_rate_long": f"{burn.long:.4g}",
            "burn_rate_short": f"{burn.short:.4g}",
            "long_window": window_label(window),
            "short_window": short,
            "factor": f"{window.factor:g}",
            "objective": f"{burn.slo.objective:g}",
            "thresholds": thresholds,
            "basis": burn.basis,
            "severity": severity.value,
            "summary": summary,
        }
        out.append(Condition(AlertKey.of(spec.name, labels), burn.long, annotations))
    return out
