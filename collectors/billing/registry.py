"""The provider APIs gpuwatch reads: base URLs, key variables, rate limits, and a factory.

Rate limits are as documented (shared/reference/billing-apis.md, section 1); each source
paces itself to one request per ``min_interval_seconds``, which stays inside all of them:
- RunPod REST v2: per-user quotas over minute, hour and day windows; the spec's example
  policy is 60/min, 3000/h, 50000/day (your real quota may differ); 429 sends Retry-After.
  GraphQL limits are not documented.
- Lambda: about 1 request/s in general.
- Vast: a minimum interval per endpoint and identity (the 429 body's example threshold is
  1.0); no Retry-After.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from types import MappingProxyType
from typing import Protocol, runtime_checkable

import httpx

from collectors.billing.base import BillingAuthError, CostRecord, HourlyRate
from collectors.billing.http import MAX_ANSWER_BYTES, ApiClient
from collectors.billing.lambdalabs import LambdaSource
from collectors.billing.runpod import RunPodSource
from collectors.billing.vast import VastSource


@runtime_checkable
class RateSource(Protocol):
    """Live $/h of each running resource."""

    name: str

    def rates(self, now: datetime) -> list[HourlyRate]: ...

    def close(self) -> None: ...


@runtime_checkable
class CostSource(RateSource, Protocol):
    """A rate source that also reports billed history (Lambda does not)."""

    def costs(self, start: datetime, end: datetime, now: datetime) -> list[CostRecord]: ...


@dataclass(frozen=True, slots=True)
class Provider:
    name: str
    env_var: str  # holds the API key
    base_url: str
    rate_limit: str  # the documented limit, in words
    min_interval_seconds: float
    has_costs: bool
    graphql_url: str | None = None  # RunPod's fallback endpoint, same host


PROVIDERS: Mapping[str, Provider] = MappingProxyType(
    {
        "runpod": Provider(
            name="runpod",
            env_var="RUNPOD_API_KEY",
            base_url="https://api.runpod.io",
            graphql_url="https://api.runpod.io",
            rate_limit="REST v2 per-user quotas per minute/hour/day (example 60/min); "
            "429 with Retry-After",
            min_interval_seconds=1.0,
            has_costs=True,
        ),
        "lambda": Provider(
            name="lambda",
            env_var="LAMBDA_API_KEY",
            base_url="https://cloud.lambda.ai/api/v1",
            rate_limit="about 1 request/s",
            min_interval_seconds=1.0,
            has_costs=False,
        ),
        "vast": Provider(
            name="vast",
            env_var="VAST_API_KEY",
            base_url="https://console.vast.ai",
            rate_limit="minimum interval between calls per endpoint (example 1.0); "
            "429 without Retry-After",
            min_interval_seconds=1.0,
            has_costs=True,
        ),
    }
)


def api_key(provider: str, environ: Mapping[str, str]) -> str:
    """The provider's key from its environment variable; BillingAuthError naming it if unset."""
    variable = _provider(provider).env_var
    token = environ.get(variable, "").strip()
    if not token:
        raise BillingAuthError(f"{provider}: no API key; set {variable}")
    return token


def make_source(
    provider: str,
    token: str,
    base_url: str | None = None,
    *,
    graphql_url: str | None = None,
    client: httpx.Client | None = None,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    rng: random.Random | None = None,
    max_retries: int = 4,
    min_interval_seconds: float | None = None,
    timeout_seconds: float = 30.0,
    max_answer_bytes: int = MAX_ANSWER_BYTES,
) -> RateSource:
    """A source for ``provider`` ("runpod", "lambda", "vast"); close it when done.

    ``base_url`` (and RunPod's ``graphql_url``) replace the documented defaults, e.g. with a
    test server; a passed ``client`` is shared and stays open after ``close``.
    """
    info = _provider(provider)

    def api(url: str) -> ApiClient:
        interval = info.min_interval_seconds
        return ApiClient(
            info.name,
            url,
            token,
            info.env_var,
            client=client,
            sleep=sleep,
            clock=clock,
            max_retries=max_retries,
            min_interval_seconds=interval if min_interval_seconds is None else min_interval_seconds,
            rng=rng,
            timeout_seconds=timeout_seconds,
            max_answer_bytes=max_answer_bytes,
        )

    rest = api(base_url or info.base_url)
    if info.name == "runpod":
        graphql = graphql_url or base_url or info.graphql_url
        return RunPodSource(rest, api(graphql) if graphql else None)
    if info.name == "lambda":
        return LambdaSource(rest)
    return VastSource(rest)


def _provider(name: str) -> Provider:
    try:
        return PROVIDERS[name]
    except KeyError:
        raise ValueError(f"unknown billing provider {name!r}; one of {sorted(PROVIDERS)}") from None
