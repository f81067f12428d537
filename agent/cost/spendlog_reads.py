"""LiteLLM's spend logs (``"LiteLLM_SpendLogs"`` in its PostgreSQL, one row per request) as a
window's tokens and list-price spend per (model, tenant), for a ``[[gateways]]`` entry of
``kind = "litellm_db"``: where LiteLLM's Prometheus callback is off, its database still knows.

Columns from LiteLLM's ``schema.prisma`` (model ``LiteLLM_SpendLogs``): ``api_key`` (the key's
hash), ``"user"``, ``team_id``, ``end_user``, ``model``, ``model_group`` (the name clients ask
for), ``prompt_tokens``, ``completion_tokens``, ``spend``, ``"startTime"``, and ``metadata``
(JSON: ``user_api_key_alias``, ``user_api_key_team_alias``, ``status``; LiteLLM's
``SpendLogsMetadata``). A request belongs to the window its ``startTime`` falls in; failed
requests (``status`` "failure") are left out. Read at read time, not collected: the rows are
exact per request and survive restarts of either side, but only as long as LiteLLM keeps them
(its ``maximum_spend_logs_retention_period``).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

from sqlalchemy import Engine, create_engine, text
from sqlalchemy.exc import SQLAlchemyError

from agent.config.gateways import GatewayConfig
from agent.cost.tenant_reads import TenantKey, TenantUse

log = logging.getLogger(__name__)

# Who a tenant is, as for LiteLLM's /metrics (collectors.gateways.litellm.TENANT_LABELS).
TENANT_SQL = {
    "key": "COALESCE(NULLIF(metadata->>'user_api_key_alias', ''), NULLIF(api_key, ''))",
    "user": "NULLIF(\"user\", '')",
    "team": "COALESCE(NULLIF(metadata->>'user_api_key_team_alias', ''), NULLIF(team_id, ''))",
    "end_user": "NULLIF(end_user, '')",
}
QUERY = """
SELECT {tenant} AS tenant, COALESCE(NULLIF(model_group, ''), model) AS model,
       SUM(prompt_tokens), SUM(completion_tokens), SUM(spend)
FROM "LiteLLM_SpendLogs"
WHERE "startTime" >= :start AND "startTime" < :end
  AND COALESCE(metadata->>'status', 'success') <> 'failure'
GROUP BY 1, 2
"""
TIMEOUT_SECONDS = 10


def spendlog_use(
    gateway: GatewayConfig, start: datetime, end: datetime
) -> dict[TenantKey, TenantUse]:
    """Per (model, tenant): the window's tokens and spend; empty (with a warning naming the
    gateway) when the database cannot be read: its tenants are then unknown, not zero."""
    assert gateway.database_url is not None
    query = text(QUERY.format(tenant=TENANT_SQL[gateway.tenant]))
    # LiteLLM's DateTime columns are timestamp(3) without a zone, in UTC.
    window = {"start": _naive(start), "end": _naive(end)}
    engine: Engine | None = None
    try:
        # Inside the guard: a URL whose driver is not installed is this gateway's problem,
        # never the budget alerts' or the report's.
        engine = create_engine(
            gateway.database_url.reveal(),
            connect_args={"connect_timeout": TIMEOUT_SECONDS,
                          "options": f"-c statement_timeout={TIMEOUT_SECONDS * 1000}"},
        )  # fmt: skip
        with engine.connect() as conn:
            rows = conn.execute(query, window).all()
    except (SQLAlchemyError, ImportError) as exc:
        cause = str(getattr(exc, "orig", exc)).splitlines()[0] if str(exc) else type(exc).__name__
        log.warning("gateway %s: LiteLLM's spend logs not read: %s", gateway.name, cause)
        return {}
    finally:
        if engine is not None:
            engine.dispose()
    models = gateway.mapping.models
    out: dict[TenantKey, TenantUse] = {}
    for tenant, model, prompt, completion, spend in rows:
        if tenant is None or not model:
            continue  # no tenant: its tokens stay unattributed
        key = (models.get(model, model), tenant)
        use = TenantUse(float(prompt or 0), float(completion or 0), _float(spend))
        out[key] = add(out.get(key), use)
    return out


def add(a: TenantUse | None, b: TenantUse) -> TenantUse:
    """Two sources' figures for one (model, tenant), spend unknown if either's is."""
    if a is None:
        return b
    spend = None if a.spend_usd is None or b.spend_usd is None else a.spend_usd + b.spend_usd
    return TenantUse(a.prompt + b.prompt, a.output + b.output, spend)


def _float(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


def _naive(ts: datetime) -> datetime:
    return ts.astimezone(UTC).replace(tzinfo=None)
