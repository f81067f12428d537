"""Vast.ai over a loopback server answering with the v1 instances and v0 charges samples."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest

from collectors.billing.base import BillingAuthError, BillingError, CostKind, CostRecord, HourlyRate
from collectors.billing.registry import CostSource, make_source
from collectors.billing.vast import VastSource
from tests.collectors.billing.conftest import (
    TOKEN,
    FakeApi,
    FakeClock,
    MakeApi,
    Reply,
    Seen,
    sample,
)

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
INSTANCES = "/api/v1/instances/"
CHARGES = "/api/v0/charges/"
NEXT_INSTANCES = "eyJ2YWx1ZXMiOiB7ImlkIjogMTIzfX0="  # the sample's next_token
NEXT_CHARGES = "eyJ2YWx1ZXMiOiB7ImlkIjogMTIzNDU2Nzh9fQ=="

SAMPLE_RATE = HourlyRate(
    source="vast",
    resource="312",
    name="ML Training Job 2025",
    usd_per_hour=Decimal("0.8021"),
    gpus=1,
    observed_at=NOW,
    started_at=datetime.fromtimestamp(1668804745.1223178, UTC),
)
SAMPLE_CHARGE = CostRecord(
    source="vast",
    record_id="instance-12345678/2024-11-01T00:00:00+00:00/2024-11-04T00:00:00+00:00",
    resource="12345678",
    period_start=datetime(2024, 11, 1, tzinfo=UTC),
    period_end=datetime(2024, 11, 4, tzinfo=UTC),
    amount=Decimal("38.421"),
    currency="USD",
    kind=CostKind.BILLED,
    description="Instance 12345678 Charges - 4 days",
)


@pytest.fixture
def source(make_api: MakeApi) -> VastSource:
    return VastSource(make_api("vast", "VAST_API_KEY"))


def last_page(key: str, name: str, **change: Any) -> dict[str, Any]:
    """The sample as a final page (next_token null), its one item changed by ``change``."""
    body = sample(name)
    body[key] = [{**body[key][0], **change}]
    body["next_token"] = None
    return body


def paged(server: FakeApi, path: str, token: str, first: object, second: object) -> None:
    """Page 1 without after_token, page 2 with the token page 1 gave."""

    def script(seen: Seen) -> Reply:
        after = seen.query.get("after_token")
        if after is None:
            return Reply(200, first)
        return Reply(200, second) if after == token else Reply(400, {"msg": "bad token"})

    server.answer_with(path, script)


def second_instance(**change: Any) -> dict[str, Any]:
    return last_page(
        "instances",
        "vast-instances-v1.json",
        **{"id": 313, "label": None, "num_gpus": 2, "dph_total": 1.6042, "start_date": None}
        | change,
    )


def test_rates_follow_next_token_across_pages(server: FakeApi, source: VastSource) -> None:
    paged(server, INSTANCES, NEXT_INSTANCES, sample("vast-instances-v1.json"), second_instance())
    assert source.rates(NOW) == [
        SAMPLE_RATE,
        HourlyRate("vast", "313", "2x RTX 4090", Decimal("1.6042"), 2, NOW, None),
    ]
    first, second = server.requests
    assert first.headers["authorization"] == f"Bearer {TOKEN}"
    assert first.query == {"limit": "25", "order_by": '[{"col": "id", "dir": "asc"}]'}
    assert second.query == {**first.query, "after_token": NEXT_INSTANCES}
    assert "api_key" not in first.query


def test_stopped_and_offline_instances_are_not_rated(server: FakeApi, source: VastSource) -> None:
    body = sample("vast-instances-v1.json")
    one = body["instances"][0]
    body["instances"] = [
        {**one, "id": 1, "actual_status": "stopped"},
        {**one, "id": 2, "actual_status": "offline"},
        {**one, "id": 3, "actual_status": None},  # still being created: billed
        {**one, "id": 4, "actual_status": "frozen"},
    ]
    body["next_token"] = None
    server.answer(INSTANCES, Reply(200, body))
    assert [r.resource for r in source.rates(NOW)] == ["3", "4"]


def test_a_missing_field_names_it_and_returns_nothing(server: FakeApi, source: VastSource) -> None:
    body = sample("vast-instances-v1.json")
    del body["instances"][0]["dph_total"]
    server.answer(INSTANCES, Reply(200, body))
    with pytest.raises(BillingError) as caught:
        source.rates(NOW)
    assert str(caught.value) == "vast /api/v1/instances/: instances[0].dph_total missing"


def test_a_bad_second_page_fails_the_whole_fetch(server: FakeApi, source: VastSource) -> None:
    paged(
        server,
        INSTANCES,
        NEXT_INSTANCES,
        sample("vast-instances-v1.json"),
        second_instance(num_gpus="2"),
    )
    with pytest.raises(
        BillingError,
        match=r"^vast /api/v1/instances/ \(page 2\): instances\[0\]\.num_gpus is a string",
    ):
        source.rates(NOW)


def test_a_looping_next_token_is_an_error(server: FakeApi, source: VastSource) -> None:
    server.answer(INSTANCES, Reply(200, sample("vast-instances-v1.json")))  # always page 1
    with pytest.raises(BillingError, match="next_token repeats; pagination loops"):
        source.rates(NOW)
    assert len(server.requests) == 2  # the second page gave the first one's token again


def test_costs_from_charges_across_pages(server: FakeApi, source: VastSource) -> None:
    volume = last_page(
        "results",
        "vast-charges.json",
        source="volume-777",
        type="volume",
        description=None,
        amount=0.25,
        items=[],
    )
    paged(server, CHARGES, NEXT_CHARGES, sample("vast-charges.json"), volume)
    start, end = datetime(2024, 11, 1, tzinfo=UTC), datetime(2024, 11, 4, tzinfo=UTC)
    records = source.costs(start, end, NOW)
    assert records == [
        SAMPLE_CHARGE,
        CostRecord(
            source="vast",
            record_id="volume-777/2024-11-01T00:00:00+00:00/2024-11-04T00:00:00+00:00",
            resource="volume-777",
            period_start=start,
            period_end=end,
            amount=Decimal("0.25"),
            currency="USD",
            kind=CostKind.BILLED,
            description="volume",
        ),
    ]
    first, second = server.requests
    assert json.loads(first.query["select_filters"]) == {
        "day": {"gte": 1730419200, "lte": 1730678400}
    }
    assert first.query["limit"] == "100"
    assert second.query["after_token"] == NEXT_CHARGES


def test_a_charge_without_an_amount_returns_nothing(server: FakeApi, source: VastSource) -> None:
    body = last_page("results", "vast-charges.json")
    del body["results"][0]["amount"]
    server.answer(CHARGES, Reply(200, body))
    with pytest.raises(
        BillingError, match=r"^vast /api/v0/charges/: results\[0\]\.amount missing$"
    ):
        source.costs(datetime(2024, 11, 1, tzinfo=UTC), NOW, NOW)


def test_costs_need_aware_times(source: VastSource) -> None:
    with pytest.raises(ValueError, match="naive datetime"):
        source.costs(datetime(2024, 11, 1), NOW, NOW)


def test_429_without_retry_after_backs_off_then_succeeds(
    server: FakeApi, source: VastSource, clock: FakeClock
) -> None:
    too_frequent = Reply(429, {"success": False, "msg": "API requests too frequent"})
    server.answer(
        INSTANCES, too_frequent, Reply(200, last_page("instances", "vast-instances-v1.json"))
    )
    assert source.rates(NOW) == [SAMPLE_RATE]
    assert clock.sleeps == [1.0]


@pytest.mark.parametrize("status", [401, 403])
def test_refused_key_names_vast_api_key_and_hides_it(
    status: int, server: FakeApi, source: VastSource, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server.answer(INSTANCES, Reply(status, {"success": False, "error": "auth_error"}))
    with pytest.raises(BillingAuthError) as caught:
        source.rates(NOW)
    assert str(caught.value) == f"vast: credentials refused (HTTP {status}); check VAST_API_KEY"
    assert TOKEN not in repr(caught.value)
    assert all(TOKEN not in r.getMessage() for r in caplog.records)


def test_make_source_paces_vast_at_its_minimum_interval(server: FakeApi, clock: FakeClock) -> None:
    paged(server, INSTANCES, NEXT_INSTANCES, sample("vast-instances-v1.json"), second_instance())
    source = make_source("vast", TOKEN, server.url, sleep=clock.sleep, clock=clock)
    try:
        assert isinstance(source, CostSource)
        assert len(source.rates(NOW)) == 2
    finally:
        source.close()
    assert clock.sleeps == [1.0]
