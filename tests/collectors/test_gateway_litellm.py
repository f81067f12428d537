"""LiteLLM's /metrics (tests/fixtures/gateways/litellm/two-keys.txt) scraped over loopback HTTP
into tokens and list-price spend per key and model; a generic endpoint by its own labels."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent.sim.gateway import GatewayReplay
from collectors.base import CollectError
from collectors.gateways import litellm
from collectors.gateways.collector import GatewayCollector
from collectors.gateways.tenant_tokens import OUTPUT, PROMPT, SPEND, GatewayMapping
from collectors.scrape import TargetSpec

CAPTURE = (Path(__file__).parents[1] / "fixtures/gateways/litellm/two-keys.txt").read_text()
NOW = datetime(2026, 12, 1, tzinfo=UTC)
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def _scrape(
    url: str, mapping: GatewayMapping, token: str | None = None
) -> dict[tuple[str, str, str], float]:
    collector = GatewayCollector(
        TargetSpec("litellm", url, bearer_token=token), mapping, host="box"
    )
    try:
        samples = collector.collect(NOW)
    finally:
        collector.close()
    for s in samples:
        assert s.labels["host"] == "box" and s.labels["target"] == "litellm"
    return {(s.metric, s.labels["model"], s.labels["tenant"]): s.value for s in samples}


def test_tokens_and_spend_per_key_summed_over_end_users_and_the_model_mapped() -> None:
    with GatewayReplay(CAPTURE, token="sk-master") as gw:
        got = _scrape(gw.url, litellm.mapping("key", {LLAMA: "llama-8b"}), "sk-master")
    assert got == {
        (PROMPT, "llama-8b", "search-app"): 60000.0,  # 45000 without an end user + 15000 with
        (OUTPUT, "llama-8b", "search-app"): 24000.0,
        (SPEND, "llama-8b", "search-app"): pytest.approx(0.0252),
        (PROMPT, "llama-8b", "chat-bot"): 20000.0,
        (OUTPUT, "llama-8b", "chat-bot"): 8000.0,
        (SPEND, "llama-8b", "chat-bot"): 0.0084,
        (PROMPT, "gpt-4o", "chat-bot-openai"): 3000.0,  # an API model: no GPU here serves it
        (OUTPUT, "gpt-4o", "chat-bot-openai"): 900.0,
        (SPEND, "gpt-4o", "chat-bot-openai"): 0.0165,
    }


def test_teams_fall_back_to_their_id_and_a_team_of_none_is_nobody() -> None:
    with GatewayReplay(CAPTURE) as gw:
        got = _scrape(gw.url, litellm.mapping("team", {}))
    # chat-bot's requests had no team ("None"): their tokens stay unattributed.
    assert {k[2] for k in got} == {"search"}
    assert got[(PROMPT, LLAMA, "search")] == 60000.0


def test_a_body_without_litellm_counters_is_a_failed_scrape_naming_them() -> None:
    with (
        GatewayReplay("# HELP up x\n# TYPE up gauge\nup 1\n") as gw,
        pytest.raises(CollectError, match="litellm_input_tokens_metric_total"),
    ):
        _scrape(gw.url, litellm.mapping("key", {}))


def test_declared_counters_without_samples_are_zero_tokens_not_a_failure() -> None:
    family = "litellm_input_tokens_metric_total"
    body = f"# HELP {family} x\n# TYPE {family} counter\n"
    with GatewayReplay(body) as gw:
        assert _scrape(gw.url, litellm.mapping("key", {})) == {}


def test_a_wrong_token_is_a_failed_scrape() -> None:
    with (
        GatewayReplay(CAPTURE, token="sk-master") as gw,
        pytest.raises(CollectError, match="401"),
    ):
        _scrape(gw.url, litellm.mapping("key", {}), "sk-wrong")


def test_any_endpoint_by_its_own_metric_and_labels() -> None:
    body = (
        "# TYPE gw_tokens_total counter\n"
        'gw_tokens_total{customer="acme",served_model="llama",direction="in"} 10\n'
        "# TYPE gw_out_total counter\n"
        'gw_out_total{customer="acme",served_model="llama"} 4\n'
        'gw_out_total{customer="",served_model="llama"} 99\n'
    )
    mapping = GatewayMapping(("gw_tokens_total",), ("gw_out_total",), (), ("customer",),
                             "served_model", {"llama": "llama-8b"})  # fmt: skip
    with GatewayReplay(body) as gw:
        got = _scrape(gw.url, mapping)
    assert got == {(PROMPT, "llama-8b", "acme"): 10.0, (OUTPUT, "llama-8b", "acme"): 4.0}


def test_a_body_over_the_label_or_series_limits_is_refused_whole() -> None:
    from collectors.limits import ScrapeLimits

    mapping = litellm.mapping("key", {})
    cases = (
        (ScrapeLimits(label_value_length_limit=32), "label_value_length_limit"),  # the hashes
        (ScrapeLimits(series_per_day_limit=5), "series_per_day_limit"),  # 9 canonical series
    )
    for limits, says in cases:
        with GatewayReplay(CAPTURE) as gw:
            spec = TargetSpec("litellm", gw.url, limits=limits)
            collector = GatewayCollector(spec, mapping, host="box")
            try:
                with pytest.raises(CollectError, match=says):
                    collector.collect(NOW)
            finally:
                collector.close()


def test_every_gateway_series_is_a_canonical_counter() -> None:
    from collectors.signals import SIGNALS, Kind

    for metric in (PROMPT, OUTPUT, SPEND):
        assert SIGNALS[metric].kind is Kind.COUNTER
