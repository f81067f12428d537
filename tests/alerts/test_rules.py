"""Rules as data: the shipped defaults and ``[alerts.rules.<Name>]`` overrides, with every problem
reported at once. Duration syntax itself is tested in test_duration.py."""

from __future__ import annotations

from typing import Any

import pytest

from alerts.model import Severity
from alerts.rules import DEFAULT_RULES, RuleSpec, apply_overrides

EXPECTED = (
    'expected a duration like "90s", "5m", "2h" or "1h30m"'
    " (integers, units ms s m h d w y, largest first)"
)
ISSUE_RULES = {
    "GpuIdle": (1800, Severity.WARNING),
    "CollectorDown": (0, Severity.CRITICAL),
    "TargetDown": (300, Severity.CRITICAL),
    "LatencyP99Spike": (300, Severity.WARNING),
    "QueueGrowing": (300, Severity.WARNING),
    "KvCacheSaturated": (600, Severity.WARNING),
    "VramHeadroomLow": (600, Severity.WARNING),
    "GpuHot": (120, Severity.CRITICAL),
    "GpuThrottling": (600, Severity.WARNING),
    "GpuHardwareErrors": (0, Severity.CRITICAL),
    "GpuLost": (0, Severity.CRITICAL),  # a GPU fallen off the bus
    "BudgetThreshold": (0, Severity.WARNING),
    "ProjectedOverBudget": (3600, Severity.WARNING),
    "BurnRateJump": (1800, Severity.WARNING),
    "CostPerMtokHigh": (3600, Severity.WARNING),
    "SloBurnRate": (120, Severity.CRITICAL),  # issue 41: the workbook's multiwindow burn rates
}


def test_defaults_are_the_issue_s_rules_with_their_for_and_severity() -> None:
    got = {name: (spec.for_seconds, spec.severity) for name, spec in DEFAULT_RULES.items()}
    assert got == ISSUE_RULES
    for name, spec in DEFAULT_RULES.items():
        assert spec.name == name
        assert spec.enabled
        assert spec.keep_firing_for_seconds == 0
        assert spec.labels == {}
        assert spec.description and spec.summary


@pytest.mark.parametrize(
    ("rule", "thresholds"),
    [
        (
            "GpuIdle",
            {"utilization_below": 0.05, "sm_active_below": 0.05, "warmup_seconds": 600},
        ),
        ("CollectorDown", {"intervals": 3}),
        (
            "LatencyP99Spike",
            {
                "ttft_seconds": 5,
                "e2e_seconds": 30,
                "baseline_factor": 3,
                "min_requests": 20,
                "window_seconds": 300,
            },
        ),
        ("QueueGrowing", {"waiting_above": 10, "slope_window_seconds": 600, "kv_saturated": 0.9}),
        ("KvCacheSaturated", {"above": 0.95}),
        ("VramHeadroomLow", {"free_below": 0.15}),
        ("GpuHot", {"celsius_above": 85}),
        (
            "BudgetThreshold",
            {"first_fraction": 0.5, "second_fraction": 0.8, "critical_fraction": 1.0},
        ),
        ("ProjectedOverBudget", {"min_history_seconds": 21600}),
        ("BurnRateJump", {"factor": 2, "min_history_hours": 24}),
        (
            "CostPerMtokHigh",
            {
                "ceiling_usd": None,
                "api_usd_per_million": None,
                "window_seconds": 86400,
                "min_tokens": 100000,
            },
        ),
    ],
)
def test_default_thresholds(rule: str, thresholds: dict[str, float | None]) -> None:
    assert dict(DEFAULT_RULES[rule].thresholds) == thresholds


def test_every_default_summary_renders_with_and_without_a_value() -> None:
    for spec in DEFAULT_RULES.values():
        for value in (0.5, None):
            text = spec.render_summary({"gpu": "0", "instance": "box1"}, value)
            assert "<error" not in text, (spec.name, text)
            assert "gpu=0, instance=box1" in text


def test_summary_template_sees_labels_value_and_thresholds() -> None:
    spec = RuleSpec(
        name="GpuHot",
        for_seconds=120,
        severity=Severity.CRITICAL,
        description="d",
        summary="GPU {labels[gpu]} {labels[missing]} at {value:.0f} C > "
        "{thresholds[celsius_above]:.0f} C for {for}",
        thresholds={"celsius_above": 85.0},
    )
    assert spec.render_summary({"gpu": "3"}, 91.4) == "GPU 3 ? at 91 C > 85 C for 2m"
    assert spec.render_summary({"gpu": "3"}, None) == "GPU 3 ? at n/a C > 85 C for 2m"


def test_a_broken_summary_template_gives_a_marker_not_an_exception() -> None:
    spec = RuleSpec("X", 0, Severity.INFO, "d", "{nope} {value:.0f}")
    assert spec.render_summary({}, 1.0).startswith("<error expanding summary template of X")


