"""``--format json``: the whole report as one versioned JSON object (docs/report-schema.md).

Money is a string with fixed decimals ("1234.50"): a JSON number is read as a binary float by
most tools, and a month of float sums drifts; a string converts exactly to a decimal type.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from agent.reporting.model import Report
from agent.reporting.render import fields
from agent.reporting.render.fields import Record
from agent.reporting.render.mig_sections import mig_record
from agent.reporting.render.pod_sections import pod_record
from agent.reporting.render.tenant_sections import tenant_record
from agent.reporting.render.values import Cell, Kind, json_value

T = TypeVar("T")
CURRENCY = "USD"


def _object(record: Record) -> dict[str, Any]:
    return {key: json_value(cell) for key, cell in record.items()}


def _list(items: Iterable[T], make: Callable[[T], Record]) -> list[dict[str, Any]]:
    return [_object(make(item)) for item in items]


def to_document(report: Report) -> dict[str, Any]:
    """The JSON object, as plain dicts and lists; keys in a stable order."""
    zone = fields.zone_of(report)
    generated_at = Cell(Kind.TIME, fields.local(report.generated_at, zone))
    return {
        "schema_version": report.schema_version,
        "generated_at": json_value(generated_at),
        "currency": CURRENCY,
        "period": _object(fields.period_record(report.period, zone)),
        "previous_period": _object(fields.period_record(report.previous_period, zone)),
        "data": _object(fields.data_record(report, zone)),
        "filters": {"hosts": list(report.hosts_filter), "models": list(report.models_filter)},
        "useful_tokens_rule": report.useful_tokens_rule,
        "totals": _object(fields.totals_record(report.totals)),
        "spend_sources": _list(report.spend_sources, fields.spend_source_record),
        "models": _list(report.models, fields.model_record),
        "targets": _list(report.targets, fields.target_record),
        "hosts": _list(report.hosts, fields.host_record),
        "gpus": _list(report.gpus, fields.gpu_record),
        "mig_instances": _list(report.mig_instances, mig_record),
        "top_waste": _list(report.top_waste, fields.gpu_record),
        "alerts": _list(report.alerts, fields.alert_record),
        "queue_incidents": [
            _object(fields.incident_record(q, zone)) for q in report.queue_incidents
        ],
        "budget": _object(fields.budget_record(report.budget)),
        "teams": _list(report.teams, fields.group_record),
        "projects": _list(report.projects, fields.group_record),
        "team_budgets": _list(report.team_budgets, fields.team_budget_record),
        "tenants": _list(report.tenants, tenant_record),
        "namespaces": _list(report.namespaces, pod_record),
        "pods": _list(report.pods, pod_record),
        "recommendations": _list(report.recommendations, fields.recommendation_record),
        "daily_spend": _list(report.daily_spend, fields.daily_spend_record),
        "model_days": _list(report.model_days, fields.model_day_record),
        "gpu_days": _list(report.gpu_days, fields.gpu_day_record),
    }


def render_json(report: Report) -> str:
    # allow_nan=False: NaN is not JSON; the cells already turn non-finite values into null.
    return json.dumps(to_document(report), indent=2, ensure_ascii=False, allow_nan=False) + "\n"
