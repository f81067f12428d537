"""The demo's folder and its configuration files, written as TOML and read by the real loader.

Everything the demo makes lives in one folder (default: ``demo/`` under gpuwatch's state
directory): the database ``demo.db``, marked as a demo (agent.storage.demo_mark) so neither
kind of database can be used as the other; one configuration per host (``<host>.toml``) that
the CLI takes with ``--config`` to look at the demo; the fake NVML library and its hardware
files; the HTML report and the digest preview. The history's configuration says its tick:
``daemon.interval_seconds`` is the history's simulated interval, so the rollup meters each
interval as long as it really was.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from agent.config.settings import Config, load_config
from agent.config.spool import state_directory
from agent.demo.scenario import (
    H100_PRICE,
    H100_PRICE_LATER,
    HOSTS,
    L40S_PRICE,
    DemoHost,
    Month,
    price_change_at,
)

MONTHLY_BUDGET_USD = 10_000
# Variables that would send the demo's configuration elsewhere: the demo's files decide.
_IGNORED_ENV = ("GPUWATCH_DATABASE_URL", "GPUWATCH_CONFIG")


def default_folder(environ: Mapping[str, str] | None = None) -> Path:
    return state_directory(os.environ if environ is None else environ) / "demo"


@dataclass(frozen=True, slots=True)
class DemoFiles:
    folder: Path

    @property
    def database(self) -> Path:
        return self.folder / "demo.db"

    @property
    def database_url(self) -> str:
        return f"sqlite:///{self.database}"

    @property
    def fakenvml(self) -> Path:
        return self.folder / "fakenvml"

    def hardware(self, host: DemoHost) -> Path:
        return self.fakenvml / f"{host.name}.hardware"

    def config(self, host: DemoHost, *, live: bool = False) -> Path:
        """The history's configuration of ``host`` (what the CLI looks at the demo with), or
        the live daemon's (its engines' URLs, its /metrics, its 10 s tick)."""
        return self.folder / f"{host.name}{'-live' if live else ''}.toml"

    @property
    def html_report(self) -> Path:
        return self.folder / "report.html"

    @property
    def digest(self) -> Path:
        return self.folder / "digest.json"


def write_config(
    files: DemoFiles,
    host: DemoHost,
    month: Month,
    *,
    interval_seconds: float,
    metrics_listen: str = "",
    urls: Mapping[str, str] | None = None,
) -> Config:
    """Write ``host``'s configuration (the live one when ``urls`` are given) and return it as
    the real loader reads it."""
    live = urls is not None
    path = files.config(host, live=live)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.write_text(render(files, host, month, interval_seconds, metrics_listen, urls or {}))
    return read_config(files, host, live=live)


def read_config(files: DemoFiles, host: DemoHost, *, live: bool = False) -> Config:
    """``host``'s demo configuration as the real loader reads it (the demo's own database
    whatever ``$GPUWATCH_DATABASE_URL`` says)."""
    environ = {k: v for k, v in os.environ.items() if k not in _IGNORED_ENV}
    return load_config(str(files.config(host, live=live)), environ)


def render(
    files: DemoFiles,
    host: DemoHost,
    month: Month,
    interval_seconds: float,
    metrics_listen: str,
    urls: Mapping[str, str],
) -> str:
    change = _instant(price_change_at(month))
    lines = [
        "# Written by `gpuwatch demo`: a simulated fleet, never real data. Look at it with",
        f"#   gpuwatch report --config {files.config(host)}",
        "demo = true  # refuses any database but the demo's, and the demo's to a real daemon",
        f'host = "{host.name}"',
        f'database_url = "{files.database_url}"',
        'timezone = "UTC"',
        "",
        "[daemon]",
        f"interval_seconds = {interval_seconds:g}"
        + ("" if urls else "  # the history: one simulated round per interval"),
        f'metrics_listen = "{metrics_listen}"',
        "",
        "[spool]",
        f'path = "{files.folder / (host.name + ".spool.db")}"',
        "",
        "[budget]",
        f"monthly_usd = {MONTHLY_BUDGET_USD}",
        "",
        "[cost]",
        "mfu_target = 0.4  # what the MFU gap's dollars are measured against",
        "",
        "[energy]  # a rented rack's facility and a mid-European grid, stated for the demo",
        "pue = 1.3",
        "grams_co2_per_kwh = 350",
        "usd_per_kwh = 0.15",
        "",
        "[[slo]]  # every model: the first token within a second for 99 % of requests",
        'model = "*"',
        'ttft = "1s"',
        "objective = 0.99",
    ]
    for target in host.targets:
        gpus = ", ".join(f'"{i}"' for i in target.gpus)
        url = urls.get(target.name, f"http://127.0.0.1/{target.name}/metrics")
        lines += [
            "",
            "[[targets]]",
            f'name = "{target.name}"',
            f'url = "{url}"',
            f'engine = "{target.engine}"',
            f'model = "{target.model}"',
            f"gpus = [{gpus}]",
        ]
    lines += _rates(change)
    return "\n".join(lines) + "\n"


def _rates(change: str) -> Sequence[str]:
    h100, l40s = HOSTS[0].name, HOSTS[1].name
    return [
        "",
        "[[rates]]",
        f'host = "{h100}"',
        f"usd_per_hour = {H100_PRICE}",
        f'valid_to = "{change}"',
        "",
        "[[rates]]",
        f'host = "{h100}"',
        f"usd_per_hour = {H100_PRICE_LATER}",
        f'valid_from = "{change}"  # the price change',
        "",
        "[[rates]]",
        f'host = "{l40s}"',
        f"usd_per_hour = {L40S_PRICE}",
    ]


def _instant(at: datetime) -> str:
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")
