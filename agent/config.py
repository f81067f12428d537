"""Configuration: TOML into frozen dataclasses, with every problem reported at once.

Where the file comes from: ``--config``, else ``$GPUWATCH_CONFIG``, else
``/etc/gpuwatch/gpuwatch.toml`` when it exists, else the built-in defaults (which work with no
file at all). Unknown keys are errors, like Alertmanager's strict YAML: a typo must not silently
turn a setting off. Secrets are never read from the TOML itself, only from environment variables
(``*_env`` keys) or files (``*_file`` keys), and only :class:`agent.secret.Secret` holds them.
"""

from __future__ import annotations

import os
import socket
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from agent.duration import DurationError, parse_duration
from agent.secret import Secret
from collectors.base import GpuwatchError

DEFAULT_PATH = Path("/etc/gpuwatch/gpuwatch.toml")
DEFAULT_LISTEN = "127.0.0.1:9877"
DEFAULT_MAX_RESPONSE_BYTES = 10 * 1024 * 1024
ENGINES = ("auto", "vllm", "sglang", "tgi", "llamacpp", "dcgm")


class ConfigError(GpuwatchError):
    """The configuration has problems; ``problems`` lists each as 'key.path: what is wrong'."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        lines = "\n".join(f"  {source}: {p}" for p in problems)
        super().__init__(f"{len(problems)} problem(s) in {source}:\n{lines}")


@dataclass(frozen=True, slots=True)
class DaemonConfig:
    interval_seconds: float = 10.0
    metrics_listen: str = DEFAULT_LISTEN  # "" disables the endpoint


@dataclass(frozen=True, slots=True)
class NvmlConfig:
    enabled: bool = True


@dataclass(frozen=True, slots=True)
class CollectorsConfig:
    nvml: NvmlConfig = field(default_factory=NvmlConfig)


@dataclass(frozen=True, slots=True)
class TargetConfig:
    name: str
    url: str
    engine: str = "auto"
    bearer_token: Secret | None = None
    timeout_seconds: float = 5.0
    model: str | None = None  # names the model for engines that do not label it (TGI, llama.cpp)
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES


@dataclass(frozen=True, slots=True)
class RateConfig:
    usd_per_hour: Decimal
    gpu: str = "*"


@dataclass(frozen=True, slots=True)
class BudgetConfig:
    monthly_usd: Decimal | None = None


@dataclass(frozen=True, slots=True)
class SlackConfig:
    webhook_url: Secret | None = None
    token: Secret | None = None
    channel: str | None = None


@dataclass(frozen=True, slots=True)
class AlertmanagerConfig:
    url: str | None = None


@dataclass(frozen=True, slots=True)
class NotifyConfig:
    slack: SlackConfig = field(default_factory=SlackConfig)
    alertmanager: AlertmanagerConfig = field(default_factory=AlertmanagerConfig)


@dataclass(frozen=True, slots=True)
class Config:
    """The whole configuration; ``source`` names the file it came from, or 'built-in defaults'."""

    host: str
    database_url: str
    timezone: str = "UTC"
    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    collectors: CollectorsConfig = field(default_factory=CollectorsConfig)
    targets: tuple[TargetConfig, ...] = ()
    rates: tuple[RateConfig, ...] = ()
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    notify: NotifyConfig = field(default_factory=NotifyConfig)
    source: str = "built-in defaults"

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)


def config_path(explicit: str | None, environ: Mapping[str, str]) -> Path | None:
    """Which file to read: explicit, then $GPUWATCH_CONFIG, then the default if it exists."""
    if explicit:
        return Path(explicit)
    if environ.get("GPUWATCH_CONFIG"):
        return Path(environ["GPUWATCH_CONFIG"])
    return DEFAULT_PATH if DEFAULT_PATH.exists() else None


def default_database_url(environ: Mapping[str, str]) -> str:
    """SQLite under the state directory: systemd's $STATE_DIRECTORY, else XDG's."""
    if environ.get("STATE_DIRECTORY"):
        # systemd may pass several colon-separated folders; the first is ours.
        folder = Path(environ["STATE_DIRECTORY"].split(":")[0])
    elif environ.get("XDG_STATE_HOME"):
        folder = Path(environ["XDG_STATE_HOME"]) / "gpuwatch"
    else:
        folder = Path(environ.get("HOME", "/var/lib")) / ".local" / "state" / "gpuwatch"
    return f"sqlite:///{folder / 'gpuwatch.db'}"


def load_config(path: str | None = None, environ: Mapping[str, str] | None = None) -> Config:
    """Read, validate and resolve the configuration.

    Raises:
        ConfigError: listing every problem found, each with its key path.
    """
    env = os.environ if environ is None else environ
    file = config_path(path, env)
    if file is None:
        return _build({}, "built-in defaults", env)
    source = str(file)
    try:
        with file.open("rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise ConfigError(source, ["file not found"]) from None
    except OSError as exc:
        raise ConfigError(source, [f"cannot read: {exc.strerror}"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(source, [f"TOML syntax error: {exc}"]) from None
    return _build(data, source, env)


def _build(data: dict[str, Any], source: str, env: Mapping[str, str]) -> Config:
    r = _Reader(env)
    top = r.table(
        data,
        "",
        {
            "host",
            "database_url",
            "database_url_file",
            "timezone",
            "daemon",
            "collectors",
            "targets",
            "rates",
            "budget",
            "notify",
        },
    )
    config = Config(
        host=r.string(top, "host", socket.gethostname()),
        database_url=_database_url(r, top),
        timezone=_timezone(r, top),
        daemon=_daemon(r, top),
        collectors=_collectors(r, top),
        targets=_targets(r, top),
        rates=_rates(r, top),
        budget=_budget(r, top),
        notify=_notify(r, top),
        source=source,
    )
    if r.problems:
        raise ConfigError(source, r.problems)
    return config


class _Reader:
    """Typed access to TOML tables that records problems instead of stopping at the first."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = env
        self.problems: list[str] = []

    def problem(self, path: str, message: str) -> None:
        self.problems.append(f"{path}: {message}")

    def table(self, value: Any, path: str, allowed: set[str]) -> dict[str, Any]:
        """``value`` as a table whose keys are all in ``allowed``; keys carry their full path."""
        if not isinstance(value, dict):
            self.problem(path, f"expected a table, got {_kind(value)}")
            return {}
        prefix = f"{path}." if path else ""
        for key in sorted(set(value) - allowed):
            self.problem(prefix + key, f"unknown key (allowed here: {', '.join(sorted(allowed))})")
        return {prefix + k: v for k, v in value.items() if k in allowed}

    def sub(self, table: dict[str, Any], key: str, allowed: set[str]) -> dict[str, Any]:
        value = table.get(key, {})
        return self.table(value, key, allowed)

    def _get(self, table: dict[str, Any], key: str, types: tuple[type, ...], what: str) -> Any:
        value = table.get(key)
        if value is None:
            return None
        # bool is an int in Python; TOML's true must not pass as a number.
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            self.problem(key, f"expected {what}, got {_kind(value)} {value!r}")
            return None
        return value

    def string(self, table: dict[str, Any], key: str, default: str) -> str:
        value = self._get(table, key, (str,), "a string")
        return default if value is None else value

    def optional_string(self, table: dict[str, Any], key: str) -> str | None:
        value = self._get(table, key, (str,), "a string")
        return value if isinstance(value, str) else None

    def boolean(self, table: dict[str, Any], key: str, default: bool) -> bool:
        value = self._get(table, key, (bool,), "true or false")
        return default if value is None else value

    def number(self, table: dict[str, Any], key: str, default: float, *, positive: bool) -> float:
        value = self._get(table, key, (int, float), "a number")
        if value is None:
            return default
        if positive and value <= 0:
            self.problem(key, f"must be greater than 0, got {value}")
            return default
        return float(value)

    def money(self, table: dict[str, Any], key: str) -> Decimal | None:
        # Floats from TOML go through str() so 2.72 becomes Decimal("2.72"), not 2.7200000000000002.
        value = self._get(table, key, (int, float, str), "an amount in USD")
        if value is None:
            return None
        try:
            amount = Decimal(str(value))
        except InvalidOperation:
            self.problem(key, f"expected an amount in USD, got {value!r}")
            return None
        if not amount.is_finite() or amount < 0:
            self.problem(key, f"must be a finite amount of at least 0, got {value!r}")
            return None
        return amount

    def duration(self, table: dict[str, Any], key: str, default: float) -> float:
        value = self._get(table, key, (str, int, float), 'a duration like "5s" or "2m"')
        if value is None:
            return default
        try:
            seconds = parse_duration(value)
        except DurationError as exc:
            self.problem(key, str(exc))
            return default
        if seconds <= 0:
            self.problem(key, f"must be longer than 0, got {value!r}")
            return default
        return seconds

    def secret(self, table: dict[str, Any], key: str) -> Secret | None:
        """``<key>_env`` names an environment variable, ``<key>_file`` a file; at most one."""
        env_key, file_key = f"{key}_env", f"{key}_file"
        var = self.optional_string(table, env_key)
        file = self.optional_string(table, file_key)
        if var is not None and file is not None:
            self.problem(key, f"set either {_leaf(env_key)} or {_leaf(file_key)}, not both")
            return None
        if var is not None:
            if not self.env.get(var):
                self.problem(env_key, f"environment variable {var} is not set or empty")
                return None
            return Secret(self.env[var], f"environment variable {var}")
        if file is not None:
            return self._secret_file(file_key, file)
        return None

    def _secret_file(self, key: str, file: str) -> Secret | None:
        try:
            value = Path(file).read_text(encoding="utf-8").strip()
        except OSError as exc:
            self.problem(key, f"cannot read {file}: {exc.strerror}")
            return None
        if not value:
            self.problem(key, f"{file} is empty")
            return None
        return Secret(value, f"file {file}")


