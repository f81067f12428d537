"""Bad input, configuration: every hostile or mistaken file is refused offline with exit 2 and a
reason that names the file, the key and the problem, shows no credential, and leaves the
database already there untouched (docs/faults.md, "Bad input: configuration, URLs and label
text")."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from agent.cli.main import main
from agent.config.settings import ConfigError, load_config

SECRET = "hunter2SECRET"


@dataclass(frozen=True)
class Case:
    kind: str
    body: bytes
    key: str  # what the reason must name besides the file ("" for the file as a whole)
    says: tuple[str, ...]  # and what it must say about it
    env: dict[str, str] = field(default_factory=dict)


def toml(kind: str, text: str, key: str, *says: str, **env: str) -> Case:
    return Case(kind, text.encode(), key, says, env)


CASES = [
    toml("interval NaN", "[daemon]\ninterval_seconds = nan\n", "daemon.interval_seconds",
         "expected a finite number, got nan"),
    toml("interval infinite", "[daemon]\ninterval_seconds = inf\n", "daemon.interval_seconds",
         "expected a finite number, got inf"),
    toml("interval under a second", "[daemon]\ninterval_seconds = 0.001\n",
         "daemon.interval_seconds", "from 1 s to 86400 s", "got 0.001"),
    toml("interval over a day", "[daemon]\ninterval_seconds = 1e9\n", "daemon.interval_seconds",
         "from 1 s to 86400 s"),
    toml("interval a 400-digit integer", f"[daemon]\ninterval_seconds = {'9' * 400}\n",
         "daemon.interval_seconds", "from 1 s to 86400 s", "…"),
    toml("duration past 292 years", '[retention]\nraw = "99999999999999999999d"\n',
         "retention.raw", "at most 292y"),
    toml("duration as seconds past a century", "[retention]\nraw = 1e300\n", "retention.raw",
         "at most 100y"),
    toml("duration as a 400-digit integer", f"[retention]\nraw = {'9' * 400}\n",
         "retention.raw", "at most 100y", "…"),
    toml("timeout longer than an hour", '[[targets]]\nname = "a"\n'
         'url = "http://127.0.0.1:1/metrics"\ntimeout = "2d"\n', "targets[0].timeout",
         "at most 1h"),
    toml("spool size NaN", "[spool]\nmax_bytes = nan\n", "spool.max_bytes",
         "expected a finite number"),
    toml("ratio written as a percent", "[alerts.rules.GpuIdle]\nutilization_below = 3\n",
         "alerts.rules.GpuIdle.utilization_below", "a ratio from 0 to 1",
         "did you mean 0.03?"),
    toml("KV ratio written as a percent", "[alerts.rules.KvCacheSaturated]\nabove = 95\n",
         "alerts.rules.KvCacheSaturated.above", "did you mean 0.95?"),
    toml("budget fraction written as a percent",
         "[alerts.rules.BudgetThreshold]\nfirst_fraction = 50\n",
         "alerts.rules.BudgetThreshold.first_fraction", "did you mean 0.5?"),
    toml("temperature below absolute zero", "[alerts.rules.GpuHot]\ncelsius_above = -400\n",
         "alerts.rules.GpuHot.celsius_above", "a temperature from 0 to 150"),
    toml("temperature in Fahrenheit", "[alerts.rules.GpuHot]\ncelsius_above = 185\n",
         "alerts.rules.GpuHot.celsius_above", "is that Fahrenheit? 185 F is 85 C"),
    toml("threshold NaN", "[alerts.rules.LatencyP99Spike]\nttft_seconds = nan\n",
         "alerts.rules.LatencyP99Spike.ttft_seconds", "expected a finite number"),
    toml("price of 1e999 USD", '[[rates]]\nusd_per_hour = "1e999"\n', "rates[0].usd_per_hour",
         "must be at most 1,000,000 USD"),
    toml("budget of 1e999 USD", '[budget]\nmonthly_usd = "1e999"\n', "budget.monthly_usd",
         "must be at most 1,000,000,000 USD"),
    toml("response cap out of range", '[[targets]]\nname = "a"\n'
         'url = "http://127.0.0.1:1/metrics"\nmax_response_bytes = 1e15\n',
         "targets[0].max_response_bytes", "from 1024 bytes to 2.14748e+09 bytes"),
    toml("database URL that is not a URL", 'database_url = "not a url"\n', "database_url",
         "not a URL", "got 'not a url'"),
    toml("database URL of another database, with a password",
         f'database_url = "mysql://gw:{SECRET}@db/gw?password={SECRET}"\n', "database_url",
         "not a SQLite or PostgreSQL URL", "mysql://gw:***@db/gw?password=***"),
    toml("database URL from the environment, malformed", "", "GPUWATCH_DATABASE_URL",
         "not a URL", GPUWATCH_DATABASE_URL=f"postgresql://gw:{SECRET}@db:port/gw"),
    toml("target URL that is not a URL", '[[targets]]\nname = "a"\nurl = "not a url"\n',
         "targets[0].url", "not a URL: expected an http:// or https:// URL"),
    toml("target URL with credentials and a wrong scheme",
         f'[[targets]]\nname = "a"\nurl = "ftp://u:{SECRET}@h/m?token={SECRET}"\n',
         "targets[0].url", "expected an http:// or https:// URL", "ftp://u:***@h/m?token=***"),
    toml("target URL with a port out of range",
         '[[targets]]\nname = "a"\nurl = "http://127.0.0.1:99999/metrics"\n', "targets[0].url",
         "not a URL (a bad port or address)"),
    toml("Alertmanager URL without a scheme", '[notify.alertmanager]\nurl = "am.local"\n',
         "notify.alertmanager.url", "not a URL"),
    toml("webhook URL from the environment, malformed",
         '[notify.webhook]\nurl_env = "HOOK"\n', "notify.webhook.url",
         "not a URL", "(from environment variable HOOK)", HOOK=f"hooks.example/{SECRET}"),
    toml("billing base URL that is not a URL",
         '[billing.runpod]\napi_key_env = "KEY"\nbase_url = "runpod"\n',
         "billing.runpod.base_url", "not a URL", KEY=SECRET),
    toml("secret file name with a NUL", 'database_url_file = "a\\u0000b"\n',
         "database_url_file", "cannot hold a NUL character"),
    toml("secret file that never ends (/dev/zero)", '[[targets]]\nname = "a"\n'
         'url = "http://h/m"\nbearer_token_file = "/dev/zero"\n',
         "targets[0].bearer_token_file", "/dev/zero is larger than 64 KiB"),
    toml("secret file that is not UTF-8", '[notify.slack]\nwebhook_url_file = "SECRETFILE"\n',
         "notify.slack.webhook_url_file", "is not UTF-8 text (invalid start byte at byte 4)"),
    toml("spool path with a NUL", '[spool]\npath = "a\\u0000b"\n', "spool.path",
         "cannot hold a NUL character"),
    toml("empty host name", 'host = ""\n', "host", "expected a host name"),
    toml("host name with a control character", 'host = "box\\u001b[2J"\n', "host",
         "without control characters", "box\\x1b[2J"),
    toml("target name with a NUL", '[[targets]]\nname = "a\\u0000b"\nurl = "http://h/m"\n',
         "targets[0].name", "without control characters", "a\\x00b"),
    toml("key name with a bidi override", '"\\u202eytreporp" = 1\n', "\\u202eytreporp",
         "unknown key"),
    toml("a huge value quoted", f'timezone = "{"x" * 100_000}"\n', "timezone",
         "unknown time zone"),
    toml("2,000 targets", '[[targets]]\nname = "a"\nurl = "http://h/m"\n' * 2000,
         "targets", "at most 1000 targets per host, got 2000"),
    Case("not UTF-8", b'host = "\xff\xfe"\n', "", ("not UTF-8 text", "at byte 8")),
    Case("binary file", b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)), "",
         ("a binary file (a NUL byte at byte 7)",)),
    Case("a file over 1 MiB", b"# " + b"x" * (1024 * 1024) + b"\n", "",
         ("larger than 1 MiB",)),
    Case("nested 100,000 levels deep", b"a = " + b"[" * 100_000 + b"]" * 100_000 + b"\n", "",
         ("nested too deeply",)),
    Case("an integer of 5000 digits", b"host = " + b"9" * 5000 + b"\n", "",
         ("an integer too long to read",)),
    Case("TOML syntax error", b"[daemon\ninterval_seconds = 10\n", "", ("TOML syntax error",)),
]  # fmt: skip


@pytest.fixture
def stored_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The default SQLite database, already created: a bad configuration must not touch it."""
    for name in ("GPUWATCH_CONFIG", "GPUWATCH_DATABASE_URL", "STATE_DIRECTORY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    assert main(["db", "upgrade"]) == 0
    database = tmp_path / "state" / "gpuwatch" / "gpuwatch.db"
    assert database.exists()
    return database


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("case", CASES, ids=[c.kind for c in CASES])
def test_bad_configuration_is_refused_with_its_key_and_exit_2(
    case: Case,
    tmp_path: Path,
    stored_database: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in case.env.items():
        monkeypatch.setenv(name, value)
    secret_file = tmp_path / "secret"
    secret_file.write_bytes(b"http\xff" + SECRET.encode())
    path = tmp_path / "gpuwatch.toml"
    path.write_bytes(case.body.replace(b"SECRETFILE", str(secret_file).encode()))
    before = digest(stored_database)
    capsys.readouterr()

    for command in (["check-config"], ["collect", "--once"], ["run"]):
        assert main([*command, "--config", str(path)]) == 2, command
        out, err = capsys.readouterr()
        assert out == ""
        # One line naming the file, the key and the problem; no traceback, no credential.
        assert err.startswith(f"gpuwatch: {path}: {case.key}"), err
        assert err.count("\n") == 1, err
        assert all(words in err for words in case.says), err
        assert SECRET not in err and "Traceback" not in err
        assert len(err) < 500
        assert err.isprintable() or err[:-1].isprintable()
    assert digest(stored_database) == before


def test_check_config_lists_every_problem_in_one_pass(tmp_path: Path) -> None:
    path = tmp_path / "gpuwatch.toml"
    path.write_text(
        """
database_url = "not a url"
[daemon]
interval_seconds = nan
[retention]
raw = 1e300
[[rates]]
usd_per_hour = -1
usd_per_minute = 2
[alerts.rules.GpuIdle]
utilization_below = 3
[alerts.rules.GpuHot]
celsius_above = -400
[[targets]]
name = "a"
url = "not a url"
"""
    )
    with pytest.raises(ConfigError) as info:
        load_config(str(path), {})
    keys = sorted(problem.split(":", 1)[0] for problem in info.value.problems)
    assert keys == [
        "alerts.rules.GpuHot.celsius_above",
        "alerts.rules.GpuIdle.utilization_below",
        "daemon.interval_seconds",
        "database_url",
        "rates[0]",  # more than one price, said beside the negative one
        "rates[0].usd_per_hour",
        "retention.raw",
        "targets[0].url",
    ]
    assert str(info.value).startswith(f"8 problem(s) in {path}:\n")


def test_a_directory_instead_of_a_file_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["check-config", "--config", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err == f"gpuwatch: {tmp_path}: cannot read: Is a directory\n"


def test_sane_values_at_the_edges_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "gpuwatch.toml"
    path.write_text(
        """
[daemon]
interval_seconds = 1
[retention]
raw = "100y"
[alerts.rules.GpuIdle]
utilization_below = 1
[alerts.rules.GpuHot]
celsius_above = 0
[alerts.rules.BudgetThreshold]
critical_fraction = 1.2
[[targets]]
name = "a"
url = "https://u:p@[::1]:8443/metrics?x=1"
max_response_bytes = 1024
"""
    )
    config = load_config(str(path), {"XDG_STATE_HOME": str(tmp_path)})
    assert config.daemon.interval_seconds == 1
    assert config.retention.raw_seconds == 100 * 365 * 86400
    assert config.alerts.rules["BudgetThreshold"].thresholds["critical_fraction"] == 1.2


def test_fifty_thousand_unknown_keys_are_counted_not_all_listed(tmp_path: Path) -> None:
    path = tmp_path / "gpuwatch.toml"
    path.write_text("".join(f"key{i} = 1\n" for i in range(50_000)))
    with pytest.raises(ConfigError) as info:
        load_config(str(path), {})
    text = str(info.value)
    assert text.startswith(f"50000 problem(s) in {path}:\n")
    assert text.endswith("  ... and 49900 more") and text.count("\n") == 101
