"""Token (and list-price spend) counters by tenant and model, from a parsed /metrics body.

A :class:`GatewayMapping` names the counters and labels to read; LiteLLM's is
:data:`collectors.gateways.litellm`'s, and any other endpoint gives its own (``[[gateways]]``
with ``kind = "prometheus"``). Series of one (model, tenant) that differ in other labels
(LiteLLM's ``end_user``, ``requested_model``) are summed into one canonical series, labelled
``host``, ``target`` (the gateway's name), ``model`` (gpuwatch's name for it) and ``tenant``.
Rows without a tenant are not kept: their tokens stay unattributed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from collectors.base import Sample
from collectors.engines.exposition import Exposition

PROMPT = "gpuwatch_gateway_prompt_tokens_total"
OUTPUT = "gpuwatch_gateway_generation_tokens_total"
SPEND = "gpuwatch_gateway_spend_usd_total"
# Label values that mean "none": prometheus_client writes a Python None as the string "None"
# (LiteLLM labels a request without a user or team so).
MISSING = frozenset({"", "None", "none", "null"})


@dataclass(frozen=True, slots=True)
class GatewayMapping:
    """Which counters (sample names; the first present of each tuple is read) and labels."""

    prompt: tuple[str, ...]
    output: tuple[str, ...]
    spend: tuple[str, ...] = ()
    tenant_labels: tuple[str, ...] = ("tenant",)  # the first with a value names the tenant
    model_label: str = "model"
    models: Mapping[str, str] = field(default_factory=dict)  # gateway model -> gpuwatch model

    def families(self) -> frozenset[str]:
        """The parser's family names of every counter read (without ``_total``)."""
        names = (*self.prompt, *self.output, *self.spend)
        return frozenset({n.removesuffix("_total") for n in names} | set(names))


def first_present(exposition: Exposition, names: Sequence[str]) -> str | None:
    return next((n for n in names if exposition.has_samples(n)), None)


def map_tenants(
    exposition: Exposition, mapping: GatewayMapping, host: str, gateway: str, now: datetime
) -> list[Sample]:
    """One sample per (canonical metric, model, tenant) with a value in the body."""
    out: list[Sample] = []
    for metric, names in ((PROMPT, mapping.prompt), (OUTPUT, mapping.output),
                          (SPEND, mapping.spend)):  # fmt: skip
        source = first_present(exposition, names)
        if source is None:
            continue
        sums: dict[tuple[str, str], float] = defaultdict(float)
        for labels, value in exposition.rows(source):
            tenant = tenant_of(labels, mapping.tenant_labels)
            model = labels.get(mapping.model_label, "")
            if tenant is None or model in MISSING:
                continue
            sums[(mapping.models.get(model, model), tenant)] += value
        for (model, tenant), value in sorted(sums.items()):
            labels = {"host": host, "target": gateway, "model": model, "tenant": tenant}
            out.append(Sample(metric=metric, value=value, labels=labels, ts=now))
    return out


def tenant_of(labels: Mapping[str, str], names: Sequence[str]) -> str | None:
    return next((labels[n] for n in names if labels.get(n, "") not in MISSING), None)
