"""Configuration: TOML into frozen dataclasses, with every problem reported at once.

Where the file comes from: ``--config``, else ``$GPUWATCH_CONFIG``, else
``/etc/gpuwatch/gpuwatch.toml`` when it exists, else the built-in defaults (which work with no
file at all). Unknown keys are errors, like Alertmanager's strict YAML: a typo must not silently
turn a setting off. Secrets are never read from the TOML itself, only from environment variables
(``*_env`` keys) or files (``*_file`` keys), and only :class:`agent.config.secret.Secret` holds
them.
"""

from __future__ import annotations

import os
import socket
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError

from agent.config import teams, web
from agent.config.alerts import AlertsConfig, parse_alerts
from agent.config.budget import BudgetConfig as BudgetConfig
from agent.config.budget import parse_budget
from agent.config.cost import CostConfig as CostConfig
from agent.config.cost import parse_cost
from agent.config.digest import DigestConfig, parse_digest
from agent.config.energy import EnergyConfig, parse_energy
from agent.config.export import ExportConfig, parse_export
from agent.config.fleet import FleetConfig, parse_fleet
from agent.config.gateways import GatewayConfig, parse_gateways
from agent.config.kubernetes import KubernetesConfig, parse_kubernetes
from agent.config.listen import parse_listen
from agent.config.notify import AlertmanagerConfig as AlertmanagerConfig
from agent.config.notify import NotifyConfig, parse_notify
from agent.config.notify import SlackConfig as SlackConfig
from agent.config.notify import WebhookConfig as WebhookConfig
from agent.config.otlp import OtlpConfig, parse_otlp
from agent.config.rates import Rate, parse_rates
from agent.config.reader import Reader, shown
from agent.config.secret import Secret
from agent.config.slo import SloConfig, parse_slos
from agent.config.spool import SpoolConfig, parse_spool, state_directory
from agent.config.targets import MAX_TIMEOUT, TargetConfig, parse_targets
from agent.config.tenant_budgets import check_tenant_budgets
from collectors.billing.registry import PROVIDERS
from foundation.errors import GpuwatchError
from foundation.printable import printable
from foundation.redact import redact_url

DEFAULT_PATH = Path("/etc/gpuwatch/gpuwatch.toml")
DEFAULT_LISTEN = "127.0.0.1:9877"
# A configuration is a few kilobytes; a file past a mebibyte is something else (a log, a
# binary), and reading it whole would cost the daemon's memory before saying so.
MAX_FILE_BYTES = 1024 * 1024
MAX_PROBLEM_CHARS = 300
MAX_PROBLEMS_SHOWN = 100  # a file of 50,000 unknown keys says so in 101 lines, not 50,000
MIN_INTERVAL, MAX_INTERVAL = 1.0, 86400.0  # under 1 s floods the database; over a day is blind


