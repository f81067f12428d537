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

from agent.config.secret import Secret
from alerts.duration import DurationError, parse_duration


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

    def duration(
        self,
        table: dict[str, Any],
        key: str,
        default: float,
        *,
        numbers: bool = True,
        allow_zero: bool = False,
    ) -> float:
        """Seconds in a Prometheus duration string ("90s", "1h30m"), or with ``numbers`` in a
        TOML number of seconds; longer than 0 unless ``allow_zero``."""
        value = table.get(key)
        if value is None:
            return default
        try:
            seconds = _seconds(value) if numbers else parse_duration(value)
        except DurationError as exc:
            self.problem(key, str(exc))
            return default
        if seconds < 0 or (seconds == 0 and not allow_zero):
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


def _seconds(value: object) -> float:
    # A TOML number is seconds (``timeout = 2.5``: Prometheus has no fractional durations, and
    # existing files use numbers); a string must be a Prometheus duration, as everywhere else.
    if isinstance(value, int | float) and not isinstance(value, bool):
        if not math.isfinite(value):
            raise DurationError(f"expected a finite number of seconds, got {value!r}")
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
