"""RunPod over a loopback server answering with the REST v2 and GraphQL samples."""

from __future__ import annotations

import copy
import logging
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from collectors.billing.base import BillingAuthError, BillingError, CostKind, CostRecord, HourlyRate
from collectors.billing.http import ApiError
from collectors.billing.registry import CostSource, make_source
from collectors.billing.runpod import RunPodSource, rest_unavailable
from tests.collectors.billing.conftest import TOKEN, FakeApi, FakeClock, MakeApi, Reply, sample

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
JUNE_1 = datetime(2026, 6, 1, tzinfo=UTC)
JUNE_2 = datetime(2026, 6, 2, tzinfo=UTC)

POD_RATE = HourlyRate(
    source="runpod",
    resource="7h9k2m4n6p",
    name="pytorch-training",
    usd_per_hour=Decimal("0.44"),
    gpus=1,
    observed_at=NOW,
    started_at=datetime(2026, 6, 1, 12, 2, tzinfo=UTC),
)
POD_COST = CostRecord(
    source="runpod",
    record_id="pod/7h9k2m4n6p/2026-06-01T00:00:00+00:00/2026-06-02T00:00:00+00:00",
    resource="7h9k2m4n6p",
    period_start=JUNE_1,
    period_end=JUNE_2,
    amount=Decimal("12.34"),
    currency="USD",
    kind=CostKind.BILLED,
    description="pod",
)
SERVERLESS_COST = CostRecord(
    source="runpod",
    record_id="serverless/4m7x2k9q/2026-06-01T00:00:00+00:00/2026-06-02T00:00:00+00:00",
    resource="4m7x2k9q",
    period_start=JUNE_1,
    period_end=JUNE_2,
    amount=Decimal("8.9"),
    currency="USD",
    kind=CostKind.BILLED,
    description="serverless",
)


@pytest.fixture
def runpod(make_api: MakeApi) -> RunPodSource:
    return RunPodSource(make_api("runpod", "RUNPOD_API_KEY"), make_api("runpod", "RUNPOD_API_KEY"))


def pods(*changes: dict[str, Any]) -> dict[str, Any]:
    """The /v2/pods sample with one pod per change (each applied over the sample pod)."""
    body = sample("runpod-v2-pods.json")
    base = body["pods"][0]
    body["pods"] = [{**copy.deepcopy(base), **change} for change in changes] or [base]
    return body


def test_rates_from_v2_pods(server: FakeApi, runpod: RunPodSource) -> None:
    server.answer("/v2/pods", Reply(200, sample("runpod-v2-pods.json")))
    assert runpod.rates(NOW) == [POD_RATE]
    [seen] = server.requests
    assert (seen.method, seen.headers["authorization"]) == ("GET", f"Bearer {TOKEN}")


def test_rates_leave_out_stopped_pods_and_count_no_gpus_on_cpu_pods(
    server: FakeApi, runpod: RunPodSource
) -> None:
    body = pods(
        {"id": "gone", "status": "EXITED", "cost": 0.0},
        {"id": "dead", "status": "TERMINATED", "cost": 0},
        {"id": "cpu", "gpu": None, "cost": 0.06, "startedAt": None},
        {"id": "big", "gpu": {"id": "NVIDIA H100 80GB HBM3", "count": 8}, "cost": 21.52},
    )
    del body["pods"][2]["gpu"]
    server.answer("/v2/pods", Reply(200, body))
    rates = runpod.rates(NOW)
    assert [(r.resource, r.usd_per_hour, r.gpus, r.started_at) for r in rates] == [
        ("cpu", Decimal("0.06"), 0, None),
        ("big", Decimal("21.52"), 8, POD_RATE.started_at),
    ]


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"cost": None}, "pods[1].cost is null"),
        ({"cost": "0.44"}, "pods[1].cost is a string, expected number"),
        ({"gpu": {"id": "x"}}, "pods[1].gpu.count missing"),
        ({"startedAt": "yesterday"}, "pods[1].startedAt is not an RFC 3339 time: 'yesterday'"),
        ({"status": 3}, "pods[1].status is a number, expected string"),
    ],
)
def test_a_bad_pod_fails_the_whole_fetch_naming_the_field(
    change: dict[str, Any], problem: str, server: FakeApi, runpod: RunPodSource
) -> None:
    server.answer("/v2/pods", Reply(200, pods({}, change)))
    with pytest.raises(BillingError) as caught:
        runpod.rates(NOW)
    assert str(caught.value) == f"runpod /v2/pods: {problem}"
    assert caught.value.retryable is False


def test_a_missing_field_is_named(server: FakeApi, runpod: RunPodSource) -> None:
    body = pods({}, {})
    del body["pods"][1]["cost"]
    server.answer("/v2/pods", Reply(200, body))
    with pytest.raises(BillingError, match=r"^runpod /v2/pods: pods\[1\]\.cost missing$"):
        runpod.rates(NOW)
    server.answer("/v2/pods", Reply(200, {"data": []}))
    with pytest.raises(BillingError, match="^runpod /v2/pods: pods missing$"):
        runpod.rates(NOW)


def answer_billing(server: FakeApi) -> None:
    server.answer("/v2/billing/pods", Reply(200, sample("runpod-v2-billing-pods.json")))
    server.answer("/v2/billing/serverless", Reply(200, sample("runpod-v2-billing-serverless.json")))


