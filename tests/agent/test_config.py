"""Config: defaults with no file, strict keys, every problem at once, secrets from env or files."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import pytest

from agent.cli.main import main
from agent.config.settings import ConfigError, load_config


def write(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "gpuwatch.toml"
    path.write_text(body)
    return path


def test_builtin_defaults_work_without_any_file() -> None:
    env = {"XDG_STATE_HOME": "/srv/state", "HOME": "/home/u"}
    config = load_config(None, env)
    assert config.source == "built-in defaults"
    assert config.daemon.interval_seconds == 10
    assert config.daemon.metrics_listen == "127.0.0.1:9877"
    assert config.collectors.nvml.enabled is True
    assert config.timezone == "UTC"
    assert config.database_url == "sqlite:////srv/state/gpuwatch/gpuwatch.db"
    assert config.host


def test_systemd_state_directory_wins_for_the_default_database() -> None:
    config = load_config(None, {"STATE_DIRECTORY": "/var/lib/gpuwatch", "XDG_STATE_HOME": "/x"})
    assert config.database_url == "sqlite:////var/lib/gpuwatch/gpuwatch.db"


def test_environment_database_url_wins_over_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, 'database_url = "sqlite:////tmp/file.db"\n')
    env = {"GPUWATCH_DATABASE_URL": "postgresql+psycopg://gw@db/gw"}
    assert load_config(str(path), env).database_url == "postgresql+psycopg://gw@db/gw"


def test_gpuwatch_config_variable_names_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, 'host = "box-7"\n')
    assert load_config(None, {"GPUWATCH_CONFIG": str(path)}).host == "box-7"


def test_the_documented_example_loads(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
host = "gpu-box-1"
database_url = "sqlite:////var/lib/gpuwatch/gpuwatch.db"
timezone = "Europe/Madrid"

[daemon]
interval_seconds = 10
metrics_listen = "127.0.0.1:9877"

[collectors.nvml]
enabled = true

[[targets]]
name = "llama-8b"
url = "http://127.0.0.1:8000/metrics"
engine = "auto"
bearer_token_env = "VLLM_API_KEY"

[[rates]]
gpu = "*"
usd_per_hour = 2.72

[budget]
monthly_usd = 5000

[notify.slack]
webhook_url_env = "GPUWATCH_SLACK_WEBHOOK"
[notify.alertmanager]
url = "http://127.0.0.1:9093"
""",
    )
    env = {"VLLM_API_KEY": "sk-vllm", "GPUWATCH_SLACK_WEBHOOK": "https://hooks.example/T/B/X"}
    config = load_config(str(path), env)
    assert config.host == "gpu-box-1"
    assert config.zone.key == "Europe/Madrid"
    (target,) = config.targets
    assert (target.name, target.engine, target.timeout_seconds) == ("llama-8b", "auto", 5.0)
    assert target.bearer_token is not None and target.bearer_token.reveal() == "sk-vllm"
    assert config.rates[0].usd_per_hour == Decimal("2.72")  # exact, not 2.7200000000000002
    assert config.budget.monthly_usd == Decimal("5000")
    assert config.notify.slack.webhook_url is not None
    assert config.notify.alertmanager.url == "http://127.0.0.1:9093"


def test_three_mistakes_are_all_reported_with_key_paths(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[daemon]
interval_secs = 10
metrics_listen = "localhost"

[[targets]]
name = "llama"
url = "http://127.0.0.1:8000/metrics"
engine = "vllmm"
""",
    )
    with pytest.raises(ConfigError) as info:
        load_config(str(path), {})
    problems = info.value.problems
    assert len(problems) == 3
    assert problems[0].startswith("daemon.interval_secs: unknown key")
    assert any(p.startswith("daemon.metrics_listen: expected HOST:PORT") for p in problems)
    assert any(p.startswith("targets[0].engine: unknown engine 'vllmm'") for p in problems)
    assert str(path) in str(info.value)


def test_wrong_types_and_values_name_the_key(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
timezone = "Mars/Olympus"
[daemon]
interval_seconds = -5
[collectors.nvml]
enabled = "yes"
[[rates]]
usd_per_hour = "cheap"
[budget]
monthly_usd = true
""",
    )
    with pytest.raises(ConfigError) as info:
        load_config(str(path), {})
    text = "\n".join(info.value.problems)
    assert "timezone: unknown time zone 'Mars/Olympus'" in text
    assert "daemon.interval_seconds: must be greater than 0" in text
    assert "collectors.nvml.enabled: expected true or false" in text
    assert "rates[0].usd_per_hour: expected an amount in USD" in text
    assert "budget.monthly_usd: expected an amount in USD, got a boolean" in text


def test_a_secret_in_the_toml_itself_is_refused(tmp_path: Path) -> None:
    path = write(
        tmp_path, '[notify.slack]\nwebhook_url = "https://hooks.slack.com/services/T/B/X"\n'
    )
    with pytest.raises(ConfigError) as info:
        load_config(str(path), {})
    (problem,) = info.value.problems
    assert problem.startswith("notify.slack.webhook_url: unknown key")
    assert "webhook_url_env" in problem
    assert "hooks.slack.com" not in str(info.value)  # the would-be secret is not echoed back