class ConfigError(GpuwatchError):
    """The configuration has problems; ``problems`` lists each as 'key.path: what is wrong'."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = printable(source)
        # Key names and values come from the file: a problem shows them escaped and cut, so a
        # hostile file cannot drive the terminal or fill the journal.
        self.problems = [_one_line(p) for p in problems]
        if len(self.problems) == 1:
            super().__init__(f"{self.source}: {self.problems[0]}")
            return
        shown = [f"  {self.source}: {p}" for p in self.problems[:MAX_PROBLEMS_SHOWN]]
        if len(self.problems) > MAX_PROBLEMS_SHOWN:
            shown.append(f"  ... and {len(self.problems) - MAX_PROBLEMS_SHOWN} more")
        lines = "\n".join(shown)
        super().__init__(f"{len(problems)} problem(s) in {self.source}:\n{lines}")


def _one_line(problem: str) -> str:
    text = printable(problem)
    return text if len(text) <= MAX_PROBLEM_CHARS else text[: MAX_PROBLEM_CHARS - 1] + "…"


@dataclass(frozen=True, slots=True)
class DaemonConfig:
    interval_seconds: float = 10.0
    metrics_listen: str = DEFAULT_LISTEN  # "" disables the endpoint
    database_timeout_seconds: float | None = None  # None: derived from the interval
    # Where metrics_listen came from, for errors: the key, or $GPUWATCH_METRICS_LISTEN.
    metrics_listen_key: str = "daemon.metrics_listen"
    # The exporter-toolkit web config (TLS, basic auth) for /metrics; None: plain HTTP.
    web_config_file: str | None = None

    @property
    def database_timeout(self) -> float:
        """How long a tick waits for the database before it spools the round: half the
        interval (1 s to 30 s) unless set, so a hung database costs no tick."""
        if self.database_timeout_seconds is not None:
            return self.database_timeout_seconds
        return min(30.0, max(1.0, self.interval_seconds / 2))


@dataclass(frozen=True, slots=True)
class NvmlConfig:
    enabled: bool = True
    gpm_pipes: bool = False  # GPM's FP16/FP32/FP64 pipe gauges (off: near 0 for LLM serving)


@dataclass(frozen=True, slots=True)
class CollectorsConfig:
    nvml: NvmlConfig = field(default_factory=NvmlConfig)


@dataclass(frozen=True, slots=True)
class BillingProviderConfig:
    """One provider API to read spend and live rates from (``[billing.<provider>]``)."""

    provider: str  # runpod | lambda | vast
    api_key: Secret
    base_url: str | None = None  # the documented API unless set (tests, proxies)
    lookback_seconds: float = 2 * 86400  # how far back billed history is re-read each hour


@dataclass(frozen=True, slots=True)
class RetentionConfig:
    """How long each resolution is kept, in seconds: each default is what a reader needs."""

    # Raw samples feed the alert windows (minutes; the latency baseline reads hour rollups) and
    # the rollup, which catches up from them after a stop or a database outage (a day per
    # run): a week covers a long weekend's outage with days to spare.
    raw_seconds: float = 7 * 86400
    # Minute rollups and ledger rows answer only the partial hours of a window: edges off the
    # hour (ranges, budget windows ending at now's minute, months in zones such as +05:30 or
    # +05:45, whose midnight is no UTC hour) and the hour not yet rolled up. The oldest edge a
    # usual report has is the start of last month, asked at the end of this one: at most 62
    # days back (31 + 31). Older edges fall back to whole hours (the partial hour is left out).
    minute_seconds: float = 62 * 86400
    # Hour rows answer every whole hour: two years keep a month comparable with the same
    # month a year before, and a year with the year before it.
    hour_seconds: float = 730 * 86400


@dataclass(frozen=True, slots=True)
class Config:
    """The whole configuration; ``source`` names the file it came from, or 'built-in defaults'."""

    host: str
    database_url: str
    timezone: str = "UTC"
    daemon: DaemonConfig = field(default_factory=DaemonConfig)
    collectors: CollectorsConfig = field(default_factory=CollectorsConfig)
    targets: tuple[TargetConfig, ...] = ()
    gateways: tuple[GatewayConfig, ...] = ()  # [[gateways]]: who sent the tokens (tenants)
    rates: tuple[Rate, ...] = ()
    cost: CostConfig = field(default_factory=CostConfig)
    energy: EnergyConfig = field(default_factory=EnergyConfig)
    slos: tuple[SloConfig, ...] = ()  # [[slo]]: latency objectives per model (agent.config.slo)
    otlp: OtlpConfig = field(default_factory=OtlpConfig)  # the request spans' receiver
    retention: RetentionConfig = field(default_factory=RetentionConfig)
    billing: tuple[BillingProviderConfig, ...] = ()
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    labels: teams.Labels = field(default_factory=teams.Labels)  # team and project per target
    notify: NotifyConfig = field(default_factory=NotifyConfig)
    alerts: AlertsConfig = field(default_factory=AlertsConfig)
    digest: DigestConfig = field(default_factory=DigestConfig)
    fleet: FleetConfig = field(default_factory=FleetConfig)
    spool: SpoolConfig = field(default_factory=SpoolConfig)
    export: ExportConfig = field(default_factory=ExportConfig)
    kubernetes: KubernetesConfig = field(default_factory=KubernetesConfig)
    demo: bool = False  # the database is `gpuwatch demo`'s (a daemon refuses the other kind)
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
    return f"sqlite:///{state_directory(environ) / 'gpuwatch.db'}"


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
    return _build(read_toml(file, source), source, env)


def read_toml(file: Path, source: str) -> dict[str, Any]:
    """The file's TOML, or ConfigError with one line saying why it is none: missing,
    unreadable, too large, binary, not UTF-8, malformed or nested too deeply."""
    try:
        with file.open("rb") as fh:
            raw = fh.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise ConfigError(source, ["file not found"]) from None
    except OSError as exc:
        raise ConfigError(source, [f"cannot read: {exc.strerror or exc}"]) from None
    if len(raw) > MAX_FILE_BYTES:
        raise ConfigError(source, ["larger than 1 MiB: not a gpuwatch configuration"])
    if b"\0" in raw:
        where = raw.index(b"\0")
        raise ConfigError(source, [f"a binary file (a NUL byte at byte {where}), not TOML text"])
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        reason = f"not UTF-8 text ({exc.reason} at byte {exc.start}); TOML files are UTF-8"
        raise ConfigError(source, [reason]) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(source, [f"TOML syntax error: {exc}"]) from None
    except RecursionError:  # tomllib recurses once per level of nested arrays and tables
        raise ConfigError(source, ["arrays or tables nested too deeply"]) from None
    except ValueError:  # int() refuses integers of more than 4300 digits
        raise ConfigError(source, ["an integer too long to read (thousands of digits)"]) from None


def _build(data: dict[str, Any], source: str, env: Mapping[str, str]) -> Config:
    r = Reader(env)
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
            "gateways",
            "labels",
            "rates",
            "budget",
            "notify",
            "cost",
            "energy",
            "retention",
            "billing",
            "alerts",
            "digest",
            "fleet",
            "spool",
            "export",
            "kubernetes",
            "slo",
            "otlp",
            "demo",
        },
    )
    database_url = _database_url(r, top)
    config = Config(
        host=_host(r, top),
        database_url=database_url,
        timezone=_timezone(r, top),
        daemon=_daemon(r, top, Path(source).parent),
        collectors=_collectors(r, top),
        targets=parse_targets(r, top),
        rates=parse_rates(r, top),
        cost=parse_cost(r, top),
        # A CSV of hourly intensity is named relative to the file that names it.
        energy=parse_energy(r, top, Path(source).parent),
        slos=parse_slos(r, top),
        otlp=parse_otlp(r, top),
        retention=_retention(r, top),
        billing=_billing(r, top),
        notify=parse_notify(r, top),
        alerts=parse_alerts(r, top),
        digest=parse_digest(r, top),
        fleet=parse_fleet(r, top),
        spool=parse_spool(r, top, database_url),
        export=parse_export(r, top),
        kubernetes=parse_kubernetes(r, top),
        demo=r.boolean(top, "demo", False),
        source=source,
    )
    # Labels and team budgets last: they name the targets (and their problems follow theirs).
    # A target's own label is this host's: another box may run a target of the same name.
    own = (teams.Label(t.name, t.team, t.project, config.host) for t in config.targets)
    labels = teams.parse_labels(r, top, own)
    config = replace(config, labels=labels, budget=parse_budget(r, top, labels))
    config = replace(config, gateways=parse_gateways(r, top, (t.name for t in config.targets)))
    check_tenant_budgets(r, config.budget.tenants, len(config.gateways))
    if r.problems:
        raise ConfigError(source, r.problems)
    return config


def _database_url(r: Reader, top: dict[str, Any]) -> str:
    """The database's URL; a wrong one is a problem, and the default stands in for it so the
    rest of the file (the spool's place depends on it) is still checked."""
    # The environment wins so a password can stay out of the file (systemd EnvironmentFile).
    url: str | None
    if r.env.get("GPUWATCH_DATABASE_URL"):
        key, url, where = "GPUWATCH_DATABASE_URL", r.env["GPUWATCH_DATABASE_URL"], None
    else:
        from_file = r.secret(top, "database_url")
        key, where = "database_url", (from_file.source if from_file else None)
        url = from_file.reveal() if from_file else r.optional_string(top, "database_url")
    if url is None:
        return default_database_url(r.env)
    problem = _database_url_problem(url)
    if problem is None:
        return url
    # From a file the URL is a secret: only its scheme is shown; otherwise without credentials.
    got = f"from {where}" if where else f"got {shown(redact_url(url))}"
    r.problem(key, f"{problem}: expected sqlite:////path/to/gpuwatch.db or "
                   f"postgresql+psycopg://user@host/db, {got}")  # fmt: skip
    return default_database_url(r.env)


def _database_url_problem(url: str) -> str | None:
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):  # ValueError: a port that is no number
        return "not a URL"
    if not parsed.drivername.startswith(("sqlite", "postgresql")):
        return f"not a SQLite or PostgreSQL URL (scheme {parsed.drivername!r})"
    return None


