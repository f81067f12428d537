"""`gpuwatch breakeven`: pod vs serverless vs API, from given figures or from measured data.

The lead's CLI registers the command with ``add_parser`` and dispatches to ``run``. Workload figures
given on the command line win; without them ``measured(window)`` supplies a Workload from stored
data, and --tokens-per-request / --bursts-per-day, when given, still override the measured ones.

--json prints one object. Money and ratios are JSON numbers rounded half up (the exact figures stay
in agent.cost.breakeven): dollars per day to cents, per-million-token figures and ratios
(duty_cycle, crossover_utilization) to 4 decimals; crossover_requests_per_day is an integer; null
where a figure cannot be computed (no tokens, no API price).
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Callable
from dataclasses import replace
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any, TextIO

from agent.cost.breakeven import (
    Breakeven,
    Prices,
    Workload,
    cents,
    compare,
    count,
    overhead_seconds_per_day,
    percent,
    usd,
)
from agent.reporting import json_text
from alerts.duration import DurationError, parse_duration
from collectors.base import GpuwatchError

PROG = "gpuwatch breakeven"
WIDTH = 100
_LABEL = 18  # the label column of the table
_ROWS = (("pod", "pod"), ("serverless", "serverless"), ("API", "api"))


class _UsageError(Exception):
    """Bad or missing flags: exit status 2, like argparse's own errors."""


def add_parser(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "breakeven",
        help="pod vs serverless vs API, from measured data or given figures",
        description="Compare a dedicated pod, serverless GPU and a token API for one workload: "
        "cost per day and per million tokens, the crossover, and a recommendation.",
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--config",
        metavar="PATH",
        help="TOML file (default as for `run`); read only for measured data",
    )
    parser.add_argument(
        "--window",
        default="30d",
        metavar="DURATION",
        help='how much measured history to use, e.g. "7d" (default: 30d); '
        "ignored when the workload figures are given",
    )
    workload = parser.add_argument_group("workload (default: measured over --window)")
    _figure_arg(workload, "--requests-per-day", "N", "requests per day")
    _figure_arg(workload, "--gpu-seconds-per-request", "S", "busy GPU-seconds per request")
    _figure_arg(workload, "--tokens-per-request", "T", "tokens per request (for $/M and API)")
    _figure_arg(
        workload,
        "--bursts-per-day",
        "B",
        "times a day traffic resumes after serverless scaled to zero (default: no cold starts)",
    )
    prices = parser.add_argument_group("prices")
    _figure_arg(prices, "--pod-usd-per-hour", "P", "dedicated pod, USD per GPU-hour (required)")
    _figure_arg(prices, "--serverless-usd-per-hour", "Q", "serverless, USD per GPU-hour (required)")
    _figure_arg(prices, "--api-usd-per-million-tokens", "A", "token API, USD per million tokens")
    _figure_arg(prices, "--cold-start-seconds", "C", "billed seconds of each cold start")
    _figure_arg(prices, "--scaledown-seconds", "W", "billed idle seconds before scale-down")


def _figure_arg(group: argparse._ArgumentGroup, flag: str, metavar: str, text: str) -> None:
    group.add_argument(flag, type=_figure, metavar=metavar, help=text)


def _figure(text: str) -> Decimal:
    """A finite number >= 0, kept exact as Decimal (floats would blur cents)."""
    try:
        value = Decimal(text)
    except InvalidOperation:
        value = Decimal("NaN")
    if not value.is_finite() or value < 0:
        raise argparse.ArgumentTypeError(f"expected a number >= 0, got {text!r}")
    return value


def run(
    args: argparse.Namespace,
    measured: Callable[[str], Workload] | None = None,
    out: TextIO | None = None,
) -> int:
    """Exit status: 0, 2 for missing or bad flags, 1 when measured data cannot be had.

    ``out`` defaults to sys.stdout as it is at call time (so captured output works); errors go to
    sys.stderr.
    """
    out = sys.stdout if out is None else out
    try:
        prices = _prices(args)
        workload, source = _workload(args, measured)
    except _UsageError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    except GpuwatchError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    result = compare(workload, prices)
    print(_json(result, source) if args.json else render_table(result, source), file=out)
    return 0


