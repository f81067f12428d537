"""Per-model sections beside cost: the latency objectives and serving efficiency."""

from __future__ import annotations

from agent.reporting.model import Report
from agent.reporting.render import fields
from agent.reporting.render.grid import Column, Section
from agent.reporting.render.grid import each as _each
from agent.reporting.render.grid import grid as _grid
from agent.reporting.render.grid import text_column as _text
from agent.reporting.render.serving_fields import SERVING_NOTE


def objectives_sections(report: Report) -> list[Section]:
    """Per model with an objective ([[slo]]): the share of requests within it; none: no
    section (most setups state none)."""
    rows = [m for m in report.models if m.slo is not None]
    if not rows:
        return []
    columns = (
        _text("model", "model"),
        _text("slo_thresholds", "within"),
        Column("slo_objective_ratio", "objective"),
        Column("slo_attainment_ratio", "attained"),
        Column("slo_attainment_lower_ratio", "at least"),
        Column("slo_attainment_upper_ratio", "at most"),
        _text("slo_met", "met", False),
        _text("slo_basis", "basis"),
        Column("slo_good_token_cost_per_million_usd", "$/M within"),
        Column("slo_missed_cost_usd", "missed $"),
    )
    note = (
        "spans: each request judged from its own OTLP span (exact); histograms: exact at a "
        "bucket bound, else interpolated between the bounds shown, several thresholds bounded, "
        "not multiplied; $/M within: the model's cost per million output tokens delivered "
        "within the objective (spans only); missed $: the cost of the requests that missed, "
        "by request share"
    )
    return [_grid("objectives", "Objectives", columns, _each(rows, fields.model_record), note=note)]


def serving_section(report: Report) -> Section:
    """Per model: prefix-cache hits and their dollars, spec-decode acceptance, KV and queue."""
    columns = (
        _text("model", "model"),
        Column("prefix_cache_hit_ratio", "cache hits"),
        Column("cached_prompt_tokens", "cached tokens"),
        Column("cache_saved_usd", "cache saved"),
        Column("spec_decode_acceptance_ratio", "spec accept"),
        Column("kv_cache_peak_ratio", "KV peak"),
        Column("requests_waiting_peak", "max queue"),
    )
    records = _each(report.models, fields.model_record)
    return _grid("serving", "Serving efficiency", columns, records, note=SERVING_NOTE)


def aborted_sections(report: Report) -> list[Section]:
    """Per model whose engine counts finish reasons: the requests it finished as aborted
    (clients gone: vLLM's aborts, Dynamo's disconnected clients, Triton's cancellations),
    beside all it finished. None counts them: no section."""
    rows = [m for m in report.models if m.abandoned_requests is not None]
    if not rows:
        return []
    columns = (
        _text("model", "model"),
        Column("requests", "finished"),
        Column("abandoned_requests", "aborted"),
    )
    note = "requests the engine finished with reason abort: work done for clients who left"
    return [_grid("aborted", "Aborted requests", columns, _each(rows, fields.model_record),
                  note=note)]  # fmt: skip
