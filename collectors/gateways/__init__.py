"""Gateways in front of the engines (LiteLLM, or any Prometheus endpoint counting tokens by a
tenant label): who sent the tokens, mapped to ``gpuwatch_gateway_*`` signals.

A gateway is not an engine: its tokens are the same tokens the engines count, so they are kept
apart from ``gpuwatch_engine_*`` and never add to the fleet's useful tokens; they only give each
tenant's share of a model's (agent.cost.tenants).
"""