def _prices(args: argparse.Namespace) -> Prices:
    missing = [
        flag
        for flag, value in (
            ("--pod-usd-per-hour P", args.pod_usd_per_hour),
            ("--serverless-usd-per-hour Q", args.serverless_usd_per_hour),
        )
        if value is None
    ]
    if missing:
        raise _UsageError(f"missing {' and '.join(missing)} (USD per GPU-hour)")
    return Prices(
        pod_usd_per_hour=args.pod_usd_per_hour,
        serverless_usd_per_hour=args.serverless_usd_per_hour,
        api_usd_per_million_tokens=args.api_usd_per_million_tokens,
        cold_start_seconds=args.cold_start_seconds or Decimal(0),
        scaledown_seconds=args.scaledown_seconds or Decimal(0),
    )


def figures_given(args: argparse.Namespace) -> bool:
    """Whether the command line gives the whole workload (then nothing is measured)."""
    return args.requests_per_day is not None and args.gpu_seconds_per_request is not None


def _workload(
    args: argparse.Namespace, measured: Callable[[str], Workload] | None
) -> tuple[Workload, str]:
    """The workload and where it came from ("given figures" or "measured over 30d")."""
    try:
        if parse_duration(args.window) <= 0:
            raise DurationError(f"must be longer than 0, got {args.window!r}")
    except DurationError as exc:
        raise _UsageError(f"--window: {exc}") from None
    requests, gpu_seconds = args.requests_per_day, args.gpu_seconds_per_request
    if figures_given(args):
        given = Workload(requests, gpu_seconds, args.tokens_per_request, args.bursts_per_day)
        return given, "given figures"
    if requests is not None or gpu_seconds is not None:
        flag = "--gpu-seconds-per-request S" if gpu_seconds is None else "--requests-per-day N"
        raise _UsageError(f"missing {flag} (the workload needs both figures)")
    if measured is None:
        raise _UsageError(
            "no measured data here: give --requests-per-day N and --gpu-seconds-per-request S"
        )
    return _override(measured(args.window), args), f"measured over {args.window}"


def _override(workload: Workload, args: argparse.Namespace) -> Workload:
    """Flags the user gave beat measured figures (e.g. a token count the engine does not report)."""
    if args.tokens_per_request is not None:
        workload = replace(workload, tokens_per_request=args.tokens_per_request)
    if args.bursts_per_day is not None:
        workload = replace(workload, bursts_per_day=args.bursts_per_day)
    return workload


def render_table(result: Breakeven, source: str) -> str:
    """The human report, at most WIDTH columns."""
    # Header lines carry user-given figures of any length: wrap them to the width too.
    lines = [wrapped for line in _header(result, source) for wrapped in _wrapped("", line, 2)]
    lines += ["", _row("option", "USD/day", "USD/M tokens")]
    lines += [_row(label, _money(result, key), _per_m(result, key)) for label, key in _ROWS]
    lines += ["", *_wrapped("crossover", _crossover(result))]
    lines += _wrapped("recommendation", result.recommendation)
    for note in notes(result):
        lines += _wrapped("note", note)
    return "\n".join(lines)


def _header(result: Breakeven, source: str) -> list[str]:
    w, p = result.workload, result.prices
    api = (
        "n/a"
        if p.api_usd_per_million_tokens is None
        else f"{_rate(p.api_usd_per_million_tokens)}/M"
    )
    lines = [
        f"{PROG}: {count(w.requests_per_day)} requests/day x {_plain(w.gpu_seconds_per_request)} "
        f"GPU-s, duty cycle {percent(result.duty_cycle)} ({source})",
        f"rates: pod {_rate(p.pod_usd_per_hour)}/h, serverless {_rate(p.serverless_usd_per_hour)}/h"
        f", API {api}",
    ]
    if w.tokens_per_request is not None:
        lines.append(f"tokens: {count(w.tokens_per_request)} per request")
    overhead = overhead_seconds_per_day(w, p)
    if overhead:
        lines.append(
            f"serverless overhead: {_plain(w.bursts_per_day or Decimal(0))} bursts/day x "
            f"({_plain(p.cold_start_seconds)} s cold start + {_plain(p.scaledown_seconds)} s "
            f"scale-down idle) = {_plain(overhead)} s/day billed"
        )
    return lines


