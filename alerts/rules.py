"""Alert rules as data: the built-in defaults and the user's ``[alerts.rules.<Name>]`` tunings.

A rule here says *when* and *how loud* (``for``, ``keep_firing_for``, severity, thresholds,
static labels, message); whether its condition holds is decided elsewhere and arrives in
``alerts.lifecycle.evaluate`` as ``Condition`` values. Defaults cite where their numbers come
from (shared/reference/anchors.md sections 4.2-4.4) so a tuning debate starts from evidence.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from types import MappingProxyType

from alerts.duration import format_duration, parse_duration
from alerts.model import Severity

# Prometheus' label name rule (model.LabelNameRE), so labels survive export to Alertmanager.
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_BASE_KEYS = ("enabled", "for", "keep_firing_for", "severity", "labels")


class _Number:
    """A value for ``str.format`` that prints "n/a" for None whatever the format spec."""

    __slots__ = ("_value",)

    def __init__(self, value: float | None) -> None:
        self._value = value

    def __format__(self, spec: str) -> str:
        return "n/a" if self._value is None else format(self._value, spec)

    def __str__(self) -> str:
        return format(self, "")


class _Labels(dict[str, str]):
    """Labels for templates: a missing label prints as "?" instead of failing the message."""

    def __missing__(self, key: str) -> str:
        return "?"


@dataclass(frozen=True, slots=True)
class RuleSpec:
    """One alert rule's tunable parameters (what ``[alerts.rules.<name>]`` can change).

    ``thresholds`` are the named numbers the rule's condition reads (durations among them end
    in ``_seconds``); None means "not set", for parameters with no safe universal default.
    ``summary`` is a ``str.format`` template over ``labels`` (a mapping), ``where`` (the labels
    as "k=v, ..."), ``value``, ``thresholds`` (a mapping), ``rule`` and ``for``.
    """

    name: str
    for_seconds: float
    severity: Severity
    description: str
    summary: str
    thresholds: Mapping[str, float | None] = field(default_factory=dict)
    labels: Mapping[str, str] = field(default_factory=dict)  # static labels, join the identity
    enabled: bool = True
    keep_firing_for_seconds: float = 0.0

    @property
    def hold(self) -> timedelta:
        """The ``for`` duration: how long the condition must hold before the alert fires."""
        return timedelta(seconds=self.for_seconds)

    @property
    def keep_firing_for(self) -> timedelta:
        return timedelta(seconds=self.keep_firing_for_seconds)

    def render_summary(self, labels: Mapping[str, str], value: float | None) -> str:
        """The summary for one alert; a broken template yields a marker, not an exception,
        as Prometheus does ("<error expanding template: ...>") so the alert still goes out."""
        fields = {
            "labels": _Labels(labels),
            "where": ", ".join(f"{k}={v}" for k, v in sorted(labels.items())),
            "value": _Number(value),
            "thresholds": {k: _Number(v) for k, v in self.thresholds.items()},
            "rule": self.name,
            "for": format_duration(self.for_seconds),
        }
        try:
            return self.summary.format_map(fields)
        except (KeyError, IndexError, ValueError, TypeError, AttributeError) as exc:
            return f"<error expanding summary template of {self.name}: {exc!r}>"


def _rule(
    name: str,
    for_: str,
    severity: Severity,
    description: str,
    summary: str,
    **thresholds: float | None,
) -> RuleSpec:
    return RuleSpec(
        name=name,
        for_seconds=parse_duration(for_),
        severity=severity,
        description=description,
        summary=summary,
        thresholds=MappingProxyType(dict(thresholds)),
        labels=MappingProxyType({}),
    )


_W, _C = Severity.WARNING, Severity.CRITICAL

# fmt: off
_DEFAULTS = (
    # anchors 4.2 "GPU idle": a public GPU Idle Alarm script (< 20 % for 30 m) and
    # job_defense_shield (0 % util). An inference box idles near 0, so 5 %; the warm-up skips
    # model loading after an engine (re)start (anchors section 3, differentiator 4). Judged on
    # SM activity where GPM or DCGM profiling gives it (sm_active_below), else on NVML's busy
    # flag (utilization_below). The same 5 %: SMs can only be active while a kernel runs, so
    # SM activity is at most the flag's busy share and every GPU the flag calls idle stays
    # idle; the SM basis only adds the GPUs the flag hid (100 % busy, 3 % of SMs working). A
    # higher bar ("under 20 % of SMs") would be underuse, the consolidation advice's business.
    # The summary's measure and basis come from the condition (agent.alerting.conditions).
    _rule(
        "GpuIdle", "30m", _W,
        "A GPU has done almost no work for a long time while still being paid for.",
        "GPU idle ({where}) for {for}",
        utilization_below=0.05, sm_active_below=0.05, warmup_seconds=600.0,
    ),
    # anchors 4.1 "guard against data gaps": nvidia_gpu_exporter alerts on no successful
    # collection for > 45 s, i.e. three 15 s intervals. Fires at once: the count is the delay.
    _rule(
        "CollectorDown", "0", _C,
        "gpuwatch's own collector has missed several collections in a row (blind).",
        "Collector blind ({where}): {value:.0f} missed collections",
        intervals=3.0,
    ),
    # anchors 4.2 "Exporter down / stale" (1-2 m, critical) and 4.3 "Engine down" (LLMKube 1 m).
    # 5m, not anchors' 1-2 m: a redeploy (image pull, a large model's load) takes minutes and
    # is not news; gpuwatch_target_up shows the scrape failing at once. A target's failure is
    # this alert, never CollectorDown (which is the host's own collectors: NVML).
    _rule(
        "TargetDown", "5m", _C,
        "An inference engine or exporter target cannot be scraped.",
        "Target down ({where}) for {for}",
    ),
    # anchors 4.3 "TTFT p99 high": p99 over 5 m > 5 s (llm-d PR #676 VLLMHighTTFT); the
    # baseline factor follows its KV-thrash rule ("N x its own baseline"); min_requests is the
    # 4.1 no-traffic guard (llm-d requires traffic before judging a ratio).
    _rule(
        "LatencyP99Spike", "5m", _W,
        "p99 time-to-first-token or end-to-end latency is far above its limit or its baseline.",
        "Latency p99 high ({where}): {value:.2f} s (TTFT limit {thresholds[ttft_seconds]:g} s,"
        " e2e limit {thresholds[e2e_seconds]:g} s)",
        ttft_seconds=5.0, e2e_seconds=30.0, baseline_factor=3.0, min_requests=20.0,
        window_seconds=300.0,
    ),
    # anchors 4.3 "Request backlog" (llm-d: sum waiting > 50 for 10 m) and the gpuwatch
    # addition: a positive slope of waiting requests over 10 m, told apart by KV saturation.
    _rule(
        "QueueGrowing", "5m", _W,
        "Waiting requests keep growing: saturated KV cache or a stalled scheduler.",
        "Queue growing ({where}): {value:.0f} requests waiting",
        waiting_above=10.0, slope_window_seconds=600.0, kv_saturated=0.9,
    ),
    # anchors 4.3 gpuwatch addition: KV usage > ~0.9 is saturation; 0.95 held 10 m is the alert.
    _rule(
        "KvCacheSaturated", "10m", _W,
        "The engine's KV cache is nearly full, so requests queue or get preempted.",
        "KV cache saturated ({where}): {value:.0%} used",
        above=0.95,
    ),
    # anchors 4.2 "GPU memory pressure": FB used > 90 % for 5 m (LLMKube); headroom measured
    # as free, held longer because engines preallocate memory on purpose.
    _rule(
        "VramHeadroomLow", "10m", _W,
        "Little GPU memory is left free for new models, longer contexts or spikes.",
        "VRAM headroom low ({where}): {value:.0%} free",
        free_below=0.15,
    ),
    # anchors 4.2 "GPU temperature high": > 85 C for 2 m, critical (LLMKube chart default).
    _rule(
        "GpuHot", "2m", _C,
        "A GPU runs hot enough to throttle or to shorten its life.",
        "GPU hot ({where}): {value:.0f} C, limit {thresholds[celsius_above]:.0f} C",
        celsius_above=85.0,
    ),
    # anchors 1.1: dcgm-exporter ships throttle reasons / violation counters (commented out by
    # default); a sustained thermal or power throttle costs throughput silently.
    _rule(
        "GpuThrottling", "10m", _W,
        "A GPU's clocks are held down by a thermal or power throttle.",
        "GPU throttling ({where}) for {for}",
    ),
    # anchors 4.2 "Xid fatal/hardware" and "ECC DBE / row-remap failure": for 0, critical (NVIDIA
    # health-validation Xid table; dcgm-exporter counters). Code-level severity comes from the
    # condition's severity annotation (app-level Xids are info there).
    _rule(
        "GpuHardwareErrors", "0", _C,
        "A GPU reported a hardware error (fatal Xid, double-bit ECC, row-remap failure).",
        "GPU hardware error ({where})",
    ),
    # A GPU that fell off the bus (Xid 79) answers "GPU is lost" while NVML and the other GPUs
    # still answer; the host is not blind, one GPU is gone and its work with it. Critical at
    # once, like a fatal Xid (anchors 4.2); the summary names the GPU a technician must find.
    _rule(
        "GpuLost", "0", _C,
        "A GPU no longer answers (fallen off the bus) while NVML and the other GPUs still do.",
        "GPU lost ({where}): {labels[gpu_uuid]} at PCI {labels[pci_bus_id]} no longer answers;"
        " reset it or reboot",
    ),
    # The SRE Workbook, ch. 5 "Alerting on SLOs", Table 5-8: multiwindow, multi-burn-rate
    # alerts on each [[slo]] objective (windows and factors: agent.cost.slo_math
    # WORKBOOK_WINDOWS). Critical for the page pairs, warning for the 3d/6h ticket pair (set
    # by the condition). 2m as Pyrra generates for its 1h/5m pair; the windows themselves
    # debounce (the short one resets the alert minutes after the burn stops).
    _rule(
        "SloBurnRate", "2m", _C,
        "A model burns its latency objective's error budget fast over a long and a short window.",
        "SLO burn rate high ({where}): {value:.1f}x the error budget's rate over {labels[window]}",
    ),
    # anchors 4.4 "Budget thresholds": 50/80/100 % of a budget (Kubecost Budget API, LiteLLM
    # soft/hard budgets), once per threshold per period; the condition marks >= 100 % critical.
    _rule(
        "BudgetThreshold", "0", _W,
        "Spend has crossed a share of the period's budget.",
        "Budget threshold crossed ({where}): {value:.0%} of the budget spent",
        first_fraction=0.5, second_fraction=0.8, critical_fraction=1.0,
    ),
    # anchors section 3 "Budgets + forecast + threshold alerts" (Vantage, Kubecost forecasts);
    # held 1 h so one expensive hour early in the month does not cry wolf, and no forecast
    # from under 6 h of metered history (the 4.1 no-traffic guard: judge on enough data).
    _rule(
        "ProjectedOverBudget", "1h", _W,
        "At the current pace, spend will exceed the period's budget before it ends.",
        "Projected over budget ({where}): {value:.0%} of the budget by period end",
        min_history_seconds=21600.0,
    ),
    # anchors 4.4 "Spend anomaly": cost > N x trailing baseline (Vantage AnomalyNotification);
    # the baseline is the median hour of the last 7 days, judged once a day of hours exists.
    _rule(
        "BurnRateJump", "30m", _W,
        "The hourly spend rate jumped well above its usual level.",
        "Burn rate jump ({where}): {value:.1f}x the baseline",
        factor=2.0, min_history_hours=24.0,
    ),
    # anchors 4.4 "High inference cost": OpenCost's example ($/M tokens > 10). No universal
    # ceiling exists, so both limits are unset until the user names a ceiling or the API price
    # the self-hosted model competes with (anchors section 3, self-host vs API comparison).
    # Judged over the 24 h window of gpuwatch_cost_per_million_tokens_usd, and only for models
    # with 100k useful tokens in it: fewer is idle cost (GpuIdle), not a token price.
    _rule(
        "CostPerMtokHigh", "1h", _W,
        "Cost per million tokens is above the ceiling or the API price it competes with.",
        "Cost per million tokens high ({where}): ${value:.2f}",
        ceiling_usd=None, api_usd_per_million=None, window_seconds=86400.0, min_tokens=100000.0,
    ),
)
# fmt: on

DEFAULT_RULES: Mapping[str, RuleSpec] = MappingProxyType({r.name: r for r in _DEFAULTS})


def apply_overrides(
    defaults: Mapping[str, RuleSpec], overrides: Mapping[str, Mapping[str, object]]
) -> tuple[dict[str, RuleSpec], list[str]]:
    """``defaults`` tuned by the ``[alerts.rules.<Name>]`` tables, plus every problem found.

    Problems read "alerts.rules.<Name>.<key>: message". Valid keys are applied even when a
    sibling is wrong, so one typo reports everything at once; callers refuse a config with
    problems (as Prometheus and Alertmanager reject a bad config on reload).
    """
    rules = dict(defaults)
    problems: list[str] = []
    for name in sorted(overrides):
        table = overrides[name]
        path = f"alerts.rules.{name}"
        if name not in defaults:
            problems.append(f"{path}: unknown rule (known: {', '.join(sorted(defaults))})")
        elif not isinstance(table, Mapping):
            problems.append(f"{path}: expected a table, got {_kind(table)}")
        else:
            rules[name] = _override(defaults[name], table, path, problems)
    return rules, problems


def _override(
    spec: RuleSpec, table: Mapping[str, object], path: str, problems: list[str]
) -> RuleSpec:
    allowed = (*_BASE_KEYS, *spec.thresholds)
    thresholds = dict(spec.thresholds)
    for key in sorted(table):
        value, where = table[key], f"{path}.{key}"
        if key not in allowed:
            problems.append(f"{where}: unknown key (allowed here: {', '.join(sorted(allowed))})")
            continue
        try:
            if key in spec.thresholds:
                thresholds[key] = _threshold(key, value)
            else:
                spec = _set_base(spec, key, value)
        except ValueError as exc:
            problems.append(f"{where}: {exc}")
    return replace(spec, thresholds=MappingProxyType(thresholds))


def _set_base(spec: RuleSpec, key: str, value: object) -> RuleSpec:
    if key == "enabled":
        if not isinstance(value, bool):
            raise ValueError(f"expected true or false, got {_kind(value)} {value!r}")
        return replace(spec, enabled=value)
    # A bare number is refused for these (parse_duration takes strings only): Prometheus rule
    # files refuse it too, and "for = 5" could mean anything.
    if key == "for":
        return replace(spec, for_seconds=parse_duration(value))
    if key == "keep_firing_for":
        return replace(spec, keep_firing_for_seconds=parse_duration(value))
    if key == "severity":
        return replace(spec, severity=_severity(value))
    return replace(spec, labels=MappingProxyType(_labels(value)))


def _severity(value: object) -> Severity:
    names = ", ".join(s.value for s in Severity)
    if not isinstance(value, str):
        raise ValueError(f"expected one of {names}, got {_kind(value)} {value!r}")
    try:
        return Severity(value.lower())
    except ValueError:
        raise ValueError(f"expected one of {names}, got {value!r}") from None


def _labels(value: object) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise ValueError(f"expected a table of strings, got {_kind(value)}")
    bad = [
        f"{k!r}"
        for k, v in value.items()
        if not isinstance(k, str) or not _LABEL_NAME.match(k) or not isinstance(v, str)
    ]
    if bad:
        raise ValueError(
            f"labels {', '.join(bad)} need a name like 'team' ([a-zA-Z_][a-zA-Z0-9_]*)"
            " and a string value"
        )
    return {str(k): str(v) for k, v in value.items()}


def _threshold(key: str, value: object) -> float:
    # Durations among thresholds may be written as in Prometheus ("10m") or as seconds.
    if key.endswith("_seconds") and isinstance(value, str):
        number: int | float = parse_duration(value)
    # bool is an int in Python; TOML's true must not pass as a number.
    elif isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"expected a number, got {_kind(value)} {_shown(value)}")
    elif isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"expected a finite number, got {value!r}")
    else:
        number = value
    _check_range(key, number)
    return float(number)


def _check_range(key: str, value: int | float) -> None:
    """ValueError unless ``value`` is in the range ``key``'s kind of threshold has, with a hint
    where the value looks written in the wrong unit (85 for the ratio 0.85)."""
    low, high, what = _range_of(key)
    if low <= value <= high:
        return
    hint = ""
    if what == "ratio" and 1 < value <= 100:
        hint = f"; did you mean {value / 100:g}?"
    elif what == "fraction" and high < value <= 100 * high:
        hint = f"; did you mean {value / 100:g}? (1.0 is the whole budget)"
    elif what == "celsius" and high < value <= 400:
        hint = f"; is that Fahrenheit? {value:g} F is {(value - 32) * 5 / 9:.0f} C"
    raise ValueError(f"must be {_RANGE_TEXT[what]}, got {value!r}{hint}")


def _range_of(key: str) -> tuple[float, float, str]:
    if key in _RATIO_KEYS:
        return 0.0, 1.0, "ratio"
    if key in _FRACTION_KEYS:
        return 0.0, 10.0, "fraction"
    if key.startswith("celsius"):
        return 0.0, 150.0, "celsius"
    if key.endswith("_seconds"):
        return 0.0, _MAX_THRESHOLD_SECONDS, "seconds"
    return 0.0, math.inf, "count"


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:59] + "…"


# Which thresholds are ratios of something to its whole (0 to 1) and which are fractions of a
# budget (may pass 1: "warn at 120 %"); the rest are temperatures, seconds or plain counts.
_RATIO_KEYS = frozenset(
    {"utilization_below", "sm_active_below", "kv_saturated", "above", "free_below"}
)
_FRACTION_KEYS = frozenset({"first_fraction", "second_fraction", "critical_fraction"})
_MAX_THRESHOLD_SECONDS = 366 * 86400.0  # a window longer than a year is no alert's
_RANGE_TEXT = {
    "ratio": "a ratio from 0 to 1",
    "fraction": "a fraction of the budget from 0 to 10",
    # A GPU's sensor reads from room temperature to about 110 C, where it shuts down.
    "celsius": "a temperature from 0 to 150 (degrees Celsius)",
    "seconds": "from 0 to 366d",
    "count": "a number of at least 0",
}


def _kind(value: object) -> str:
    if isinstance(value, Mapping):
        return "a table"
    names = {bool: "a boolean", int: "an integer", float: "a number", str: "a string"}
    return names.get(type(value), "an array" if isinstance(value, list) else type(value).__name__)