def _kind(value: Any) -> str:
    names = {
        bool: "a boolean",
        int: "an integer",
        float: "a number",
        str: "a string",
        list: "an array",
        dict: "a table",
    }
    return names.get(type(value), type(value).__name__)


def _leaf(path: str) -> str:
    return path.rsplit(".", 1)[-1]


def _database_url(r: _Reader, top: dict[str, Any]) -> str:
    # The environment wins so a password can stay out of the file (systemd EnvironmentFile).
    if r.env.get("GPUWATCH_DATABASE_URL"):
        return r.env["GPUWATCH_DATABASE_URL"]
    from_file = r.secret(top, "database_url")
    url = from_file.reveal() if from_file else r.optional_string(top, "database_url")
    if url is None:
        return default_database_url(r.env)
    scheme = url.split(":", 1)[0]
    if not scheme.startswith(("sqlite", "postgresql")):
        r.problem(
            "database_url",
            f"expected a sqlite:/// or postgresql+psycopg:// URL, got {scheme}://...",
        )
    return url


def _timezone(r: _Reader, top: dict[str, Any]) -> str:
    name = r.string(top, "timezone", "UTC")
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        r.problem("timezone", f"unknown time zone {name!r} (use an IANA name like 'Europe/Madrid')")
        return "UTC"
    return name