def _row(label: str, per_day: str, per_million: str) -> str:
    return f"{label:<{_LABEL}}{per_day:>10}{per_million:>16}"


def _money(result: Breakeven, key: str) -> str:
    value = result.usd_per_day(key)
    return "n/a" if value is None else f"{cents(value):,}"


def _per_m(result: Breakeven, key: str) -> str:
    value = result.usd_per_million_tokens(key)
    return "n/a" if value is None else f"{_round(value, 4):,}"


def _crossover(result: Breakeven) -> str:
    requests = result.crossover_requests_per_day
    utilization = result.crossover_utilization
    by_count = "none" if requests is None else f"{requests:,} requests/day"
    by_duty = "" if utilization is None else f", duty cycle {percent(utilization)}"
    return by_count + by_duty


def notes(result: Breakeven) -> list[str]:
    """What the figures alone would hide."""
    w, p = result.workload, result.prices
    found = []
    if w.bursts_per_day is None and (p.cold_start_seconds or p.scaledown_seconds):
        found.append("cold starts and scale-down idle are not counted: give --bursts-per-day B")
    if p.api_usd_per_million_tokens is not None and w.tokens_per_request is None:
        found.append("the API cost per day needs --tokens-per-request T")
    if result.duty_cycle > 1:
        found.append("the workload keeps more than one GPU busy; the pod figure is for one GPU")
    if result.crossover_utilization is not None and result.crossover_utilization > 1:
        found.append(
            "the crossover needs a duty cycle above 100 %: at these rates serverless stays "
            "cheaper than a pod for any load one GPU can carry"
        )
    return found


def _wrapped(label: str, text: str, indent: int = _LABEL) -> list[str]:
    """``text`` after ``label`` (padded to ``indent``), continued ``indent`` columns in."""
    first = f"{label:<{indent}}" if label else ""
    return textwrap.wrap(text, WIDTH, initial_indent=first, subsequent_indent=" " * indent)


def _json(result: Breakeven, source: str) -> str:
    w = result.workload
    payload: dict[str, Any] = {
        "source": source,
        "requests_per_day": _number(w.requests_per_day, 4),
        "gpu_seconds_per_request": _number(w.gpu_seconds_per_request, 4),
        "tokens_per_request": _number(w.tokens_per_request, 4),
        "bursts_per_day": _number(w.bursts_per_day, 4),
        "pod_usd_per_day": _number(result.pod_usd_per_day, 2),
        "serverless_usd_per_day": _number(result.serverless_usd_per_day, 2),
        "api_usd_per_day": _number(result.api_usd_per_day, 2),
        "pod_usd_per_million_tokens": _number(result.pod_usd_per_million_tokens, 4),
        "serverless_usd_per_million_tokens": _number(result.serverless_usd_per_million_tokens, 4),
        "api_usd_per_million_tokens": _number(result.api_usd_per_million_tokens, 4),
        "duty_cycle": _number(result.duty_cycle, 4),
        "crossover_requests_per_day": result.crossover_requests_per_day,
        "crossover_utilization": _number(result.crossover_utilization, 4),
        "cheapest": result.cheapest,
        "recommendation": result.recommendation,
        "notes": notes(result),
    }
    return json_text.dumps(payload)


def _round(value: Decimal, places: int) -> Decimal:
    return value.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)


def _number(value: Decimal | None, places: int) -> int | float | None:
    """A JSON number: rounded half up first, so the float's shortest repr is the rounded figure."""
    if value is None:
        return None
    rounded = _round(value, places)
    return int(rounded) if rounded == rounded.to_integral_value() else float(rounded)


def _plain(value: Decimal) -> str:
    """'2', '2.5', '0.000694': no exponent, no trailing zeros."""
    return f"{value.normalize():f}"


def _rate(value: Decimal) -> str:
    """A rate as given: '$2.72', '$2.50', but '$2.4984' rather than a rounded '$2.50'."""
    return usd(value) if value == cents(value) else f"${_plain(value)}"
