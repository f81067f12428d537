"""ApiClient against a real loopback server: auth, retries, pacing, decoding; and Node."""

from __future__ import annotations

import logging
import random
import socket
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from email.utils import format_datetime
from pathlib import Path

import pytest

from collectors.billing.base import BillingAuthError, BillingError
from collectors.billing.http import ApiClient, ApiError, Node
from collectors.billing.registry import PROVIDERS, api_key
from tests.collectors.billing.conftest import (
    FIXTURES,
    TOKEN,
    FakeApi,
    FakeClock,
    MakeApi,
    Reply,
)

OK = Reply(200, {"ok": True})


class BottomRandom(random.Random):
    """The bottom of every jitter range: each wait is half its step."""

    def random(self) -> float:
        return 0.0


def assert_no_token(caplog: pytest.LogCaptureFixture, *texts: str) -> None:
    for text in texts:
        assert TOKEN not in text
    for record in caplog.records:
        assert TOKEN not in record.getMessage()
        assert TOKEN not in str(record.args)


def test_get_sends_the_key_as_bearer_and_decodes_numbers_as_decimal(
    server: FakeApi, make_api: MakeApi
) -> None:
    server.answer("/api/v1/things/", Reply(200, {"price": 0.1, "count": 3}))
    body = make_api().get_json("/api/v1/things/", {"limit": 25, "q": "a b"})
    assert body == {"price": Decimal("0.1"), "count": 3}
    assert isinstance(body["price"], Decimal)
    [seen] = server.requests
    assert seen.method == "GET"
    assert seen.headers["authorization"] == f"Bearer {TOKEN}"
    assert seen.query == {"limit": "25", "q": "a b"}


def test_post_sends_the_body_as_json(server: FakeApi, make_api: MakeApi) -> None:
    server.answer("/graphql", Reply(200, {"data": {}}))
    assert make_api().post_json("/graphql", {"query": "{ x }"}) == {"data": {}}
    [seen] = server.requests
    assert (seen.method, seen.json()) == ("POST", {"query": "{ x }"})
    assert seen.headers["content-type"] == "application/json"


@pytest.mark.parametrize("status", [401, 403])
def test_refused_credentials_name_provider_and_variable_never_the_key(
    status: int, server: FakeApi, make_api: MakeApi, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server.answer("/v2/pods", Reply(status, {"title": "no", "detail": f"bad key {TOKEN}"}))
    with pytest.raises(BillingAuthError) as caught:
        make_api("runpod", "RUNPOD_API_KEY").get_json("/v2/pods")
    message = str(caught.value)
    assert message == f"runpod: credentials refused (HTTP {status}); check RUNPOD_API_KEY"
    assert caught.value.retryable is False
    assert len(server.requests) == 1  # never retried
    assert_no_token(caplog, message, repr(caught.value))


def test_429_waits_retry_after_seconds_then_succeeds(
    server: FakeApi, make_api: MakeApi, clock: FakeClock
) -> None:
    server.answer("/x", Reply(429, {"detail": "slow down"}, {"Retry-After": "7"}), OK)
    assert make_api().get_json("/x") == {"ok": True}
    assert clock.sleeps == [7.0]
    assert len(server.requests) == 2


def test_429_waits_until_an_http_date_retry_after(
    server: FakeApi, make_api: MakeApi, clock: FakeClock
) -> None:
    wall = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)
    later = format_datetime(wall + timedelta(seconds=30), usegmt=True)
    server.answer("/x", Reply(429, None, {"Retry-After": later}), OK)
    assert make_api(wall_clock=lambda: wall).get_json("/x") == {"ok": True}
    assert clock.sleeps == [30.0]


def test_429_without_retry_after_backs_off_exponentially(
    server: FakeApi, make_api: MakeApi, clock: FakeClock
) -> None:
    too_frequent = Reply(429, {"msg": "API requests too frequent: endpoint threshold=1.0"})
    server.answer("/x", too_frequent, too_frequent, OK)
    assert make_api().get_json("/x") == {"ok": True}
    assert clock.sleeps == [1.0, 2.0]  # the top of each jitter range


def test_429_asking_for_less_than_the_backoff_waits_the_backoff(
    server: FakeApi, make_api: MakeApi, clock: FakeClock
) -> None:
    server.answer("/x", Reply(429, None, {"Retry-After": "0"}), Reply(429, None), OK)
    assert make_api().get_json("/x") == {"ok": True}
    assert clock.sleeps == [1.0, 2.0]


