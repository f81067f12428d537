"""The ``[alerts]`` section: rule tunings, the notification route's timers, delivery limits.

    [alerts]
    give_up_after = "6h"          # a notification undelivered this long is dropped (recorded)

    [alerts.route]                # applies to every receiver (Slack, webhook)
    group_by = ["alertname", "host"]
    group_wait = "0s"
    group_interval = "5m"
    repeat_interval = "4h"
    send_resolved = true

    [alerts.rules.GpuIdle]
    for = "45m"
    utilization_below = 0.03

group_wait defaults to 0 s, not Alertmanager's 30 s: gpuwatch evaluates every rule of a host
at once, so alerts that start together already arrive in one evaluation, and a rule's first
notification then comes ``for`` plus at most one evaluation interval after its condition began.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from agent.config.reader import Reader
from alerts.inhibit import ALERTNAME
from alerts.rules import DEFAULT_RULES, RuleSpec, apply_overrides


@dataclass(frozen=True, slots=True)
class RouteConfig:
    group_by: tuple[str, ...] = (ALERTNAME, "host")
    group_wait: timedelta = timedelta(0)
    group_interval: timedelta = timedelta(minutes=5)
    repeat_interval: timedelta = timedelta(hours=4)
    send_resolved: bool = True


@dataclass(frozen=True, slots=True)
class AlertsConfig:
    rules: Mapping[str, RuleSpec] = field(default_factory=lambda: dict(DEFAULT_RULES))
    route: RouteConfig = field(default_factory=RouteConfig)
    give_up_after: timedelta = timedelta(hours=6)


def parse_alerts(r: Reader, top: dict[str, Any]) -> AlertsConfig:
    t = r.sub(top, "alerts", {"rules", "route", "give_up_after"})
    rules_table = t.get("alerts.rules", {})
    if not isinstance(rules_table, dict):
        r.problem("alerts.rules", "expected a table of [alerts.rules.<Name>] tables")
        rules_table = {}
    rules, problems = apply_overrides(DEFAULT_RULES, rules_table)
    r.problems.extend(problems)
    give_up = _duration(r, t, "alerts.give_up_after", timedelta(hours=6), allow_zero=False)
    return AlertsConfig(rules=rules, route=_route(r, t), give_up_after=give_up)


def _route(r: Reader, t: dict[str, Any]) -> RouteConfig:
    allowed = {"group_by", "group_wait", "group_interval", "repeat_interval", "send_resolved"}
    route = r.table(t.get("alerts.route", {}), "alerts.route", allowed)
    defaults = RouteConfig()
    return RouteConfig(
        group_by=_group_by(r, route, defaults.group_by),
        group_wait=_duration(r, route, "alerts.route.group_wait", defaults.group_wait),
        group_interval=_duration(
            r, route, "alerts.route.group_interval", defaults.group_interval, allow_zero=False
        ),
        repeat_interval=_duration(
            r, route, "alerts.route.repeat_interval", defaults.repeat_interval, allow_zero=False
        ),
        send_resolved=r.boolean(route, "alerts.route.send_resolved", defaults.send_resolved),
    )


def _group_by(r: Reader, table: dict[str, Any], default: tuple[str, ...]) -> tuple[str, ...]:
    key = "alerts.route.group_by"
    value = table.get(key)
    if value is None:
        return default
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        r.problem(key, f"expected a list of label names, got {value!r}")
        return default
    return tuple(value)


def _duration(
    r: Reader, table: dict[str, Any], key: str, default: timedelta, *, allow_zero: bool = True
) -> timedelta:
    """A Prometheus duration ("30s", "5m", "0"), as Alertmanager's config takes them: a string,
    never a bare number (Alertmanager refuses those too)."""
    seconds = r.duration(table, key, default.total_seconds(), numbers=False, allow_zero=allow_zero)
    return timedelta(seconds=seconds)
