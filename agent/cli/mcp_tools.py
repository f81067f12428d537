"""What `gpuwatch mcp`'s tools answer: the CLI's own JSON, from the CLI's own functions.

Each tool takes the CLI command's arguments under their flag names (``window``, ``from_date``
for --from, ...), checks them with the CLI's own checks, and returns exactly the JSON text that
`gpuwatch <command> --json` prints for them at the same instant. The SDK is not imported here:
these are plain functions over a :class:`Tools` (configuration and clock), so the CLI's tests
and the server share them.
"""

from __future__ import annotations

import argparse
import getpass
import re
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from agent.reporting import json_text
from foundation.errors import GpuwatchError

if TYPE_CHECKING:
    from agent.collect.clock import Clock
    from agent.config.settings import Config


class ToolArgumentError(GpuwatchError):
    """An argument a tool cannot use; the message names it as the tool's argument."""


# breakeven's figures, tool argument -> the CLI's flag (checked by the CLI's own parsers).
FIGURES = (
    "requests_per_day",
    "gpu_seconds_per_request",
    "tokens_per_request",
    "bursts_per_day",
    "pod_usd_per_hour",
    "serverless_usd_per_hour",
    "api_usd_per_million_tokens",
    "cold_start_seconds",
    "scaledown_seconds",
)


@dataclass(frozen=True, slots=True)
class Tools:
    """The tools over one configuration; ``clock`` stamps each answer as the CLI's `now`."""

    config: Config
    clock: Clock

    def cost(self, window: str = "30d") -> str:
        from agent.cli.cost import cost_document

        return _dumps(cost_document(self.config, window, self.clock()))

    def report(
        self,
        month: str | None = None,
        last_month: bool = False,
        week: bool = False,
        from_date: str | None = None,
        to_date: str | None = None,
        hosts: tuple[str, ...] = (),
        models: tuple[str, ...] = (),
    ) -> str:
        from agent.cli.report import choose_period, report_text

        chosen = [
            name
            for name, given in (
                ("month", month is not None),
                ("last_month", last_month),
                ("week", week),
                ("from_date", from_date is not None or to_date is not None),
            )
            if given
        ]
        if len(chosen) > 1:
            raise ToolArgumentError(f"one period at most, got {' and '.join(chosen)}")
        now = self.clock()
        period_args = argparse.Namespace(
            month=month, last_month=last_month, week=week, start=from_date, end=to_date
        )
        period = choose_period(period_args, now, self.config.timezone)
        return report_text(self.config, period, now, tuple(hosts), tuple(models), "json")

    def breakeven(
        self,
        window: str = "30d",
        target_utilization: float | None = None,
        **figures: float | None,
    ) -> str:
        from agent.cli import breakeven as cli

        values: dict[str, Any] = {
            name: _checked(cli._figure, name, figures.get(name)) for name in FIGURES
        }
        target = _checked(cli._ratio, "target_utilization", target_utilization)
        args = argparse.Namespace(json=True, window=window, target_utilization=target, **values)
        if cli.figures_given(args):  # as the CLI: given figures need no data (nor [cost])
            return cli.answer(args)
        return cli.answer(args, *cli.configured(self.config, self.clock()))

    def alerts(self) -> str:
        from agent.cli.alerts import alerts_document

        return _dumps(alerts_document(self.config, self.clock()))

    def gpus(self, window: str = "1h") -> str:
        from agent.cli.gpus import gpus_document

        return _dumps(gpus_document(self.config, window, self.clock()))

    def silence(
        self, matchers: tuple[str, ...], duration: str, comment: str, author: str | None = None
    ) -> str:
        from agent.cli.alerts import add_silence, silence_json
        from agent.storage.db import open_database

        if not matchers:
            raise ToolArgumentError("matchers: at least one, e.g. alertname=GpuIdle")
        now = self.clock()
        # Who added it, as `silence list` shows: the server's user, said to be via an assistant.
        by = author or f"{getpass.getuser()} (via gpuwatch mcp)"
        engine = open_database(self.config.database_url)
        try:
            with engine.begin() as conn:
                added = add_silence(conn, matchers, duration, comment, by, now)
        finally:
            engine.dispose()
        return _dumps(silence_json(added, now))


# The CLI's flags whose tool argument is not the flag's name with underscores.
_ARGUMENTS = {"from": "from_date", "to": "to_date", "host": "hosts", "model": "models",
              "match": "matchers"}  # fmt: skip
_FLAG = re.compile(r"--([a-z][a-z-]*)")


def in_tool_terms(message: str) -> str:
    """A CLI error message with each flag named as the tool's argument ("--window: ..." ->
    "window: ...", "--from" -> "from_date"): the assistant called a tool, not a command."""

    def argument(found: re.Match[str]) -> str:
        flag = found.group(1)
        return _ARGUMENTS.get(flag, flag.replace("-", "_"))

    return _FLAG.sub(argument, message)


def _checked(parse: Any, name: str, value: float | None) -> Decimal | None:
    """``value`` through the CLI flag's own parser (a finite number >= 0, exact as Decimal);
    the error names the tool's argument."""
    if value is None:
        return None
    try:
        parsed: Decimal = parse(repr(value))
    except argparse.ArgumentTypeError as exc:
        raise ToolArgumentError(f"{name}: {exc}") from None
    return parsed


def _dumps(document: dict[str, Any]) -> str:
    return json_text.dumps(document, indent=2)