def _host(r: Reader, top: dict[str, Any]) -> str:
    # The host is a label on every series and in every report: never empty, never a control.
    # $GPUWATCH_HOST wins: a Kubernetes DaemonSet shares one file between nodes and its pods'
    # hostnames are pod names, new at every restart, so it passes the node's name this way.
    key, host = "host", r.string(top, "host", socket.gethostname())
    if "GPUWATCH_HOST" in r.env:
        key, host = "GPUWATCH_HOST", r.env["GPUWATCH_HOST"]
    if not host.strip() or printable(host) != host:
        r.problem(key, f"expected a host name without control characters, got {shown(host)}")
        return socket.gethostname()
    return host


def _timezone(r: Reader, top: dict[str, Any]) -> str:
    name = r.string(top, "timezone", "UTC")
    try:
        ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):  # OSError: tzdata's "name too long"
        r.problem("timezone", f"unknown time zone {name!r} (use an IANA name like 'Europe/Madrid')")
        return "UTC"
    return name


def _daemon(r: Reader, top: dict[str, Any], base: Path) -> DaemonConfig:
    t = r.sub(top, "daemon", {"interval_seconds", "metrics_listen", "database_timeout",
                              "web_config_file"})  # fmt: skip
    # The environment wins, so a DaemonSet listens on its pod's IP: "$(POD_IP):9877".
    key = "GPUWATCH_METRICS_LISTEN" if r.env.get("GPUWATCH_METRICS_LISTEN") else None
    listen = r.env[key] if key else r.string(t, "daemon.metrics_listen", DEFAULT_LISTEN)
    key = key or "daemon.metrics_listen"
    if listen and parse_listen(listen) is None:
        r.problem(key, f"expected HOST:PORT like '127.0.0.1:9877', got {listen!r}")
    elif "$(" in listen:  # Kubernetes leaves $(VAR) as it is unless VAR is set above it
        r.problem(key, f"{listen!r} holds an unexpanded variable: define it (POD_IP from "
                       f"fieldRef status.podIP) before {key} in the pod's env")  # fmt: skip
    web_config = web.check_web_config_file(r, t, "daemon.web_config_file", base)
    interval = r.number(
        t, "daemon.interval_seconds", 10.0, positive=True,
        minimum=MIN_INTERVAL, maximum=MAX_INTERVAL, unit=" s",
    )  # fmt: skip
    return DaemonConfig(
        interval_seconds=interval,
        metrics_listen=listen,
        metrics_listen_key=key,
        web_config_file=web_config,
        database_timeout_seconds=(
            r.duration(t, "daemon.database_timeout", 0.0, maximum=MAX_TIMEOUT)
            if "daemon.database_timeout" in t
            else None
        ),
    )


