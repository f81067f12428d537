"""RunPod: live $/h per pod and billed hourly/daily buckets, from REST v2; GraphQL as fallback.

REST v2 (server ``https://api.runpod.io``, paths under ``/v2``) is where RunPod points new
integrations; v1 (``rest.runpod.io/v1``) was retired on 2026-11-15, so it is not used.
- ``rates``: ``GET /v2/pods``; ``cost`` is the pod's current USD/h (0 once EXITED/TERMINATED,
  so those pods are left out) and ``gpu.count`` its GPUs (CPU pods have no ``gpu``: 0).
- ``costs``: ``GET /v2/billing/pods`` and ``/v2/billing/serverless``, one record per resource
  per bucket. Buckets are half-open [start, end); the API snaps ``startTime`` down and
  ``endTime`` up to bucket boundaries, and the in-progress bucket keeps growing: its record
  id stays the same, so storing it again replaces it.
- Fallback: REST v2 is still beta. When ``/v2/pods`` answers 404 or keeps failing (5xx,
  timeouts), ``rates`` gives the account's whole burn from GraphQL
  ``myself { currentSpendPerHr }`` as one rate (resource "", name "account"). ``account_rate``
  asks for it directly, e.g. when ``costs`` fails the same way (see ``rest_unavailable``).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Literal

from collectors.billing.base import BillingError, CostKind, CostRecord, HourlyRate
from collectors.billing.http import ApiClient, ApiError, Node

log = logging.getLogger(__name__)

SOURCE = "runpod"
PODS = "/v2/pods"
BILLING_PODS = "/v2/billing/pods"
BILLING_SERVERLESS = "/v2/billing/serverless"
GRAPHQL = "/graphql"
SPEND_QUERY = "query gpuwatchSpend { myself { currentSpendPerHr } }"
NOT_BILLED = frozenset({"EXITED", "TERMINATED"})  # the doc: cost is 0.0 in these states

Bucket = Literal["hour", "day"]


def rest_unavailable(exc: BaseException) -> bool:
    """The REST endpoint is gone (404) or kept failing (5xx, timeouts): try GraphQL instead."""
    if not isinstance(exc, ApiError):
        return False
    return exc.status == 404 or (exc.retryable and (exc.status is None or exc.status >= 500))


class RunPodSource:
    """Rates and billed costs of one RunPod account.

    ``api`` talks to the REST server (base ``https://api.runpod.io``); ``graphql`` to the
    GraphQL one (the same host, path ``/graphql``), or None for no fallback.
    """

    name = SOURCE

    def __init__(
        self,
        api: ApiClient,
        graphql: ApiClient | None = None,
        *,
        bucket: Bucket = "hour",
        include_serverless: bool = True,
    ) -> None:
        self._api = api
        self._graphql = graphql
        self._bucket = bucket
        self._include_serverless = include_serverless

    def rates(self, now: datetime) -> list[HourlyRate]:
        """What each billed pod costs per hour now (the account's total in the fallback)."""
        try:
            payload = self._api.get_json(PODS)
        except ApiError as exc:
            if self._graphql is None or not rest_unavailable(exc):
                raise
            log.warning("%s; using GraphQL currentSpendPerHr for the account instead", exc)
            return [self.account_rate(now)]
        root = Node(payload, f"{SOURCE} {PODS}")
        return [
            _pod_rate(pod, now)
            for pod in root["pods"].items()
            if pod["status"].text() not in NOT_BILLED
        ]

    def costs(self, start: datetime, end: datetime, now: datetime) -> list[CostRecord]:
        """Billed cost per pod (and serverless endpoint) per bucket overlapping [start, end).

        ``now`` is not needed: the API closes the window itself.
        """
        params = {
            "startTime": _rfc3339(start),
            "endTime": _rfc3339(end),
            "bucketSize": self._bucket,
        }
        root = Node(self._api.get_json(BILLING_PODS, params), f"{SOURCE} {BILLING_PODS}")
        records = [_record(r, "podId", "pod") for r in root["records"].items()]
        if self._include_serverless:
            payload = self._api.get_json(BILLING_SERVERLESS, params)
            root = Node(payload, f"{SOURCE} {BILLING_SERVERLESS}")
            records += [_record(r, "serverlessId", "serverless") for r in root["records"].items()]
        return records

    def account_rate(self, now: datetime) -> HourlyRate:
        """The account's current burn over all resources (pods, serverless, storage), USD/h."""
        if self._graphql is None:
            raise BillingError(f"{SOURCE}: no GraphQL client configured", retryable=False)
        payload = self._graphql.post_json(GRAPHQL, {"query": SPEND_QUERY})
        root = Node(payload, f"{SOURCE} {GRAPHQL}")
        _raise_graphql_errors(root)
        spend = root["data"]["myself"]["currentSpendPerHr"].decimal()
        # The GPUs behind the account's burn are not reported: 0 says "not counted here".
        return HourlyRate(SOURCE, "", "account", spend, 0, now)

    def close(self) -> None:
        self._api.close()
        if self._graphql is not None:
            self._graphql.close()


def _pod_rate(pod: Node, now: datetime) -> HourlyRate:
    gpu = pod.get("gpu")
    started = pod.get("startedAt")
    return HourlyRate(
        source=SOURCE,
        resource=pod["id"].text(),
        name=pod["name"].text(),
        usd_per_hour=pod["cost"].decimal(),
        gpus=0 if gpu is None else gpu["count"].integer(),
        observed_at=now,
        started_at=None if started is None else started.timestamp(),
    )


def _record(record: Node, id_field: str, kind: str) -> CostRecord:
    resource = record[id_field].text()
    start = record["startTime"].timestamp()
    end = record["endTime"].timestamp()
    return CostRecord(
        source=SOURCE,
        record_id=f"{kind}/{resource}/{start.isoformat()}/{end.isoformat()}",
        resource=resource,
        period_start=start,
        period_end=end,
        amount=record["totalAmount"].decimal(),
        currency="USD",
        kind=CostKind.BILLED,
        description=kind,
    )


def _raise_graphql_errors(root: Node) -> None:
    # GraphQL reports errors in the body, sometimes with HTTP 200.
    errors = root.get("errors")
    if errors is None or not errors.items():
        return
    messages: list[str] = []
    for error in errors.items():
        message = error.get("message")
        messages.append(message.text() if message is not None else "(no message)")
    raise BillingError(f"{root.where}: {'; '.join(messages)[:300]}")


def _rfc3339(when: datetime) -> str:
    if when.tzinfo is None:
        raise ValueError(f"naive datetime {when!r}: pass UTC-aware times")
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