def _daemon(r: _Reader, top: dict[str, Any]) -> DaemonConfig:
    t = r.sub(top, "daemon", {"interval_seconds", "metrics_listen"})
    listen = r.string(t, "daemon.metrics_listen", DEFAULT_LISTEN)
    if listen and parse_listen(listen) is None:
        r.problem(
            "daemon.metrics_listen", f"expected HOST:PORT like '127.0.0.1:9877', got {listen!r}"
        )
    return DaemonConfig(
        interval_seconds=r.number(t, "daemon.interval_seconds", 10.0, positive=True),
        metrics_listen=listen,
    )


def parse_listen(listen: str) -> tuple[str, int] | None:
    """'HOST:PORT' (IPv6 as '[::1]:9877') into (host, port), or None when malformed."""
    host, sep, port = listen.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        return None
    return host.strip("[]"), int(port)


def _collectors(r: _Reader, top: dict[str, Any]) -> CollectorsConfig:
    t = r.sub(top, "collectors", {"nvml"})
    nvml = r.table(t.get("collectors.nvml", {}), "collectors.nvml", {"enabled"})
    return CollectorsConfig(
        nvml=NvmlConfig(enabled=r.boolean(nvml, "collectors.nvml.enabled", True))
    )


def _array(r: _Reader, top: dict[str, Any], key: str) -> list[Any]:
    value = top.get(key, [])
    if not isinstance(value, list):
        r.problem(key, f"expected an array of tables ([[{key}]]), got {_kind(value)}")
        return []
    return value


