"""LiteLLM proxy's /metrics (its ``prometheus`` callback): tokens and spend per virtual key,
user, team or end user, per model.

Names and labels from LiteLLM's ``litellm/integrations/prometheus.py`` and
``litellm/types/integrations/prometheus.py`` (``PrometheusMetricLabels``): the counters
``litellm_input_tokens_metric``, ``litellm_output_tokens_metric`` (before LiteLLM 1.5x:
``litellm_input_tokens``, ``litellm_output_tokens``) and ``litellm_spend_metric``, each
labelled ``end_user``, ``hashed_api_key``, ``api_key_alias``, ``model``, ``team``,
``team_alias``, ``user`` (tokens also ``requested_model``). ``model`` is the model LiteLLM
called; ``[gateways.models]`` maps it to gpuwatch's name where the two differ.
``litellm_spend_metric`` is LiteLLM's list-price spend (its model cost map), in USD.
"""

from __future__ import annotations

from collections.abc import Mapping

from collectors.gateways.tenant_tokens import GatewayMapping

NAME = "litellm"
PROMPT = ("litellm_input_tokens_metric_total", "litellm_input_tokens_total")
OUTPUT = ("litellm_output_tokens_metric_total", "litellm_output_tokens_total")
SPEND = ("litellm_spend_metric_total",)
# Who a tenant is -> the labels that name it, the first with a value winning: a key without
# an alias is known by its hash, a team without an alias by its id.
TENANT_LABELS: dict[str, tuple[str, ...]] = {
    "key": ("api_key_alias", "hashed_api_key"),
    "user": ("user",),
    "team": ("team_alias", "team"),
    "end_user": ("end_user",),
}


def mapping(tenant: str, models: Mapping[str, str]) -> GatewayMapping:
    """LiteLLM's counters, tenants being ``tenant`` (one of :data:`TENANT_LABELS`)."""
    return GatewayMapping(PROMPT, OUTPUT, SPEND, TENANT_LABELS[tenant], "model", dict(models))