def test_backoff_waits_at_least_half_of_each_step(
    server: FakeApi, make_api: MakeApi, clock: FakeClock
) -> None:
    server.answer("/x", Reply(500, None), Reply(500, None), Reply(500, None), OK)
    assert make_api(rng=BottomRandom()).get_json("/x") == {"ok": True}
    assert clock.sleeps == [0.5, 1.0, 2.0]


def test_429_asking_for_too_long_a_wait_fails_now(
    server: FakeApi, make_api: MakeApi, clock: FakeClock
) -> None:
    server.answer("/x", Reply(429, None, {"Retry-After": "3600"}))
    with pytest.raises(ApiError, match=r"vast /x: rate limited \(HTTP 429\); asked to wait 3600 s"):
        make_api().get_json("/x")
    assert clock.sleeps == []


def test_5xx_twice_then_success_with_equal_jitter(
    server: FakeApi, make_api: MakeApi, clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server.answer("/x", Reply(500, None), Reply(503, None), OK)
    assert make_api(rng=random.Random(7)).get_json("/x") == {"ok": True}
    expected = random.Random(7)
    # Half of each step (1 s, then 2 s) fixed, the other half random.
    assert clock.sleeps == [0.5 * (1 + expected.random()), 1.0 * (1 + expected.random())]
    assert [r.levelname for r in caplog.records if r.name == "collectors.billing.http"] == [
        "WARNING",
        "WARNING",
    ]
    assert_no_token(caplog)


def test_persistent_5xx_fails_after_max_retries_saying_what_failed(
    server: FakeApi, make_api: MakeApi, clock: FakeClock
) -> None:
    server.answer("/x", Reply(500, None))
    api = make_api(max_retries=3, backoff_cap_seconds=3.0)
    with pytest.raises(ApiError) as caught:
        api.get_json("/x")
    assert str(caught.value) == "vast /x: 4 attempts failed (HTTP 500)"
    assert (caught.value.status, caught.value.retryable) == (500, True)
    assert clock.sleeps == [1.0, 2.0, 3.0]  # capped
    assert len(server.requests) == 4


def test_the_final_error_lists_each_kind_of_failure(server: FakeApi, make_api: MakeApi) -> None:
    server.answer("/x", Reply(500, None), Reply(503, None), Reply(500, None))
    with pytest.raises(ApiError) as caught:
        make_api(max_retries=2).get_json("/x")
    assert str(caught.value) == "vast /x: 3 attempts failed (HTTP 500; HTTP 503)"


def test_other_4xx_fail_at_once_naming_provider_path_status_and_detail(
    server: FakeApi, make_api: MakeApi, clock: FakeClock
) -> None:
    error = {"error": {"code": "global/invalid-parameters", "message": f"nope {TOKEN}"}}
    server.answer("/instances", Reply(400, error))
    with pytest.raises(ApiError) as caught:
        make_api("lambda", "LAMBDA_API_KEY").get_json("/instances")
    assert str(caught.value) == "lambda /instances: HTTP 400: nope <redacted>"
    assert (caught.value.status, caught.value.retryable) == (400, False)
    assert clock.sleeps == []


def test_unknown_path_is_a_404_error(server: FakeApi, make_api: MakeApi) -> None:
    with pytest.raises(ApiError, match="vast /nowhere: HTTP 404: no such path") as caught:
        make_api().get_json("/nowhere")
    assert caught.value.status == 404


@pytest.mark.parametrize(
    "body", [b"<html>502 Bad Gateway</html>", b'{"a": 1', b'{"amount": NaN}', b"\xff\xfe"]
)
def test_a_body_that_is_not_json_is_an_error(
    body: bytes, server: FakeApi, make_api: MakeApi
) -> None:
    server.answer("/x", Reply(200, body))
    with pytest.raises(ApiError, match=r"vast /x: the answer is not JSON \(HTTP 200"):
        make_api().get_json("/x")


def test_connection_errors_are_retried_then_reported(
    clock: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # closed again before the client connects
    api = ApiClient(
        "vast", f"http://127.0.0.1:{port}", TOKEN, "VAST_API_KEY",
        sleep=clock.sleep, clock=clock, max_retries=2, rng=random.Random(1),
    )  # fmt: skip
    with api, pytest.raises(ApiError) as caught:
        api.get_json("/x")
    assert str(caught.value).startswith("vast /x: 3 attempts failed (ConnectError")
    assert caught.value.status is None
    assert len(clock.sleeps) == 2
    assert_no_token(caplog, str(caught.value))


def test_a_bad_base_url_is_a_billing_error_not_retried(clock: FakeClock) -> None:
    api = ApiClient("vast", "ftp://127.0.0.1", TOKEN, "VAST_API_KEY", sleep=clock.sleep)
    with api, pytest.raises(ApiError, match="^vast /x: UnsupportedProtocol") as caught:
        api.get_json("/x")
    assert caught.value.retryable is False
    assert clock.sleeps == []


def test_a_timeout_is_retried(server: FakeApi, make_api: MakeApi, clock: FakeClock) -> None:
    server.answer("/x", Reply(200, {"late": True}, delay_seconds=2.0), OK)
    assert make_api(timeout_seconds=0.2).get_json("/x") == {"ok": True}
    assert clock.sleeps == [1.0]


def test_min_interval_spaces_requests_on_the_injected_clock(
    server: FakeApi, make_api: MakeApi, clock: FakeClock
) -> None:
    server.answer("/x", OK)
    api = make_api(min_interval_seconds=1.0)
    api.get_json("/x")
    api.get_json("/x")
    clock.now += 0.25
    api.get_json("/x")
    clock.now += 5.0
    api.get_json("/x")
    assert clock.sleeps == [1.0, 0.75]


def test_missing_or_malformed_keys_never_reach_the_wire() -> None:
    with pytest.raises(BillingAuthError, match="^vast: no API key; set VAST_API_KEY$"):
        ApiClient("vast", "http://127.0.0.1:9", "", "VAST_API_KEY")
    bad = "abc\ndef-secret"
    with pytest.raises(BillingAuthError) as caught:
        ApiClient("vast", "http://127.0.0.1:9", bad, "VAST_API_KEY")
    assert str(caught.value) == "vast: the API key is malformed; check VAST_API_KEY"


def test_the_key_stays_out_of_repr_and_query_strings(make_api: MakeApi) -> None:
    api = make_api()
    assert TOKEN not in repr(api)
    with pytest.raises(ValueError, match="never in the query string"):
        api.get_json("/x", {"api_key": TOKEN})


def test_api_key_reads_the_documented_variable() -> None:
    assert {p: info.env_var for p, info in PROVIDERS.items()} == {
        "runpod": "RUNPOD_API_KEY",
        "lambda": "LAMBDA_API_KEY",
        "vast": "VAST_API_KEY",
    }
    assert api_key("vast", {"VAST_API_KEY": " k \n"}) == "k"
    with pytest.raises(BillingAuthError, match="^lambda: no API key; set LAMBDA_API_KEY$"):
        api_key("lambda", {})
    with pytest.raises(ValueError, match="unknown billing provider 'aws'"):
        api_key("aws", {})


def test_node_errors_name_the_endpoint_and_the_field_path() -> None:
    root = Node({"a": [{"b": 1}, {"b": "x", "n": None}]}, "vast /api/v1/instances/")
    second = root["a"].items()[1]
    with pytest.raises(BillingError, match=r"^vast /api/v1/instances/: a\[1\]\.c missing$"):
        second["c"]
    with pytest.raises(BillingError, match=r": a\[1\]\.n is null$"):
        second["n"]
    with pytest.raises(BillingError, match=r": a\[1\]\.b is a string, expected number$"):
        second["b"].decimal()
    with pytest.raises(BillingError, match=r": a\[0\]\.b is a number, expected object$"):
        root["a"].items()[0]["b"]["c"]
    with pytest.raises(BillingError, match=r": the answer is an array, expected object$"):
        Node([], "vast /x")["a"]
    assert second.get("n") is None and second.get("zz") is None
    assert root["a"].items()[0]["b"].integer() == 1


def test_node_numbers_and_times() -> None:
    node = Node({"t": "2026-06-01T00:00:00Z", "naive": "2026-06-01T00:00:00", "bool": True}, "w")
    assert node["t"].timestamp() == datetime(2026, 6, 1, tzinfo=UTC)
    with pytest.raises(BillingError, match="naive has no UTC offset"):
        node["naive"].timestamp()
    with pytest.raises(BillingError, match="bool is a boolean, expected number"):
        node["bool"].decimal()
    assert Node(Decimal("2.0"), "w").integer() == 2
    with pytest.raises(BillingError, match="is a number, expected integer"):
        Node(Decimal("2.5"), "w").integer()
    assert Node(Decimal("1668804745.5"), "w").unix_time() == datetime(
        2022, 11, 18, 20, 52, 25, 500000, tzinfo=UTC
    )


def test_fixture_copies_match_the_shared_samples() -> None:
    root = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())
    shared = root.parent / "shared" / "reference" / "samples" / "billing"
    if not shared.is_dir():
        pytest.skip(f"{shared} is not beside the repository")
    for copy in FIXTURES.glob("*.json"):
        assert copy.read_bytes() == (shared / copy.name).read_bytes(), copy.name
