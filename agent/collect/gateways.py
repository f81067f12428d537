"""The configured gateways' collectors (``[[gateways]]``; collectors.gateways)."""

from __future__ import annotations

from agent.config.gateways import GatewayConfig
from agent.config.settings import Config
from collectors.gateways.collector import GatewayCollector
from collectors.scrape import TargetSpec


def gateway_collectors(config: Config) -> list[GatewayCollector]:
    return [
        GatewayCollector(_spec(g), g.mapping, host=config.host)
        for g in config.gateways
        if g.scraped  # LiteLLM's spend logs are read at read time, not collected
    ]


def _spec(g: GatewayConfig) -> TargetSpec:
    """The scrape's view of a gateway: its fetch is a target's (the token revealed only here)."""
    return TargetSpec(
        name=g.name,
        url=g.url,
        timeout_seconds=g.timeout_seconds,
        bearer_token=g.bearer_token.reveal() if g.bearer_token else None,
        limits=g.limits,
    )
