"""``[[gateways]]``: a good one loads, and `check-config` names each mistake by its key path."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from agent.config.settings import ConfigError, load_config
from collectors.gateways.tenant_tokens import OUTPUT

GOOD = """
[[targets]]
name = "llama"
url = "http://127.0.0.1:8000/metrics"
[[gateways]]
name = "litellm"
url = "http://127.0.0.1:4000/metrics"
tenant = "team"
bearer_token_env = "LITELLM_MASTER_KEY"
timeout = "3s"
[gateways.models]
"meta-llama/Llama-3.1-8B-Instruct" = "llama-8b"
[[gateways]]
name = "kong"
url = "http://127.0.0.1:8100/metrics"
kind = "prometheus"
prompt_tokens_metric = "ai_prompt_tokens_total"
output_tokens_metric = "ai_completion_tokens_total"
tenant_label = "consumer"
model_label = "ai_model"
"""


def test_a_litellm_and_a_generic_gateway_load(tmp_path: Path) -> None:
    path = tmp_path / "g.toml"
    path.write_text(GOOD)
    config = load_config(str(path), {"LITELLM_MASTER_KEY": "sk-1"})
    litellm, kong = config.gateways
    assert litellm.mapping.tenant_labels == ("team_alias", "team")
    assert litellm.mapping.models == {"meta-llama/Llama-3.1-8B-Instruct": "llama-8b"}
    assert litellm.bearer_token is not None and litellm.timeout_seconds == 3.0
    assert kong.mapping.output == ("ai_completion_tokens_total",)
    assert kong.mapping.tenant_labels == ("consumer",) and kong.mapping.model_label == "ai_model"
    assert OUTPUT.startswith("gpuwatch_gateway_")


MISTAKES = [
    ('name = "llama"\nurl = "http://127.0.0.1:4000/metrics"', "gateways[0].name",
     "already the name of a target"),
    ('name = "g"', "gateways[0].url", "missing"),
    ('name = "g"\nurl = "ftp://x/metrics"', "gateways[0].url", "http"),
    ('name = "g"\nurl = "http://127.0.0.1:4000/metrics"\nkind = "kong"', "gateways[0].kind",
     "litellm | prometheus"),
    ('name = "g"\nurl = "http://127.0.0.1:4000/metrics"\ntenant = "org"', "gateways[0].tenant",
     "key | user | team | end_user"),
    ('name = "g"\nurl = "http://127.0.0.1:4000/metrics"\ntenant_label = "x"',
     "gateways[0].tenant_label", 'only for kind = "prometheus"'),
    ('name = "g"\nurl = "http://127.0.0.1:4000/metrics"\nkind = "prometheus"\n'
     'output_tokens_metric = "o_total"', "gateways[0].prompt_tokens_metric", "missing"),
    ('name = "g"\nurl = "http://127.0.0.1:4000/metrics"\nmodels = { a = 1 }',
     "gateways[0].models", "a table of model names"),
    ('name = "g"\nurl = "http://127.0.0.1:4000/metrics"\nbearer_token_env = "NOPE"',
     "gateways[0].bearer_token_env", "NOPE is not set"),
    ('name = "g"\nurl = "http://127.0.0.1:4000/metrics"\ntenants = "key"', "gateways[0].tenants",
     "unknown key"),
    ('name = "g"\nkind = "litellm_db"', "gateways[0].database_url_env", "missing"),
    ('name = "g"\nkind = "litellm_db"\nurl = "http://127.0.0.1:4000/metrics"\n'
     'database_url_env = "DB"', "gateways[0].url", 'not for kind = "litellm_db"'),
    ('name = "g"\nurl = "http://127.0.0.1:4000/metrics"\ndatabase_url_env = "DB"',
     "gateways[0].database_url_env", 'only for kind = "litellm_db"'),
    ('name = "g"\nurl = "http://127.0.0.1:4000/metrics"\n[[budget.tenants]]\nmonthly_usd = 5',
     "budget.tenants[0].tenant", "missing"),
    ('name = "g"\nurl = "http://127.0.0.1:4000/metrics"\n[[budget.tenants]]\ntenant = "a"',
     "budget.tenants[0].monthly_usd", "missing"),
    ('name = "g"\nurl = "http://127.0.0.1:4000/metrics"\n[[budget.tenants]]\ntenant = "a"\n'
     'monthly_usd = 1\n[[budget.tenants]]\ntenant = "a"\nmonthly_usd = 2',
     "budget.tenants[1].tenant", "two budgets"),
]  # fmt: skip


def test_a_tenant_budget_loads_and_needs_a_gateway(tmp_path: Path) -> None:
    path = tmp_path / "g.toml"
    path.write_text('[[budget.tenants]]\ntenant = "search-app"\nmonthly_usd = 300\n')
    with pytest.raises(ConfigError) as caught:
        load_config(str(path), {})
    assert caught.value.problems == [
        "budget.tenants: needs a [[gateways]] entry (tenants come from a gateway)"
    ]
    path.write_text(GOOD + '[[budget.tenants]]\ntenant = "search-app"\nmonthly_usd = 300\n')
    (budget,) = load_config(str(path), {"LITELLM_MASTER_KEY": "k"}).budget.tenants
    assert (budget.tenant, budget.monthly_usd) == ("search-app", Decimal(300))


@pytest.mark.parametrize(("body", "key", "says"), MISTAKES, ids=[m[1] for m in MISTAKES])
def test_each_mistake_is_named_by_its_key(tmp_path: Path, body: str, key: str, says: str) -> None:
    """What `check-config` lists (it prints ConfigError's problems, one per line)."""
    path = tmp_path / "g.toml"
    path.write_text('[[targets]]\nname = "llama"\nurl = "http://127.0.0.1:8000/metrics"\n'
                    f"[[gateways]]\n{body}\n")  # fmt: skip
    with pytest.raises(ConfigError) as caught:
        load_config(str(path), {"DB": "postgresql+psycopg://litellm@127.0.0.1/litellm"})
    (problem,) = [p for p in caught.value.problems if p.startswith(key + ":")]
    assert says in problem


def test_check_config_counts_the_gateways(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent.cli.main import main

    monkeypatch.setenv("LITELLM_MASTER_KEY", "sk-1")
    path = tmp_path / "g.toml"
    path.write_text(GOOD)
    assert main(["check-config", "--config", str(path)]) == 0
    assert "1 target(s), 2 gateway(s)," in capsys.readouterr().out