def test_costs_from_v2_billing_pods_and_serverless(server: FakeApi, runpod: RunPodSource) -> None:
    answer_billing(server)
    assert runpod.costs(JUNE_1, JUNE_2, NOW) == [POD_COST, SERVERLESS_COST]
    window = {
        "startTime": "2026-06-01T00:00:00Z",
        "endTime": "2026-06-02T00:00:00Z",
        "bucketSize": "hour",
    }
    assert [(s.path, s.query) for s in server.requests] == [
        ("/v2/billing/pods", window),
        ("/v2/billing/serverless", window),
    ]
    # Stable ids: the same period fetched again replaces, never doubles.
    assert runpod.costs(JUNE_1, JUNE_2, NOW) == [POD_COST, SERVERLESS_COST]


def test_costs_in_day_buckets_without_serverless(server: FakeApi, make_api: MakeApi) -> None:
    answer_billing(server)
    source = RunPodSource(make_api("runpod"), None, bucket="day", include_serverless=False)
    assert source.costs(JUNE_1, JUNE_2, NOW) == [POD_COST]
    [seen] = server.requests
    assert seen.query["bucketSize"] == "day"


def test_a_bad_billing_record_returns_nothing(server: FakeApi, runpod: RunPodSource) -> None:
    answer_billing(server)
    body = sample("runpod-v2-billing-serverless.json")
    del body["records"][0]["totalAmount"]
    server.answer("/v2/billing/serverless", Reply(200, body))
    with pytest.raises(
        BillingError, match=r"^runpod /v2/billing/serverless: records\[0\]\.totalAmount missing$"
    ):
        runpod.costs(JUNE_1, JUNE_2, NOW)


def test_costs_need_aware_times(runpod: RunPodSource) -> None:
    with pytest.raises(ValueError, match="naive datetime"):
        runpod.costs(datetime(2026, 6, 1), JUNE_2, NOW)


def spend(per_hour: object) -> dict[str, Any]:
    body = sample("runpod-graphql-myself-spend.json")
    body["data"]["myself"]["currentSpendPerHr"] = per_hour
    return body


@pytest.mark.parametrize("failure", [Reply(404, {"title": "Not Found"}), Reply(502, None)])
def test_rates_fall_back_to_the_account_spend_when_rest_is_unavailable(
    failure: Reply, server: FakeApi, make_api: MakeApi, clock: FakeClock
) -> None:
    server.answer("/v2/pods", failure)
    server.answer("/graphql", Reply(200, spend(2.79)))
    source = RunPodSource(make_api("runpod", max_retries=1), make_api("runpod"))
    assert source.rates(NOW) == [HourlyRate("runpod", "", "account", Decimal("2.79"), 0, NOW)]
    graphql = server.requests[-1]
    assert (graphql.method, graphql.path) == ("POST", "/graphql")
    assert "currentSpendPerHr" in graphql.json()["query"]
    assert graphql.headers["authorization"] == f"Bearer {TOKEN}"


def test_when_billing_is_unavailable_the_caller_can_ask_for_the_account_rate(
    server: FakeApi, runpod: RunPodSource
) -> None:
    server.answer("/v2/billing/pods", Reply(404, {"title": "Not Found"}))
    server.answer("/graphql", Reply(200, spend(1.5)))
    with pytest.raises(ApiError) as caught:
        runpod.costs(JUNE_1, JUNE_2, NOW)
    assert rest_unavailable(caught.value)
    assert runpod.account_rate(NOW).usd_per_hour == Decimal("1.5")
    assert not rest_unavailable(ApiError("x", status=429, retryable=True))
    assert not rest_unavailable(ApiError("x", status=400, retryable=False))


def test_account_rate_from_the_graphql_sample(server: FakeApi, runpod: RunPodSource) -> None:
    server.answer("/graphql", Reply(200, sample("runpod-graphql-myself-spend.json")))
    assert runpod.account_rate(NOW) == HourlyRate("runpod", "", "account", Decimal(0), 0, NOW)


def test_graphql_errors_in_a_200_are_errors(server: FakeApi, runpod: RunPodSource) -> None:
    errors = {"errors": [{"message": "Something went wrong"}, {"path": ["myself"]}], "data": None}
    server.answer("/graphql", Reply(200, errors))
    with pytest.raises(
        BillingError, match="^runpod /graphql: Something went wrong; \\(no message\\)$"
    ):
        runpod.account_rate(NOW)


def test_no_fallback_for_refused_keys_or_bad_requests(
    server: FakeApi, runpod: RunPodSource, make_api: MakeApi, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server.answer("/v2/pods", Reply(401, {"title": "Unauthorized", "detail": "bad token"}))
    with pytest.raises(BillingAuthError) as caught:
        runpod.rates(NOW)
    assert str(caught.value) == "runpod: credentials refused (HTTP 401); check RUNPOD_API_KEY"
    server.answer("/v2/pods", Reply(400, {"detail": "bad request"}))
    with pytest.raises(ApiError, match="^runpod /v2/pods: HTTP 400: bad request$"):
        runpod.rates(NOW)
    server.answer("/v2/pods", Reply(404, None))
    with pytest.raises(ApiError, match="HTTP 404"):
        RunPodSource(make_api("runpod"), None).rates(NOW)
    assert all(s.path == "/v2/pods" for s in server.requests)
    assert all(TOKEN not in r.getMessage() for r in caplog.records)


def test_make_source_builds_a_paced_runpod_source(server: FakeApi, clock: FakeClock) -> None:
    server.answer("/v2/pods", Reply(200, sample("runpod-v2-pods.json")))
    answer_billing(server)
    source = make_source("runpod", TOKEN, server.url, sleep=clock.sleep, clock=clock)
    try:
        assert isinstance(source, RunPodSource) and isinstance(source, CostSource)
        assert source.rates(NOW) == [POD_RATE]
        assert source.costs(JUNE_1, JUNE_2, NOW) == [POD_COST, SERVERLESS_COST]
    finally:
        source.close()
    assert clock.sleeps == [1.0, 1.0]  # the documented 60/min, as one request a second
