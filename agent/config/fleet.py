"""The ``[fleet]`` section: the central PostgreSQL a box forwards its fleet data to.

    [fleet]
    central_url_env = "GPUWATCH_CENTRAL_URL"  # or central_url_file = "/etc/gpuwatch/central"
    timeout = "10s"                           # connect and statement timeout, central database

Local-first: the box keeps its own database (``database_url``, SQLite by default) and, once a
minute after its rollup, forwards what the fleet's reports read to the central one (see
:mod:`agent.storage.forward`). The URL holds a password, so it is a secret: named by an
environment variable or a file, never written in the TOML, never logged. Without ``[fleet]`` a
box is on its own (or, with ``database_url`` on a shared PostgreSQL, in direct mode).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from agent.config.reader import Reader
from agent.config.secret import Secret

DEFAULT_TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class FleetConfig:
    central_url: Secret | None = None  # None: no central database, nothing is forwarded
    timeout_seconds: float = DEFAULT_TIMEOUT

    @property
    def forwarding(self) -> bool:
        return self.central_url is not None


def parse_fleet(r: Reader, top: dict[str, Any]) -> FleetConfig:
    t = r.sub(top, "fleet", {"central_url_env", "central_url_file", "timeout"})
    url = r.secret(t, "fleet.central_url")
    if url is not None and not url.reveal().startswith("postgresql"):
        # The scheme alone: the rest of the URL may carry the password.
        scheme = url.reveal().split(":", 1)[0]
        r.problem("fleet.central_url", f"expected a postgresql+psycopg:// URL (from {url.source}),"
                                       f" got {scheme}://...")  # fmt: skip
        url = None
    timeout = r.duration(t, "fleet.timeout", DEFAULT_TIMEOUT)
    return FleetConfig(central_url=url, timeout_seconds=timeout)