def _collectors(r: Reader, top: dict[str, Any]) -> CollectorsConfig:
    t = r.sub(top, "collectors", {"nvml"})
    nvml = r.table(t.get("collectors.nvml", {}), "collectors.nvml", {"enabled", "gpm_pipes"})
    return CollectorsConfig(
        nvml=NvmlConfig(
            enabled=r.boolean(nvml, "collectors.nvml.enabled", True),
            gpm_pipes=r.boolean(nvml, "collectors.nvml.gpm_pipes", False),
        )
    )


def _billing(r: Reader, top: dict[str, Any]) -> tuple[BillingProviderConfig, ...]:
    t = r.sub(top, "billing", set(PROVIDERS))
    out: list[BillingProviderConfig] = []
    for name in sorted(PROVIDERS):
        if f"billing.{name}" not in t:
            continue
        path = f"billing.{name}"
        section = r.table(t[path], path, {"enabled", "api_key_env", "api_key_file", "base_url",
                                         "lookback"})  # fmt: skip
        if not r.boolean(section, f"{path}.enabled", True):
            continue
        if f"{path}.api_key_env" not in section and f"{path}.api_key_file" not in section:
            section[f"{path}.api_key_env"] = PROVIDERS[name].env_var  # the documented variable
        key = r.secret(section, f"{path}.api_key")
        base_url = r.http_url(section, f"{path}.base_url")
        lookback = r.duration(section, f"{path}.lookback", 2 * 86400)
        if key is not None:
            out.append(BillingProviderConfig(name, key, base_url, lookback))
    return tuple(out)


def _retention(r: Reader, top: dict[str, Any]) -> RetentionConfig:
    t = r.sub(top, "retention", {"raw", "per_minute", "per_hour"})
    d = RetentionConfig()
    return RetentionConfig(
        raw_seconds=r.duration(t, "retention.raw", d.raw_seconds),
        minute_seconds=r.duration(t, "retention.per_minute", d.minute_seconds),
        hour_seconds=r.duration(t, "retention.per_hour", d.hour_seconds),
    )
