"""Lambda Cloud over a loopback server answering with the /instances and /instance-types samples."""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from collectors.billing.base import BillingAuthError, BillingError, HourlyRate
from collectors.billing.http import ApiError
from collectors.billing.lambdalabs import LambdaSource
from collectors.billing.registry import PROVIDERS, CostSource, RateSource, make_source
from tests.collectors.billing.conftest import TOKEN, FakeApi, FakeClock, MakeApi, Reply, sample

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.fixture
def source(make_api: MakeApi) -> LambdaSource:
    return LambdaSource(make_api("lambda", "LAMBDA_API_KEY"))


def instances(*changes: dict[str, Any]) -> dict[str, Any]:
    """The /instances sample with one instance per change (each applied over the sample's)."""
    body = sample("lambda-instances.json")
    base = body["data"][0]
    body["data"] = [{**base, **change} for change in changes]
    return body


def eight_gpu_type() -> dict[str, Any]:
    """The OpenAPI example's instance type: 1592 cents/h for 8 GPUs."""
    types = sample("lambda-instance-types-openapi-example.json")
    kind: dict[str, Any] = types["data"]["gpu_8x_example"]["instance_type"]
    return kind


def test_the_price_is_cents_per_hour_for_the_whole_instance(
    server: FakeApi, source: LambdaSource
) -> None:
    server.answer("/instances", Reply(200, instances({"instance_type": eight_gpu_type()})))
    assert source.rates(NOW) == [
        HourlyRate(
            source="lambda",
            resource="0920582c7ff041399e34823a0be62549",
            name="training-node-1",
            usd_per_hour=Decimal("15.92"),
            gpus=8,
            observed_at=NOW,
            started_at=None,  # Lambda gives no launch time: the caller counts from first seen
        )
    ]
    [seen] = server.requests  # specs.gpus was there: no /instance-types
    assert (seen.path, seen.headers["authorization"]) == ("/instances", f"Bearer {TOKEN}")


def test_the_legacy_sample_takes_its_gpus_from_the_type_name(
    server: FakeApi, source: LambdaSource
) -> None:
    server.answer("/instances", Reply(200, sample("lambda-instances.json")))
    server.answer("/instance-types", Reply(200, sample("lambda-instance-types.json")))
    [rate] = source.rates(NOW)
    assert (rate.resource, rate.name, rate.usd_per_hour, rate.gpus) == (
        "0920582c7ff041399e34823a0be62549",
        "training-node-1",
        Decimal("1.10"),
        1,
    )
    # specs.gpus missing: asked /instance-types once, which had none either, then the name.
    assert [s.path for s in server.requests] == ["/instances", "/instance-types"]


def test_gpus_missing_from_the_instance_come_from_instance_types(
    server: FakeApi, source: LambdaSource
) -> None:
    kind = {"name": "custom_type", "price_cents_per_hour": 598, "specs": {"vcpus": 30}}
    server.answer("/instances", Reply(200, instances({"instance_type": kind, "name": None})))
    types = sample("lambda-instance-types-openapi-example.json")
    types["data"]["custom_type"] = {
        "instance_type": {**eight_gpu_type(), "name": "custom_type", "specs": {"gpus": 2}},
        "regions_with_capacity_available": [],
    }
    server.answer("/instance-types", Reply(200, types))
    [rate] = source.rates(NOW)
    assert (rate.name, rate.usd_per_hour, rate.gpus) == ("custom_type", Decimal("5.98"), 2)


def test_unknown_gpu_count_fails_naming_the_field(server: FakeApi, source: LambdaSource) -> None:
    kind = {"name": "mystery", "price_cents_per_hour": 100}
    server.answer("/instances", Reply(200, instances({}, {"instance_type": kind})))
    server.answer("/instance-types", Reply(200, sample("lambda-instance-types.json")))
    with pytest.raises(
        BillingError, match=r"^lambda /instances: data\[1\]\.instance_type\.specs\.gpus missing$"
    ):
        source.rates(NOW)


def test_terminated_instances_are_not_rated(server: FakeApi, source: LambdaSource) -> None:
    body = instances(
        {"id": "a", "status": "terminated"},
        {"id": "b", "status": "preempted"},
        {"id": "c", "status": "booting", "instance_type": eight_gpu_type()},
    )
    server.answer("/instances", Reply(200, body))
    assert [(r.resource, r.gpus) for r in source.rates(NOW)] == [("c", 8)]


def test_a_missing_price_fails_the_whole_fetch(server: FakeApi, source: LambdaSource) -> None:
    kind = eight_gpu_type()
    del kind["price_cents_per_hour"]
    body = instances({"instance_type": eight_gpu_type()}, {"instance_type": kind})
    server.answer("/instances", Reply(200, body))
    with pytest.raises(
        BillingError,
        match=r"^lambda /instances: data\[1\]\.instance_type\.price_cents_per_hour missing$",
    ):
        source.rates(NOW)


def test_malformed_json_is_an_error(server: FakeApi, source: LambdaSource) -> None:
    server.answer("/instances", Reply(200, b'{"data": [}'))
    with pytest.raises(ApiError, match=r"^lambda /instances: the answer is not JSON"):
        source.rates(NOW)


@pytest.mark.parametrize("status", [401, 403])
def test_refused_key_names_lambda_api_key(
    status: int, server: FakeApi, source: LambdaSource, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    error = {"error": {"code": "global/invalid-api-key", "message": "API key was invalid"}}
    server.answer("/instances", Reply(status, error))
    with pytest.raises(BillingAuthError) as caught:
        source.rates(NOW)
    assert str(caught.value) == f"lambda: credentials refused (HTTP {status}); check LAMBDA_API_KEY"
    assert all(TOKEN not in r.getMessage() for r in caplog.records)


def test_lambda_offers_no_costs(server: FakeApi, clock: FakeClock) -> None:
    assert PROVIDERS["lambda"].has_costs is False
    server.answer("/instances", Reply(200, instances({"instance_type": eight_gpu_type()})))
    source = make_source("lambda", TOKEN, server.url, sleep=clock.sleep, clock=clock)
    try:
        assert isinstance(source, RateSource) and not isinstance(source, CostSource)
        assert not hasattr(source, "costs")
        source.rates(NOW)
        source.rates(NOW)
    finally:
        source.close()
    assert clock.sleeps == [1.0]  # about 1 request/s
