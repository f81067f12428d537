"""`gpuwatch breakeven`: pod vs serverless vs API, from given figures or from measured data.

The lead's CLI registers the command with ``add_parser`` and dispatches to ``run``. Workload figures
given on the command line win; without them ``measured(window)`` supplies the workload from stored
data per day of *observed* time (:mod:`agent.cost.measured`), and --tokens-per-request /
--bursts-per-day, when given, still override the measured ones. Measured over less than
``[cost] min_observed``, the per-day figures (and the pods and the pod's cost per million tokens,
which follow from them) are withheld with the reason; the crossover, a property of one request,
is still given.

The pod option is right-sized: as many whole GPUs as the load needs at the target utilization
(--target-utilization, else ``[cost] target_utilization`` for measured data, else 0.7).

--json prints one object. Money and ratios are JSON numbers rounded half up (the exact figures stay
in agent.cost.breakeven): dollars per day to cents, per-million-token figures and ratios
(duty_cycle, crossover_utilization, target_utilization) to 4 decimals; crossover_requests_per_day,
one_pod_crossover_requests_per_day and pods are integers; null where a figure cannot be computed
(no tokens, no API price) or is withheld (``withheld`` says why).
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import replace
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import TYPE_CHECKING, Any, TextIO

from agent.cost.breakeven import (
    Breakeven,
    Prices,
    Workload,
    cents,
    compare,
    count,
    figure,
    overhead_seconds_per_day,
    percent,
    usd,
)
from agent.cost.sizing import TARGET_UTILIZATION
from agent.reporting import json_text
from alerts.duration import DurationError, parse_duration
from foundation.errors import GpuwatchError

if TYPE_CHECKING:
    from datetime import datetime

    from agent.config.settings import Config
    from agent.cost.measured import Measured

PROG = "gpuwatch breakeven"
WIDTH = 100
_LABEL = 18  # the label column of the table
_ROWS = (("pod", "pod"), ("serverless", "serverless"), ("API", "api"))
# economics.md's worked serverless price (a serverless A100 80GB), as the report compares with.
SERVERLESS_DEFAULT = Decimal("2.50")


class UsageError(GpuwatchError):
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
    _figure_arg(
        prices,
        "--serverless-usd-per-hour",
        "Q",
        "serverless, USD per GPU-hour (default: $2.50, a typical serverless A100 80GB)",
    )
    _figure_arg(prices, "--api-usd-per-million-tokens", "A", "token API, USD per million tokens")
    _figure_arg(prices, "--cold-start-seconds", "C", "billed seconds of each cold start")
    _figure_arg(prices, "--scaledown-seconds", "W", "billed idle seconds before scale-down")
    parser.add_argument(
        "--target-utilization",
        type=_ratio,
        metavar="U",
        help="how busy right-sized pods run, 0-1 (default: [cost] target_utilization for "
        "measured data, else 0.7)",
    )


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


def _ratio(text: str) -> Decimal:
    """A utilization in (0, 1]."""
    value = _figure(text)
    if not 0 < value <= 1:
        hint = f"; did you mean {value / 100}?" if 1 < value <= 100 else ""
        raise argparse.ArgumentTypeError(
            f"expected a ratio above 0 and at most 1, got {text}{hint}"
        )
    return value


def run(
    args: argparse.Namespace,
    measured: Callable[[str], Measured] | None = None,
    out: TextIO | None = None,
    target_utilization: Decimal | None = None,
) -> int:
    """Exit status: 0, 2 for missing or bad flags, 1 when measured data cannot be had.

    ``out`` defaults to sys.stdout as it is at call time (so captured output works); errors go to
    sys.stderr. ``target_utilization``: the configured one (the flag beats it).
    """
    out = sys.stdout if out is None else out
    try:
        text = answer(args, measured, target_utilization)
    except UsageError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 2
    except GpuwatchError as exc:
        print(f"{PROG}: {exc}", file=sys.stderr)
        return 1
    print(text, file=out)
    return 0


def answer(
    args: argparse.Namespace,
    measured: Callable[[str], Measured] | None = None,
    target_utilization: Decimal | None = None,
) -> str:
    """What `gpuwatch breakeven` prints for ``args`` (the table, or the JSON with ``args.json``;
    the MCP server's `breakeven` tool answers the same). UsageError: a flag missing or bad;
    GpuwatchError: measured data could not be had."""
    prices = _prices(args)
    workload, source, basis = _workload(args, measured)
    target = args.target_utilization or target_utilization or TARGET_UTILIZATION
    result = compare(workload, prices, target_utilization=target)
    withheld = None if basis is None else basis.withheld
    extra = []
    if args.serverless_usd_per_hour is None:
        extra.append(
            f"serverless at {usd(SERVERLESS_DEFAULT)}/h, a typical serverless A100 80GB: give "
            "--serverless-usd-per-hour Q for your provider's price"
        )
    if args.json:
        return _json(result, source, basis, extra)
    return render_table(result, source, withheld, extra)


def configured(config: Config, now: datetime) -> tuple[Callable[[str], Measured], Decimal]:
    """What a configuration brings when the workload is not given: the measured workload over
    a window before ``now`` and ``[cost] target_utilization`` (the flag still beats it)."""

    def measured(window: str) -> Measured:
        from agent.cli.cost import measure_window

        return measure_window(config, window, now)

    return measured, Decimal(repr(config.cost.target_utilization))


def _prices(args: argparse.Namespace) -> Prices:
    if args.pod_usd_per_hour is None:
        raise UsageError("missing --pod-usd-per-hour P (USD per GPU-hour)")
    serverless = args.serverless_usd_per_hour
    return Prices(
        pod_usd_per_hour=args.pod_usd_per_hour,
        serverless_usd_per_hour=SERVERLESS_DEFAULT if serverless is None else serverless,
        api_usd_per_million_tokens=args.api_usd_per_million_tokens,
        cold_start_seconds=args.cold_start_seconds or Decimal(0),
        scaledown_seconds=args.scaledown_seconds or Decimal(0),
    )


def figures_given(args: argparse.Namespace) -> bool:
    """Whether the command line gives the whole workload (then nothing is measured)."""
    return args.requests_per_day is not None and args.gpu_seconds_per_request is not None


def _workload(
    args: argparse.Namespace, measured: Callable[[str], Measured] | None
) -> tuple[Workload, str, Measured | None]:
    """The workload, where it came from ("given figures" or "measured over 0.2 h in the last
    30d") and, when measured, what it was measured over."""
    try:
        if parse_duration(args.window) <= 0:
            raise DurationError(f"must be longer than 0, got {args.window!r}")
    except DurationError as exc:
        raise UsageError(f"--window: {exc}") from None
    requests, gpu_seconds = args.requests_per_day, args.gpu_seconds_per_request
    if figures_given(args):
        given = Workload(requests, gpu_seconds, args.tokens_per_request, args.bursts_per_day)
        return given, "given figures", None
    if requests is not None or gpu_seconds is not None:
        flag = "--gpu-seconds-per-request S" if gpu_seconds is None else "--requests-per-day N"
        raise UsageError(f"missing {flag} (the workload needs both figures)")
    if measured is None:
        raise UsageError(
            "no measured data here: give --requests-per-day N and --gpu-seconds-per-request S"
        )
    found = measured(args.window)
    source = f"{found.basis} in the last {args.window}"
    return _override(found.workload, args), source, found


def _override(workload: Workload, args: argparse.Namespace) -> Workload:
    """Flags the user gave beat measured figures (e.g. a token count the engine does not report)."""
    if args.tokens_per_request is not None:
        workload = replace(workload, tokens_per_request=args.tokens_per_request)
    if args.bursts_per_day is not None:
        workload = replace(workload, bursts_per_day=args.bursts_per_day)
    return workload


def render_table(
    result: Breakeven, source: str, withheld: str | None = None, extra: Sequence[str] = ()
) -> str:
    """The human report, at most WIDTH columns. ``withheld``: why the per-day figures are not
    stated (measured over too little time); the crossover and per-request figures still are."""
    # Header lines carry user-given figures of any length: wrap them to the width too.
    lines = [wrapped for line in _header(result, source) for wrapped in _wrapped("", line, 2)]
    if withheld is None:
        lines += ["", _row("option", "USD/day", "USD/M tokens")]
        lines += [_row(_option(result, key), _money(result, key), _per_m(result, key))
                  for _, key in _ROWS]  # fmt: skip
    lines += ["", *_wrapped("crossover", _crossover(result))]
    if withheld is None:
        lines += _wrapped("recommendation", result.recommendation)
    else:
        lines += _wrapped("recommendation", f"none yet: {withheld}")
    for note in [*extra, *notes(result, withheld is not None)]:
        lines += _wrapped("note", note)
    return "\n".join(lines)


def _option(result: Breakeven, key: str) -> str:
    if key == "pod":
        return f"pod x {result.pods:,}"
    return "API" if key == "api" else key


def _header(result: Breakeven, source: str) -> list[str]:
    w, p = result.workload, result.prices
    api = (
        "n/a"
        if p.api_usd_per_million_tokens is None
        else f"{_rate(p.api_usd_per_million_tokens)}/M"
    )
    lines = [
        f"{PROG}: {count(w.requests_per_day)} requests/day x {figure(w.gpu_seconds_per_request)} "
        f"GPU-s, duty cycle {percent(result.duty_cycle)} ({source})",
        f"rates: pod {_rate(p.pod_usd_per_hour)}/h, serverless {_rate(p.serverless_usd_per_hour)}/h"
        f", API {api}",
        _sizing(result),
    ]
    if w.tokens_per_request is not None:
        lines.append(f"tokens: {count(w.tokens_per_request)} per request")
    overhead = overhead_seconds_per_day(w, p)
    if overhead:
        lines.append(
            f"serverless overhead: {figure(w.bursts_per_day or Decimal(0))} bursts/day x "
            f"({figure(p.cold_start_seconds)} s cold start + {figure(p.scaledown_seconds)} s "
            f"scale-down idle) = {figure(overhead)} s/day billed"
        )
    return lines


def _sizing(result: Breakeven) -> str:
    """How many pods, and why: the load over one pod's share at the target utilization."""
    u = result.target_utilization or Decimal(1)
    capacity = result.pod_capacity_requests_per_day
    each = "" if capacity is None else f"; one carries {count(capacity)} requests/day"
    return (
        f"pods: {result.pods:,} (whole GPUs for {figure(result.workload.busy_gpu_seconds_per_day)}"
        f" busy GPU-s/day at a {percent(u)} target utilization{each})"
    )


def _row(label: str, per_day: str, per_million: str) -> str:
    return f"{label:<{_LABEL}}{per_day:>14}{per_million:>16}"


def _money(result: Breakeven, key: str) -> str:
    value = result.usd_per_day(key)
    return "n/a" if value is None else f"{cents(value):,}"


def _per_m(result: Breakeven, key: str) -> str:
    value = result.usd_per_million_tokens(key)
    return "n/a" if value is None else f"{_round(value, 4):,}"


def _crossover(result: Breakeven) -> str:
    requests = result.crossover_requests_per_day
    utilization = result.crossover_utilization
    if requests is None:
        text = "none: serverless stays cheaper than right-sized pods at some load however high"
    else:
        text = f"{requests:,} requests/day"
        if utilization is not None:
            text += f", duty cycle {percent(utilization)}"
        text += " (above it right-sized pods cost less at every load)"
    one = result.one_pod_crossover_requests_per_day
    if one is not None:
        text += f"; one always-on pod pays off above {one:,} requests/day"
    return text


def notes(result: Breakeven, withheld: bool = False) -> list[str]:
    """What the figures alone would hide."""
    w, p = result.workload, result.prices
    found = []
    if w.bursts_per_day is None and (p.cold_start_seconds or p.scaledown_seconds):
        found.append("cold starts and scale-down idle are not counted: give --bursts-per-day B")
    if p.api_usd_per_million_tokens is not None and w.tokens_per_request is None:
        found.append("the API cost per day needs --tokens-per-request T")
    u = result.target_utilization
    if u is not None and result.crossover_requests_per_day is None and p.serverless_usd_per_hour:
        found.append(
            f"at a {percent(u)} target a pod costs {usd(p.pod_usd_per_hour / u)} per busy "
            f"GPU-hour against serverless {_rate(p.serverless_usd_per_hour)}"
        )
    one = result.one_pod_crossover_requests_per_day
    capacity = result.pod_capacity_requests_per_day
    if one is not None and capacity is not None and one > capacity and not withheld:
        found.append(
            f"one pod carries {count(capacity)} requests/day at the target: the one-pod "
            "crossover is a load it cannot carry"
        )
    return found


def _wrapped(label: str, text: str, indent: int = _LABEL) -> list[str]:
    """``text`` after ``label`` (padded to ``indent``), continued ``indent`` columns in."""
    first = f"{label:<{indent}}" if label else ""
    # "6.9 %" stays on one line: the space before a percent sign is not a place to break.
    glued = text.replace(" %", "\0%")
    lines = textwrap.wrap(
        glued,
        WIDTH,
        initial_indent=first,
        subsequent_indent=" " * indent,
        break_on_hyphens=False,  # a flag's name stays whole
    )
    return [line.replace("\0", " ") for line in lines]


def _json(
    result: Breakeven, source: str, measured: Measured | None = None, extra: Sequence[str] = ()
) -> str:
    w = result.workload
    withheld = None if measured is None else measured.withheld

    def day(value: Decimal | None, places: int) -> int | float | None:
        """A figure per day of the load: withheld with the others."""
        return None if withheld else _number(value, places)

    payload: dict[str, Any] = {
        "source": source,
        "measured_hours": None if measured is None else _number(measured.observed_hours, 2),
        "measured_gpu_hours": None if measured is None else _number(measured.gpu_hours, 2),
        "min_observed_hours": None if measured is None else _number(measured.min_observed_hours, 2),
        "withheld": withheld,
        "requests_per_day": day(w.requests_per_day, 4),
        "gpu_seconds_per_request": _number(w.gpu_seconds_per_request, 4),
        "tokens_per_request": _number(w.tokens_per_request, 4),
        "bursts_per_day": _number(w.bursts_per_day, 4),
        "target_utilization": _number(result.target_utilization, 4),
        "pods": None if withheld else result.pods,
        "pod_usd_per_day": day(result.pod_usd_per_day, 2),
        "serverless_usd_per_day": day(result.serverless_usd_per_day, 2),
        "api_usd_per_day": day(result.api_usd_per_day, 2),
        "pod_usd_per_million_tokens": day(result.pod_usd_per_million_tokens, 4),
        "serverless_usd_per_million_tokens": _number(result.serverless_usd_per_million_tokens, 4),
        "api_usd_per_million_tokens": _number(result.api_usd_per_million_tokens, 4),
        "duty_cycle": day(result.duty_cycle, 4),
        "crossover_requests_per_day": result.crossover_requests_per_day,
        "crossover_utilization": _number(result.crossover_utilization, 4),
        "one_pod_crossover_requests_per_day": result.one_pod_crossover_requests_per_day,
        "cheapest": None if withheld else result.cheapest,
        "recommendation": f"none yet: {withheld}" if withheld else result.recommendation,
        "notes": [*extra, *notes(result, withheld is not None)],
    }
    return json_text.dumps(payload)


def _round(value: Decimal, places: int) -> Decimal:
    return value.quantize(Decimal(1).scaleb(-places), rounding=ROUND_HALF_UP)


def _number(value: Decimal | float | None, places: int) -> int | float | None:
    """A JSON number: rounded half up first, so the float's shortest repr is the rounded figure."""
    if value is None:
        return None
    if isinstance(value, float):
        value = Decimal(repr(value))
    rounded = _round(value, places)
    return int(rounded) if rounded == rounded.to_integral_value() else float(rounded)


def _plain(value: Decimal) -> str:
    """'2', '2.5', '0.000694': no exponent, no trailing zeros."""
    return f"{value.normalize():f}"


def _rate(value: Decimal) -> str:
    """A rate as given: '$2.72', '$2.50', but '$2.4984' rather than a rounded '$2.50'."""
    return usd(value) if value == cents(value) else f"${_plain(value)}"
