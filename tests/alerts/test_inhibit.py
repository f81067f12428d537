"""Inhibition: CollectorDown mutes its own host's GPU/engine alerts, TargetDown its target's."""

from __future__ import annotations

import pytest

from alerts.inhibit import DEFAULT_INHIBIT_RULES, InhibitRule, inhibited_by

COLLECTOR_DOWN_A = {"alertname": "CollectorDown", "host": "box-a", "collector": "nvml"}
GPU_HOT_A = {"alertname": "GpuHot", "host": "box-a", "gpu": "0"}
GPU_HOT_B = {"alertname": "GpuHot", "host": "box-b", "gpu": "0"}


@pytest.mark.parametrize("alertname", ["GpuHot", "GpuIdle", "GpuHardwareErrors", "VramHigh"])
def test_blind_nvml_inhibits_the_gpu_alerts_of_its_host(alertname: str) -> None:
    alert = {"alertname": alertname, "host": "box-a", "gpu_uuid": "GPU-1"}
    assert inhibited_by(alert, [COLLECTOR_DOWN_A], DEFAULT_INHIBIT_RULES) == "CollectorDown"


@pytest.mark.parametrize(
    "alertname", ["TargetDown", "LatencyTtftHigh", "QueueGrowing", "KvCacheFull"]
)
def test_blind_nvml_leaves_the_engines_alerts_alone(alertname: str) -> None:
    # The engines are scraped apart from NVML: what they say is still seen.
    alert = {"alertname": alertname, "host": "box-a", "target": "t1"}
    assert inhibited_by(alert, [COLLECTOR_DOWN_A], DEFAULT_INHIBIT_RULES) is None


def test_a_target_down_mutes_its_own_engine_alerts_and_never_a_gpu_alert() -> None:
    down = {"alertname": "TargetDown", "host": "box-a", "target": "t1"}
    mine = {"alertname": "QueueGrowing", "host": "box-a", "target": "t1", "model": "m"}
    other = {"alertname": "QueueGrowing", "host": "box-a", "target": "t2", "model": "m"}
    assert inhibited_by(mine, [down], DEFAULT_INHIBIT_RULES) == "TargetDown"
    assert inhibited_by(other, [down], DEFAULT_INHIBIT_RULES) is None
    assert inhibited_by(GPU_HOT_A, [down], DEFAULT_INHIBIT_RULES) is None


def test_collector_down_does_not_inhibit_another_host() -> None:
    assert inhibited_by(GPU_HOT_B, [COLLECTOR_DOWN_A], DEFAULT_INHIBIT_RULES) is None


def test_collector_down_leaves_non_gpu_alerts_alone() -> None:
    budget = {"alertname": "BudgetExceeded", "host": "box-a"}
    assert inhibited_by(budget, [COLLECTOR_DOWN_A], DEFAULT_INHIBIT_RULES) is None
    # The regex is anchored: a name merely containing "Gpu" is not a GPU alert.
    assert (
        inhibited_by(
            {"alertname": "NoGpuFound", "host": "box-a"}, [COLLECTOR_DOWN_A], DEFAULT_INHIBIT_RULES
        )
        is None
    )


def test_collector_down_does_not_inhibit_itself() -> None:
    assert inhibited_by(COLLECTOR_DOWN_A, [COLLECTOR_DOWN_A], DEFAULT_INHIBIT_RULES) is None


def test_no_firing_sources_no_inhibition() -> None:
    assert inhibited_by(GPU_HOT_A, [], DEFAULT_INHIBIT_RULES) is None
    assert inhibited_by(GPU_HOT_A, [GPU_HOT_B], DEFAULT_INHIBIT_RULES) is None


def test_target_down_inhibits_only_that_targets_serving_alerts() -> None:
    down = {"alertname": "TargetDown", "host": "box-a", "target": "t1"}
    same = {"alertname": "LatencyTtftHigh", "host": "box-a", "target": "t1"}
    other_target = {"alertname": "LatencyTtftHigh", "host": "box-a", "target": "t2"}
    gpu = {"alertname": "GpuHot", "host": "box-a", "target": "t1"}
    assert inhibited_by(same, [down], DEFAULT_INHIBIT_RULES) == "TargetDown"
    assert inhibited_by(other_target, [down], DEFAULT_INHIBIT_RULES) is None
    assert inhibited_by(gpu, [down], DEFAULT_INHIBIT_RULES) is None


def test_an_alert_matching_source_and_target_does_not_inhibit_itself() -> None:
    # inhibit.go: with a rule whose source also matches its targets, an alert that is both
    # is never muted by an alert that is both, so it cannot silence itself.
    rule = InhibitRule({"severity": "critical"}, {"alertname": "Gpu.*"}, ("host",))
    both = {"alertname": "GpuHot", "severity": "critical", "host": "box-a"}
    twin = {"alertname": "GpuXid", "severity": "critical", "host": "box-a"}
    assert inhibited_by(both, [both, twin], [rule]) is None
    # A source that is only a source still inhibits it.
    only_source = {"alertname": "HostDown", "severity": "critical", "host": "box-a"}
    assert inhibited_by(both, [both, only_source], [rule]) == "HostDown"


def test_equal_labels_missing_on_both_sides_count_as_equal() -> None:
    # Alertmanager compares label values, and a missing label's value is "".
    rule = InhibitRule({"alertname": "CollectorDown"}, {"alertname": "Gpu.*"}, ("host",))
    assert (
        inhibited_by({"alertname": "GpuHot"}, [{"alertname": "CollectorDown"}], [rule])
        == "CollectorDown"
    )
    assert inhibited_by({"alertname": "GpuHot"}, [COLLECTOR_DOWN_A], [rule]) is None


def test_a_bad_target_regex_fails_when_the_rule_is_made() -> None:
    with pytest.raises(ValueError, match="invalid regular expression"):
        InhibitRule({"alertname": "X"}, {"alertname": "Gpu(.*"}, ("host",))
