"""Failures a user causes or meets (a bad setting, a database that is away, a reader that
stopped reading): one line on stderr and an exit status, never a traceback.

The exception types are imported only once something has failed: SQLAlchemy, Alembic and the
configuration's modules take most of a second to import, and `gpuwatch --help` or `breakeven`
with given figures never needs them (bench/cli_start.py).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

# Exit statuses (README, Commands): 1 a runtime failure, 2 a setting to change.
RUNTIME, SETTING = 1, 2
# What a shell reports for a process that SIGPIPE ended (128 + 13), as for `cat big | head`,
# and for one that Ctrl-C (SIGINT) ended.
BROKEN_PIPE, INTERRUPTED = 141, 130


def expected(exc: Exception, config_path: str | None) -> tuple[int, str] | None:
    """The exit status and the one line for ``exc``; None when it is a bug (a traceback then)."""
    from sqlalchemy.exc import OperationalError

    from agent.config.settings import ConfigError
    from foundation.errors import GpuwatchError
    from migrations.runner import SchemaError

    if isinstance(exc, ConfigError):
        return SETTING, str(exc)
    if isinstance(exc, SchemaError | GpuwatchError):
        return RUNTIME, str(exc)
    if isinstance(exc, OperationalError):  # the database is away: a fact to report, not a bug
        return RUNTIME, unreachable(config_path, exc)
    if isinstance(exc, OSError) and exc.filename is not None:  # a folder missing, a permission
        return RUNTIME, file_problem(config_path, exc)
    return None


def unreachable(config_path: str | None, exc: Exception) -> str:
    """One line naming the setting, the database (password hidden) and the cause."""
    from sqlalchemy.engine import make_url

    from agent.config.settings import load_config
    from foundation.redact import redact_url

    config = load_config(config_path)
    key = "GPUWATCH_DATABASE_URL" if os.environ.get("GPUWATCH_DATABASE_URL") else "database_url"
    url = make_url(config.database_url)
    where = f"{url.host or 'localhost'}:{url.port or 5432}" if url.host else str(url.database)
    cause = (str(getattr(exc, "orig", None) or exc).splitlines() or ["unknown error"])[0]
    # The password, and a password or token passed as a query parameter (libpq takes them).
    shown = redact_url(url.render_as_string(hide_password=True))
    return f"{key} ({shown}): cannot reach the database at {where}: {cause}"


def file_problem(config_path: str | None, exc: OSError) -> str:
    """One line naming the file; and the setting, when it is the SQLite database's."""
    from agent.config.settings import load_config
    from agent.storage.db import sqlite_path

    problem = f"{exc.filename}: {exc.strerror or exc}"
    try:
        url = load_config(config_path).database_url
        database = sqlite_path(url)
    except Exception:  # the configuration is read again only to name the setting
        return problem
    if database is None or not str(database).startswith(str(exc.filename)):
        return problem
    key = "GPUWATCH_DATABASE_URL" if os.environ.get("GPUWATCH_DATABASE_URL") else "database_url"
    return f"{key} ({url}): cannot open the database file: {problem}"


def quietly(command: Callable[[], int]) -> int:
    """Run ``command``, flushing its output; a reader that stops early (`... | head -1`) or
    Ctrl-C ends the command quietly, as it would end `cat`, instead of a traceback. (The
    daemon handles SIGINT itself and stops cleanly.)"""
    try:
        status = command()
        sys.stdout.flush()
        return status
    except KeyboardInterrupt:
        return INTERRUPTED
    except BrokenPipeError:
        # Python flushes stdout again at exit, which would fail the same way and print an
        # "Exception ignored" notice: what is left goes nowhere instead (Python's documented
        # recipe, "Note on SIGPIPE" in the signal module's docs).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return BROKEN_PIPE