def _targets(r: _Reader, top: dict[str, Any]) -> tuple[TargetConfig, ...]:
    out: list[TargetConfig] = []
    names: set[str] = set()
    allowed = {"name", "url", "engine", "model", "bearer_token_env", "bearer_token_file",
               "timeout", "max_response_bytes"}  # fmt: skip
    for i, item in enumerate(_array(r, top, "targets")):
        path = f"targets[{i}]"
        t = r.table(item, path, allowed)
        name = r.optional_string(t, f"{path}.name")
        url = r.optional_string(t, f"{path}.url")
        engine = r.string(t, f"{path}.engine", "auto")
        if name is None:
            r.problem(f"{path}.name", "missing (every target needs a unique name)")
        elif name in names:
            r.problem(f"{path}.name", f"duplicate target name {name!r}")
        if url is None:
            r.problem(f"{path}.url", "missing (the engine's /metrics URL)")
        elif urlsplit(url).scheme not in ("http", "https") or not urlsplit(url).netloc:
            r.problem(f"{path}.url", f"expected an http:// or https:// URL, got {url!r}")
        if engine not in ENGINES:
            r.problem(f"{path}.engine", f"unknown engine {engine!r} (one of {', '.join(ENGINES)})")
        token = r.secret(t, f"{path}.bearer_token")
        timeout = r.duration(t, f"{path}.timeout", 5.0)
        model = r.optional_string(t, f"{path}.model")
        cap = r.number(t, f"{path}.max_response_bytes", DEFAULT_MAX_RESPONSE_BYTES, positive=True)
        if name is not None and url is not None:
            names.add(name)
            out.append(TargetConfig(name, url, engine, token, timeout, model, int(cap)))
    return tuple(out)


def _rates(r: _Reader, top: dict[str, Any]) -> tuple[RateConfig, ...]:
    out: list[RateConfig] = []
    for i, item in enumerate(_array(r, top, "rates")):
        path = f"rates[{i}]"
        t = r.table(item, path, {"gpu", "usd_per_hour"})
        price = r.money(t, f"{path}.usd_per_hour")
        if price is None and f"{path}.usd_per_hour" not in t:
            r.problem(f"{path}.usd_per_hour", "missing (the price of the GPU per hour)")
        if price is not None:
            out.append(RateConfig(usd_per_hour=price, gpu=r.string(t, f"{path}.gpu", "*")))
    return tuple(out)


def _budget(r: _Reader, top: dict[str, Any]) -> BudgetConfig:
    t = r.sub(top, "budget", {"monthly_usd"})
    return BudgetConfig(monthly_usd=r.money(t, "budget.monthly_usd"))


def _notify(r: _Reader, top: dict[str, Any]) -> NotifyConfig:
    t = r.sub(top, "notify", {"slack", "alertmanager"})
    slack = r.table(
        t.get("notify.slack", {}),
        "notify.slack",
        {"webhook_url_env", "webhook_url_file", "token_env", "token_file", "channel"},
    )
    am = r.table(t.get("notify.alertmanager", {}), "notify.alertmanager", {"url"})
    token = r.secret(slack, "notify.slack.token")
    channel = r.optional_string(slack, "notify.slack.channel")
    if token is not None and channel is None:
        r.problem(
            "notify.slack.channel", "missing (chat.postMessage with token_env needs a channel)"
        )
    return NotifyConfig(
        slack=SlackConfig(
            webhook_url=r.secret(slack, "notify.slack.webhook_url"), token=token, channel=channel
        ),
        alertmanager=AlertmanagerConfig(url=r.optional_string(am, "notify.alertmanager.url")),
    )
