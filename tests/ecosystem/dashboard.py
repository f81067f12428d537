"""The Grafana dashboard's queries, read from its JSON, with template variables substituted as
Grafana does before it sends them to Prometheus."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
DASHBOARD = REPO / "contrib" / "grafana" / "gpuwatch-dashboard.json"
RULES = REPO / "contrib" / "prometheus" / "gpuwatch-rules.yml"
RULE_TESTS = (
    REPO / "contrib" / "prometheus" / "gpuwatch-rules.test.yml",
    REPO / "contrib" / "prometheus" / "gpuwatch-rules.history.test.yml",
)
# What Grafana puts for its own variables with a default Prometheus data source (scrape
# interval 15s): $__rate_interval is max($__interval + 15s, 4 x 15s).
RATE_INTERVAL = "1m"
_LABEL_VALUES = re.compile(r"^label_values\((?:(?P<match>.+),\s*)?(?P<label>\w+)\)$")
_VARIABLE = re.compile(r"\$(\w+)|\$\{(\w+)\}")


@dataclass(frozen=True)
class Query:
    panel: str
    ref: str
    expr: str


def load() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def panels(dashboard: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """Every panel that queries (rows hold no queries; collapsed rows hold their panels)."""
    for panel in dashboard["panels"]:
        if panel["type"] == "row":
            yield from panel.get("panels", [])
        else:
            yield panel


def queries(dashboard: Mapping[str, Any]) -> list[Query]:
    return [
        Query(p["title"], t["refId"], t["expr"]) for p in panels(dashboard) for t in p["targets"]
    ]


def variables(dashboard: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {v["name"]: v for v in dashboard["templating"]["list"]}


def chosen(dashboard: Mapping[str, Any]) -> dict[str, str]:
    """The custom and textbox variables at their defaults (what the dashboard opens with)."""
    return {
        name: str(v["current"]["value"])
        for name, v in variables(dashboard).items()
        if v["type"] in ("custom", "textbox")
    }


def choices(dashboard: Mapping[str, Any], name: str) -> list[str]:
    """Every value a custom variable offers."""
    return [str(o["value"]) for o in variables(dashboard)[name]["options"]]


def label_values_query(variable: Mapping[str, Any]) -> tuple[str, str]:
    """(label, match) of a ``label_values(match, label)`` variable."""
    query = variable["query"]
    text = query["query"] if isinstance(query, dict) else query
    found = _LABEL_VALUES.match(text.strip())
    assert found, f"variable {variable['name']}: not a label_values() query: {text}"
    return found["label"], found["match"] or ""


def range_of(dashboard: Mapping[str, Any]) -> str:
    """$__range for the dashboard's default time range ("now-6h" to "now": 6h)."""
    start, end = dashboard["time"]["from"], dashboard["time"]["to"]
    assert end == "now" and start.startswith("now-"), dashboard["time"]
    return str(start.removeprefix("now-"))


def substitute(expr: str, values: Mapping[str, str]) -> str:
    """Replace $name and ${name}; an unknown variable is a failure, not a literal."""

    def one(match: re.Match[str]) -> str:
        name = match[1] or match[2]
        assert name in values, f"unknown variable ${name} in {expr}"
        return values[name]

    return _VARIABLE.sub(one, expr)


def regex_of(values: list[str]) -> str:
    """A multi-value variable as Grafana writes it into a regex matcher: (a|b)."""
    escaped = [re.sub(r"([\\.+*?()|\[\]{}^$])", r"\\\\\1", v) for v in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"