def test_overrides_tune_and_disable_rules() -> None:
    rules, problems = apply_overrides(
        DEFAULT_RULES,
        {
            "GpuIdle": {
                "for": "1h30m",
                "keep_firing_for": "5m",
                "severity": "critical",
                "labels": {"team": "ml"},
                "utilization_below": 0.1,
                "sm_active_below": 0.08,
                "warmup_seconds": "15m",
            },
            "GpuHot": {"enabled": False, "celsius_above": 90},
            "CostPerMtokHigh": {"ceiling_usd": 4},
        },
    )
    assert problems == []
    idle = rules["GpuIdle"]
    assert idle.for_seconds == 5400
    assert idle.keep_firing_for_seconds == 300
    assert idle.severity is Severity.CRITICAL
    assert idle.labels == {"team": "ml"}
    assert idle.thresholds == {
        "utilization_below": 0.1,
        "sm_active_below": 0.08,
        "warmup_seconds": 900,
    }
    assert not rules["GpuHot"].enabled
    assert rules["GpuHot"].thresholds["celsius_above"] == 90.0
    assert rules["CostPerMtokHigh"].thresholds == {
        "ceiling_usd": 4.0,
        "api_usd_per_million": None,
        "window_seconds": 86400.0,
        "min_tokens": 100000.0,
    }
    assert rules["TargetDown"] is DEFAULT_RULES["TargetDown"]
    # The defaults themselves are untouched.
    assert DEFAULT_RULES["GpuIdle"].for_seconds == 1800
    assert DEFAULT_RULES["GpuIdle"].thresholds["utilization_below"] == 0.05


def test_every_problem_is_reported_at_once_and_valid_keys_still_apply() -> None:
    # Typed as TOML arrives (anything), since a user can write a string where a table belongs.
    overrides: dict[str, Any] = {
        "GpuIdel": {"for": "5m"},
        "GpuIdle": {
            "for": 300,
            "keep_firing_for": "1.5h",
            "enabled": "yes",
            "severity": "urgent",
            "labels": {"team": 3, "bad-name": "x"},
            "utilization_below": True,
            "celsius_above": 90,
            "warmup_seconds": "soon",
        },
        "GpuHot": {"celsius_above": "hot", "for": "3m"},
        "TargetDown": "off",
        "KvCacheSaturated": {"above": float("nan"), "labels": ["a"]},
    }
    rules, problems = apply_overrides(DEFAULT_RULES, overrides)
    assert sorted(problems) == sorted(
        [
            "alerts.rules.GpuIdel: unknown rule (known: " + ", ".join(sorted(ISSUE_RULES)) + ")",
            f"alerts.rules.GpuIdle.for: {EXPECTED}, got 300",
            f"alerts.rules.GpuIdle.keep_firing_for: {EXPECTED}, got '1.5h'",
            "alerts.rules.GpuIdle.enabled: expected true or false, got a string 'yes'",
            "alerts.rules.GpuIdle.severity: expected one of info, warning, critical, page,"
            " got 'urgent'",
            "alerts.rules.GpuIdle.labels: labels 'team', 'bad-name' need a name like 'team'"
            " ([a-zA-Z_][a-zA-Z0-9_]*) and a string value",
            "alerts.rules.GpuIdle.utilization_below: expected a number, got a boolean True",
            "alerts.rules.GpuIdle.celsius_above: unknown key (allowed here: enabled, for,"
            " keep_firing_for, labels, severity, sm_active_below, utilization_below,"
            " warmup_seconds)",
            f"alerts.rules.GpuIdle.warmup_seconds: {EXPECTED}, got 'soon'",
            "alerts.rules.GpuHot.celsius_above: expected a number, got a string 'hot'",
            "alerts.rules.TargetDown: expected a table, got a string",
            "alerts.rules.KvCacheSaturated.above: expected a finite number, got nan",
            "alerts.rules.KvCacheSaturated.labels: expected a table of strings, got an array",
        ]
    )
    # The valid sibling of a bad key is applied; the bad ones keep their defaults.
    assert rules["GpuHot"].for_seconds == 180
    assert rules["GpuHot"].thresholds["celsius_above"] == 85
    assert rules["GpuIdle"] == DEFAULT_RULES["GpuIdle"]
    assert "GpuIdel" not in rules


def test_severity_is_case_insensitive_and_zero_for_is_allowed() -> None:
    rules, problems = apply_overrides(DEFAULT_RULES, {"GpuHot": {"severity": "PAGE", "for": "0"}})
    assert problems == []
    assert rules["GpuHot"].severity is Severity.PAGE
    assert rules["GpuHot"].for_seconds == 0
