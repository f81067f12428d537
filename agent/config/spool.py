"""The ``[spool]`` section: where rounds wait while the database cannot take them.

    [spool]
    max_bytes = 268435456                  # 256 MiB of compressed rounds; the oldest go first
    path = "/var/lib/gpuwatch/spool.db"    # default: beside the SQLite file, or the state directory

A typical box (8 GPUs, 2 vLLM targets, 619 samples a round) spools about 4.3 KB of compressed
rounds per tick (BENCHMARKS.md): 1.5 MB an hour at the default 10 s, so the default holds
about a week; at 1 s ticks, 15 MB an hour and about 17 hours (raise it for such a box).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from agent.config.reader import Reader

DEFAULT_MAX_BYTES = 256 * 1024 * 1024
MIN_MAX_BYTES = 1024 * 1024  # a round of a big box is tens of kilobytes
MAX_MAX_BYTES = 2**40  # a tebibyte: years of rounds; more is a typo


@dataclass(frozen=True, slots=True)
class SpoolConfig:
    path: Path | None = None  # None: beside a SQLite database, else in the state directory
    max_bytes: int = DEFAULT_MAX_BYTES

    def file(self, database_url: str, environ: Mapping[str, str]) -> Path:
        return self.path or default_path(environ, database_url)


def state_directory(environ: Mapping[str, str]) -> Path:
    """gpuwatch's state folder: systemd's $STATE_DIRECTORY, else XDG's."""
    if environ.get("STATE_DIRECTORY"):
        # systemd may pass several colon-separated folders; the first is ours.
        return Path(environ["STATE_DIRECTORY"].split(":")[0])
    if environ.get("XDG_STATE_HOME"):
        return Path(environ["XDG_STATE_HOME"]) / "gpuwatch"
    return Path(environ.get("HOME", "/var/lib")) / ".local" / "state" / "gpuwatch"


def parse_spool(r: Reader, top: dict[str, Any], database_url: str) -> SpoolConfig:
    t = r.sub(top, "spool", {"path", "max_bytes"})
    path = r.optional_string(t, "spool.path")
    if path is not None and "\0" in path:
        r.problem("spool.path", "a file name cannot hold a NUL character")
        path = None
    size = r.number(t, "spool.max_bytes", DEFAULT_MAX_BYTES, positive=True, maximum=MAX_MAX_BYTES)
    if size < MIN_MAX_BYTES:
        r.problem("spool.max_bytes", f"must be at least {MIN_MAX_BYTES} (1 MiB), got {size:g}")
        size = DEFAULT_MAX_BYTES
    chosen = Path(path) if path else default_path(r.env, database_url)
    return SpoolConfig(chosen, int(size))


def default_path(environ: Mapping[str, str], database_url: str) -> Path:
    """Beside a SQLite database (``gpuwatch.spool.db``), else in the state directory, named
    after the database: a spool holds one database's rounds, and a box whose configuration
    moves to another database must not forward the old one's rounds there."""
    database = sqlite_file(database_url)
    if database is not None:
        return database.with_name(f"{database.stem}.spool.db")
    identity = make_url(database_url).render_as_string(hide_password=True)
    digest = hashlib.sha256(identity.encode()).hexdigest()[:12]
    return state_directory(environ) / f"spool-{digest}.db"


def sqlite_file(url: str) -> Path | None:
    """The file of a SQLite URL (None for PostgreSQL or an in-memory database)."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite" or parsed.database in (None, "", ":memory:"):
        return None
    return Path(parsed.database)
