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
# What a shell reports for a process that SIGPIPE ended (128 + 13), as for `cat big | head`.
BROKEN_PIPE = 141


def expected(exc: Exception, config_path: str | None) -> tuple[int, str] | None:
    """The exit status and the one line for ``exc``; None when it is a bug (a traceback then)."""
    from sqlalchemy.exc import OperationalError

    from agent.config.settings import ConfigError
    from collectors.base import GpuwatchError
    from migrations.runner import SchemaError

    if isinstance(exc, ConfigError):
        return SETTING, str(exc)
    if isinstance(exc, SchemaError | GpuwatchError):
        return RUNTIME, str(exc)
    if isinstance(exc, OperationalError):  # the database is away: a fact to report, not a bug
        return RUNTIME, unreachable(config_path, exc)
    return None


def unreachable(config_path: str | None, exc: Exception) -> str:
    """One line naming the setting, the database (password hidden) and the cause."""
    from sqlalchemy.engine import make_url

    from agent.config.settings import load_config
    from collectors.redact import redact_url

    config = load_config(config_path)
    key = "GPUWATCH_DATABASE_URL" if os.environ.get("GPUWATCH_DATABASE_URL") else "database_url"
    url = make_url(config.database_url)
    where = f"{url.host or 'localhost'}:{url.port or 5432}" if url.host else str(url.database)
    cause = (str(getattr(exc, "orig", None) or exc).splitlines() or ["unknown error"])[0]
    # The password, and a password or token passed as a query parameter (libpq takes them).
    shown = redact_url(url.render_as_string(hide_password=True))
    return f"{key} ({shown}): cannot reach the database at {where}: {cause}"


def until_the_pipe_closes(command: Callable[[], int]) -> int:
    """Run ``command``, flushing its output; a reader that stops early (`... | head -1`) ends
    the command quietly, as it would end `cat`, instead of a BrokenPipeError traceback."""
    try:
        status = command()
        sys.stdout.flush()
        return status
    except BrokenPipeError:
        # Python flushes stdout again at exit, which would fail the same way and print an
        # "Exception ignored" notice: what is left goes nowhere instead (Python's documented
        # recipe, "Note on SIGPIPE" in the signal module's docs).
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
        return BROKEN_PIPE
