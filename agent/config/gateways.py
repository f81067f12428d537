"""The ``[[gateways]]`` array: gateways in front of the engines that know who sent each token
(LiteLLM, or any Prometheus endpoint counting tokens by a tenant label). docs/tenants.md.

[[gateways]]
name = "litellm"                         # its `target` label; unique among targets and gateways
url = "http://127.0.0.1:4000/metrics"
kind = "litellm"                         # or "prometheus" (the metric keys below)
tenant = "key"                           # litellm: key | user | team | end_user
bearer_token_env = "LITELLM_MASTER_KEY"  # optional; or bearer_token_file
[gateways.models]                        # the gateway's model name -> gpuwatch's, where they differ
"meta-llama/Llama-3.1-8B-Instruct" = "llama-8b"

kind = "prometheus" names its counters (sample names, ``_total`` included) and labels:
prompt_tokens_metric, output_tokens_metric (both required), spend_metric (list-price USD,
optional), tenant_label (default "tenant"), model_label (default "model").

kind = "litellm_db" reads LiteLLM's spend logs in its PostgreSQL instead of its /metrics (no
url; database_url_env or database_url_file, a postgresql+psycopg:// URL), at read time.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from agent.config.limits import parse_limits
from agent.config.reader import Reader, shown
from agent.config.secret import Secret
from collectors.gateways import litellm
from collectors.gateways.tenant_tokens import GatewayMapping
from collectors.limits import LIMIT_KEYS, ScrapeLimits

KINDS = ("litellm", "prometheus", "litellm_db")
SPEND_LOGS = "litellm_db"  # read at read time from LiteLLM's database (agent.cost.spendlog_reads)
MAX_GATEWAYS = 20
MAX_TIMEOUT = 3600.0
_METRIC_KEYS = ("prompt_tokens_metric", "output_tokens_metric", "spend_metric")
_LABEL_KEYS = ("tenant_label", "model_label")


@dataclass(frozen=True, slots=True)
class GatewayConfig:
    name: str
    url: str
    kind: str
    mapping: GatewayMapping
    tenant: str = "key"  # what a tenant is (litellm); "tenant_label" for kind = "prometheus"
    bearer_token: Secret | None = None
    timeout_seconds: float = 5.0
    limits: ScrapeLimits = field(default_factory=ScrapeLimits)
    database_url: Secret | None = None  # kind = "litellm_db": LiteLLM's PostgreSQL

    @property
    def scraped(self) -> bool:
        return self.kind != SPEND_LOGS


def parse_gateways(
    r: Reader, top: dict[str, Any], targets: Iterable[str]
) -> tuple[GatewayConfig, ...]:
    items = r.array(top, "gateways")
    if len(items) > MAX_GATEWAYS:
        r.problem("gateways", f"at most {MAX_GATEWAYS} gateways, got {len(items)}")
        return ()
    taken = set(targets)
    allowed = {"name", "url", "kind", "tenant", "models", "bearer_token_env", "bearer_token_file",
               "timeout", "database_url_env", "database_url_file", *_METRIC_KEYS, *_LABEL_KEYS,
               *LIMIT_KEYS}  # fmt: skip
    out: list[GatewayConfig] = []
    for i, item in enumerate(items):
        path = f"gateways[{i}]"
        t = r.table(item, path, allowed)
        name, url = r.optional_string(t, f"{path}.name"), r.http_url(t, f"{path}.url")
        if name is None:
            r.problem(f"{path}.name", "missing (every gateway needs a name)")
        elif not name.strip() or name in taken:
            why = "empty" if not name.strip() else "already the name of a target or a gateway"
            r.problem(f"{path}.name", f"{why}: {shown(name)}")
        kind = r.string(t, f"{path}.kind", "litellm")
        database = _database(r, t, path, kind)
        if kind == SPEND_LOGS:
            url = url or ""
        elif f"{path}.url" not in t:
            r.problem(f"{path}.url", "missing (the gateway's /metrics URL)")
        mapping, tenant = _mapping(r, t, path, kind)
        token = r.secret(t, f"{path}.bearer_token")
        timeout = r.duration(t, f"{path}.timeout", 5.0, maximum=MAX_TIMEOUT)
        limits = parse_limits(r, t, path)
        if name is not None and url is not None and mapping is not None:
            taken.add(name)
            out.append(GatewayConfig(name, url, kind, mapping, tenant, token, timeout, limits,
                                     database))  # fmt: skip
    return tuple(out)


def _database(r: Reader, t: dict[str, Any], path: str, kind: str) -> Secret | None:
    """LiteLLM's database URL (kind = "litellm_db" only, and required there)."""
    secret = r.secret(t, f"{path}.database_url")
    named = f"{path}.database_url_env" in t or f"{path}.database_url_file" in t
    if kind != SPEND_LOGS:
        if named:
            r.problem(f"{path}.database_url_env", 'only for kind = "litellm_db"')
        return None
    if f"{path}.url" in t:
        r.problem(f"{path}.url", 'not for kind = "litellm_db" (it reads the database)')
    if not named:
        r.problem(
            f"{path}.database_url_env", "missing (LiteLLM's PostgreSQL URL, from env or file)"
        )
    elif secret is not None and not secret.reveal().startswith("postgresql"):
        r.problem(f"{path}.database_url_env", "expected a postgresql+psycopg:// URL")
    return secret


def _mapping(
    r: Reader, t: dict[str, Any], path: str, kind: str
) -> tuple[GatewayMapping | None, str]:
    models = _models(r, t, f"{path}.models")
    if kind in ("litellm", SPEND_LOGS):
        for key in (*_METRIC_KEYS, *_LABEL_KEYS):
            if f"{path}.{key}" in t:
                r.problem(f"{path}.{key}", 'only for kind = "prometheus" (LiteLLM\'s are known)')
        tenant = r.string(t, f"{path}.tenant", "key")
        if tenant not in litellm.TENANT_LABELS:
            choices = " | ".join(litellm.TENANT_LABELS)
            r.problem(f"{path}.tenant", f"expected {choices}, got {shown(tenant)}")
            return None, tenant
        return litellm.mapping(tenant, models), tenant
    if kind != "prometheus":
        r.problem(f"{path}.kind", f"expected {' | '.join(KINDS)}, got {shown(kind)}")
        return None, ""
    if f"{path}.tenant" in t:
        r.problem(f"{path}.tenant", 'only for kind = "litellm"; here tenant_label names the label')
    prompt, output, spend = (r.optional_string(t, f"{path}.{k}") for k in _METRIC_KEYS)
    for key, value in zip(_METRIC_KEYS[:2], (prompt, output), strict=True):
        if value is None:
            r.problem(f"{path}.{key}", "missing (the counter's sample name, e.g. tokens_total)")
    tenant_label = r.string(t, f"{path}.tenant_label", "tenant")
    model_label = r.string(t, f"{path}.model_label", "model")
    if prompt is None or output is None:
        return None, tenant_label
    spent = (spend,) if spend else ()
    return GatewayMapping(
        (prompt,), (output,), spent, (tenant_label,), model_label, models
    ), tenant_label


def _models(r: Reader, t: dict[str, Any], path: str) -> dict[str, str]:
    value = t.get(path, {})
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) and v.strip() for k, v in value.items()
    ):
        r.problem(path, f'expected a table of model names, like {{ "gateway-name" = "model" }}, '
                        f"got {shown(value)}")  # fmt: skip
        return {}
    return dict(value)
