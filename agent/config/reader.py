"""Typed access to TOML tables that records every problem instead of stopping at the first.

Each problem is reported with its full key path (``targets[1].url``) so ``check-config`` can
list them all at once.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from agent.config.secret import Secret
from alerts.duration import DurationError, format_duration, parse_duration
from foundation.redact import redact_url

# The longest duration any setting takes (retention included): a century. Longer is a typo, and
# a century keeps every cutoff (now minus it) far inside what datetimes and SQL timestamps hold.
MAX_DURATION = 100 * 365 * 86400.0
# The largest amount in USD a setting takes (a budget, a purchase price): a billion.
MAX_USD = Decimal(10**9)
MAX_SECRET_BYTES = 64 * 1024  # a token, a URL, a password: never more than a few hundred bytes
# How much of a wrong value a problem quotes: enough to recognise it, never a whole file.
SHOWN_CHARS = 60


class Reader:
    """Reads values out of TOML tables, collecting problems in ``problems``."""

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

    def array(self, table: dict[str, Any], key: str) -> list[Any]:
        """An array of tables (``[[key]]``); empty when absent."""
        value = table.get(key, [])
        if not isinstance(value, list):
            self.problem(key, f"expected an array of tables ([[{key}]]), got {_kind(value)}")
            return []
        return value

    def sub(self, table: dict[str, Any], key: str, allowed: set[str]) -> dict[str, Any]:
        value = table.get(key, {})
        return self.table(value, key, allowed)

    def _get(self, table: dict[str, Any], key: str, types: tuple[type, ...], what: str) -> Any:
        value = table.get(key)
        if value is None:
            return None
        # bool is an int in Python; TOML's true must not pass as a number.
        if not isinstance(value, types) or (isinstance(value, bool) and bool not in types):
            self.problem(key, f"expected {what}, got {_kind(value)} {shown(value)}")
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

    def number(
        self,
        table: dict[str, Any],
        key: str,
        default: float,
        *,
        positive: bool,
        minimum: float | None = None,
        maximum: float | None = None,
        unit: str = "",
    ) -> float:
        """A finite TOML number, greater than 0 when ``positive``, within ``minimum`` ..
        ``maximum`` when given (``unit`` spells them in the message); ``default`` when absent
        or wrong."""
        value = self._get(table, key, (int, float), "a number")
        if value is None:
            return default
        # Compared before float(): a 400-digit TOML integer does not fit in a float.
        if isinstance(value, float) and not math.isfinite(value):
            self.problem(key, f"expected a finite number, got {value!r}")
            return default
        if positive and value <= 0:
            self.problem(key, f"must be greater than 0, got {shown(value)}")
            return default
        low = -math.inf if minimum is None else minimum
        high = math.inf if maximum is None else maximum
        if not low <= value <= high:
            self.problem(key, f"must be {_range(minimum, maximum, unit)}, got {shown(value)}")
            return default
        return float(value)

    def money(self, table: dict[str, Any], key: str, maximum: Decimal = MAX_USD) -> Decimal | None:
        # Floats from TOML go through str() so 2.72 becomes Decimal("2.72"), not 2.7200000000000002.
        value = self._get(table, key, (int, float, str), "an amount in USD")
        if value is None:
            return None
        try:
            amount = Decimal(str(value))
        except InvalidOperation:
            self.problem(key, f"expected an amount in USD, got {shown(value)}")
            return None
        if not amount.is_finite() or amount < 0:
            self.problem(key, f"must be a finite amount of at least 0, got {shown(value)}")
            return None
        if amount > maximum:
            # Decimal("1e999") is finite, but no price is; sums of it overflow NUMERIC columns.
            self.problem(key, f"must be at most {maximum:,} USD, got {shown(value)}")
            return None
        return amount

    def duration(
        self,
        table: dict[str, Any],
        key: str,
        default: float,
        *,
        numbers: bool = True,
        allow_zero: bool = False,
        maximum: float = MAX_DURATION,
    ) -> float:
        """Seconds in a Prometheus duration string ("90s", "1h30m"), or with ``numbers`` in a
        TOML number of seconds; longer than 0 unless ``allow_zero``, at most ``maximum``."""
        value = table.get(key)
        if value is None:
            return default
        try:
            seconds = _seconds(value) if numbers else parse_duration(value)
        except DurationError as exc:
            self.problem(key, str(exc))
            return default
        if seconds < 0 or (seconds == 0 and not allow_zero):
            self.problem(key, f"must be longer than 0, got {shown(value)}")
            return default
        if seconds > maximum:
            # Past this a timedelta or a datetime before "now" overflows at run time.
            self.problem(key, f"must be at most {format_duration(maximum)}, got {shown(value)}")
            return default
        return seconds

    def http_url(self, table: dict[str, Any], key: str) -> str | None:
        """An http:// or https:// URL with a host and a valid port; None when absent or wrong.
        A wrong one is quoted with its credentials hidden."""
        url = self.optional_string(table, key)
        if url is None:
            return None
        problem = http_url_problem(url)
        if problem is not None:
            self.problem(key, f"{problem}, got {shown(redact_url(url))}")
            return None
        return url

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
        if "\0" in file:
            self.problem(key, f"a file name cannot hold a NUL character, got {shown(file)}")
            return None
        try:
            # Read capped: a path such as /dev/zero must not fill the memory.
            with Path(file).open("rb") as fh:
                raw = fh.read(MAX_SECRET_BYTES + 1)
        except OSError as exc:
            self.problem(key, f"cannot read {file}: {exc.strerror or exc}")
            return None
        if len(raw) > MAX_SECRET_BYTES:
            self.problem(key, f"{file} is larger than 64 KiB: not a credential")
            return None
        try:
            value = raw.decode("utf-8").strip()
        except UnicodeDecodeError as exc:
            # The reason and the place only: the bytes around it are the secret.
            self.problem(key, f"{file} is not UTF-8 text ({exc.reason} at byte {exc.start})")
            return None
        if not value:
            self.problem(key, f"{file} is empty")
            return None
        return Secret(value, f"file {file}")


def http_url_problem(url: str) -> str | None:
    """What makes ``url`` no http(s) URL to fetch, or None when it is one."""
    try:
        parts = urlsplit(url)
        _ = parts.port  # a port that is no number, or out of range, raises
    except ValueError:
        return "not a URL (a bad port or address)"
    wanted = "expected an http:// or https:// URL"
    if not parts.scheme or any(ch.isspace() for ch in url):
        return f"not a URL: {wanted}"
    if parts.scheme not in ("http", "https"):
        return wanted
    if not parts.hostname:
        return f"{wanted} with a host"
    return None


def shown(value: object) -> str:
    """``value`` as a problem quotes it: its repr (which escapes control characters), cut."""
    try:
        text = repr(value)
    except RecursionError:
        return "(an array or table nested too deeply to show)"
    return text if len(text) <= SHOWN_CHARS else text[: SHOWN_CHARS - 1] + "…"


def _range(minimum: float | None, maximum: float | None, unit: str) -> str:
    if minimum is not None and maximum is not None:
        return f"from {minimum:g}{unit} to {maximum:g}{unit}"
    if minimum is not None:
        return f"at least {minimum:g}{unit}"
    return f"at most {maximum:g}{unit}"


def _seconds(value: object) -> float:
    # A TOML number is seconds (``timeout = 2.5``: Prometheus has no fractional durations, and
    # existing files use numbers); a string must be a Prometheus duration, as everywhere else.
    if isinstance(value, int | float) and not isinstance(value, bool):
        if isinstance(value, float) and not math.isfinite(value):
            raise DurationError(f"expected a finite number of seconds, got {value!r}")
        # Compared before float(): a 400-digit TOML integer does not fit in a float.
        if value > MAX_DURATION:
            raise DurationError(f"must be at most 100y, got {shown(value)}")
        if value < 0:
            raise DurationError(f"must be longer than 0, got {shown(value)}")
        return float(value)
    return parse_duration(value)


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