def test_secrets_come_from_env_or_files_and_never_show(tmp_path: Path) -> None:
    token_file = tmp_path / "slack-token"
    token_file.write_text("xoxb-from-file\n")
    path = write(
        tmp_path,
        f"""
[notify.slack]
token_file = "{token_file}"
channel = "#gpu"
webhook_url_env = "HOOK"
""",
    )
    config = load_config(str(path), {"HOOK": "https://hooks.example/secret-path"})
    slack = config.notify.slack
    assert slack.token is not None and slack.token.reveal() == "xoxb-from-file"
    assert "xoxb" not in repr(config) and "secret-path" not in repr(config)
    assert f"file {token_file}" in repr(slack.token)


def test_missing_secret_sources_are_problems(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[notify.slack]
webhook_url_env = "UNSET_HOOK"
token_file = "/nonexistent/token"
channel = "#gpu"
[[targets]]
name = "a"
url = "http://127.0.0.1:8000/metrics"
bearer_token_env = "T"
bearer_token_file = "/x"
""",
    )
    with pytest.raises(ConfigError) as info:
        load_config(str(path), {})
    text = "\n".join(info.value.problems)
    assert "notify.slack.webhook_url_env: environment variable UNSET_HOOK is not set" in text
    assert "notify.slack.token_file: cannot read /nonexistent/token" in text
    assert "targets[0].bearer_token: set either bearer_token_env or bearer_token_file" in text


def test_targets_need_unique_names_and_http_urls(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        """
[[targets]]
name = "a"
url = "http://127.0.0.1:8000/metrics"
timeout = "2s"
[[targets]]
name = "a"
url = "ftp://x"
[[targets]]
url = "http://127.0.0.1:9000/metrics"
timeout = "soon"
""",
    )
    with pytest.raises(ConfigError) as info:
        load_config(str(path), {})
    text = "\n".join(info.value.problems)
    assert "targets[1].name: duplicate target name 'a'" in text
    assert "targets[1].url: expected an http:// or https:// URL" in text
    assert "targets[2].name: missing" in text
    assert 'targets[2].timeout: expected a duration like "90s"' in text


EXPECTED_DURATION = (
    'expected a duration like "90s", "5m", "2h" or "1h30m"'
    " (integers, units ms s m h d w y, largest first)"
)


def test_retention_takes_prometheus_durations_or_seconds(tmp_path: Path) -> None:
    path = write(tmp_path, '[retention]\nraw = "1w2d"\nper_minute = 86400\nper_hour = "1y"\n')
    retention = load_config(str(path), {}).retention
    assert retention.raw_seconds == 9 * 86400
    assert retention.minute_seconds == 86400  # a bare TOML number is seconds
    assert retention.hour_seconds == 365 * 86400


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ('"1.5h"', f"{EXPECTED_DURATION}, got '1.5h'"),
        ('"5m5m"', f"{EXPECTED_DURATION}, got '5m5m'"),
        ('"1m1h"', f"{EXPECTED_DURATION}, got '1m1h'"),
        ('"5"', f"{EXPECTED_DURATION}, got '5'"),
        ('""', f"{EXPECTED_DURATION}, got ''"),
        ("true", f"{EXPECTED_DURATION}, got True"),
        ("nan", "expected a finite number of seconds, got nan"),
        ('"0s"', "must be longer than 0, got '0s'"),
        ("-5", "must be longer than 0, got -5"),
    ],
)
def test_a_bad_retention_duration_is_named_with_the_accepted_forms(
    tmp_path: Path, value: str, problem: str
) -> None:
    path = write(tmp_path, f"[retention]\nraw = {value}\n")
    with pytest.raises(ConfigError) as info:
        load_config(str(path), {})
    assert info.value.problems == [f"retention.raw: {problem}"]


def test_toml_syntax_error_names_the_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path, "[daemon\ninterval_seconds = 3\n")
    with pytest.raises(ConfigError, match=r"TOML syntax error: .*line 1"):
        load_config(str(path), {})


def test_explicit_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="file not found"):
        load_config(str(tmp_path / "nope.toml"), {})


def test_check_config_lists_all_three_mistakes_and_exits_non_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(
        tmp_path,
        """
host = 42
[daemon]
interval = 5
[collectors.nvml]
enable = false
""",
    )
    assert main(["check-config", "--config", str(path)]) != 0
    err = capsys.readouterr().err
    assert "3 problem(s)" in err
    for key in (
        "host: expected a string",
        "daemon.interval: unknown key",
        "collectors.nvml.enable: unknown key",
    ):
        assert f"{path}: {key}" in err


def test_check_config_accepts_a_good_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, 'host = "box"\n[daemon]\ninterval_seconds = 5\n')
    assert main(["check-config", "--config", str(path)]) == 0
    assert "OK (host box, every 5s" in capsys.readouterr().out
