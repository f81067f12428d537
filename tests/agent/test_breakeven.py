"""Break-even arithmetic and `gpuwatch breakeven`: every figure of economics.md, exactly, and
the pod option right-sized to the load (whole GPUs at a target utilization)."""

from __future__ import annotations

import argparse
import io
import json
from collections.abc import Callable
from decimal import Decimal as D

import pytest

from agent.cli.breakeven import add_parser, run
from agent.cost.breakeven import (
    BreakevenError,
    Prices,
    Workload,
    cents,
    compare,
    cost_per_million_tokens,
    per_hour,
    percent,
    usd,
)
from agent.cost.measured import Measured
from foundation.errors import GpuwatchError

# The worked break-even of economics.md: 3,000 requests/day x 2 GPU-s, A100 80GB.
EXAMPLE = Workload(requests_per_day=D(3000), gpu_seconds_per_request=D(2))
RATES = Prices(pod_usd_per_hour=D("2.72"), serverless_usd_per_hour=D("2.50"))
WITH_API = Prices(D("2.72"), D("2.50"), api_usd_per_million_tokens=D("0.40"))
EXAMPLE_FLAGS = [
    "--requests-per-day",
    "3000",
    "--gpu-seconds-per-request",
    "2",
    "--pod-usd-per-hour",
    "2.72",
    "--serverless-usd-per-hour",
    "2.50",
]
EXAMPLE_TABLE = """\
gpuwatch breakeven: 3,000 requests/day x 2 GPU-s, duty cycle 6.9 % (given figures)
rates: pod $2.72/h, serverless $2.50/h, API n/a
pods: 1 (whole GPUs for 6,000 busy GPU-s/day at a 70.0 % target utilization; one carries 30,240
  requests/day)

option                   USD/day    USD/M tokens
pod x 1                    65.28             n/a
serverless                  4.17             n/a
API                          n/a             n/a

crossover         none: serverless stays cheaper than right-sized pods at some load however high;
                  one always-on pod pays off above 47,001 requests/day
recommendation    serverless: $4.17/day vs 1 pod $65.28/day at 3,000 requests/day (duty cycle
                  6.9 %); serverless stays cheaper than right-sized pods at some load however high
note              at a 70.0 % target a pod costs $3.89 per busy GPU-hour against serverless $2.50
note              one pod carries 30,240 requests/day at the target: the one-pod crossover is a load
                  it cannot carry
"""


# --- the worked break-even -------------------------------------------------------------------


def test_serverless_costs_4_17_a_day() -> None:
    result = compare(EXAMPLE, RATES)
    assert result.serverless_usd_per_day == D(3000) * 2 * D("2.50") / 3600  # exact, unrounded
    assert cents(result.serverless_usd_per_day) == D("4.17")
    assert usd(result.serverless_usd_per_day) == "$4.17"


def test_pod_costs_65_28_a_day() -> None:
    assert compare(EXAMPLE, RATES).pod_usd_per_day == D("65.28")


def test_crossover_is_47001_requests_a_day_floored() -> None:
    # economics.md's figure is one always-on pod's: right-sized or not, it is stated.
    assert compare(EXAMPLE, RATES).one_pod_crossover_requests_per_day == 47_001  # 47,001.6
    result = compare(EXAMPLE, RATES, pods=1)
    assert result.crossover_requests_per_day == 47_001
    # The definition: the largest count at which serverless still costs no more than the pod.
    at = compare(Workload(D(47_001), D(2)), RATES, pods=1)
    above = compare(Workload(D(47_002), D(2)), RATES, pods=1)
    assert at.serverless_usd_per_day <= at.pod_usd_per_day
    assert above.serverless_usd_per_day > above.pod_usd_per_day


def test_crossover_on_an_exact_integer_is_that_integer() -> None:
    # 1/h vs 1/h at 1 GPU-s: 86,400 requests cost exactly the pod's day.
    result = compare(Workload(D(10), D(1)), Prices(D(1), D(1)), pods=1)
    assert result.crossover_requests_per_day == 86_400
    assert result.crossover_utilization == D(1)


def test_duty_cycle_and_crossover_utilization() -> None:
    result = compare(EXAMPLE, RATES, pods=1)
    assert result.duty_cycle == D(6000) / D(86400)
    assert percent(result.duty_cycle) == "6.9 %"
    # The duty cycle of the crossover load: 47,001 x 2 s a day, one GPU 108.8 % busy.
    assert result.crossover_utilization == D(94_002) / D(86_400)
    assert percent(result.crossover_utilization) == "108.8 %"


def test_api_costs_1_20_a_day_and_wins() -> None:
    workload = Workload(D(3000), D(2), tokens_per_request=D(1000))
    result = compare(workload, WITH_API)
    assert result.api_usd_per_day == D("1.20")
    assert result.cheapest == "api"
    assert result.recommendation == (
        "API: $1.20/day vs serverless $4.17/day and 1 pod $65.28/day at 3,000 requests/day "
        "(duty cycle 6.9 %); serverless stays cheaper than right-sized pods at some load however "
        "high"
    )


def test_cost_per_million_tokens_of_each_option() -> None:
    result = compare(Workload(D(3000), D(2), tokens_per_request=D(1000)), WITH_API)
    assert result.pod_usd_per_million_tokens == D("21.76")  # 65.28 over 3 M tokens
    assert cents(result.serverless_usd_per_million_tokens or D(0)) == D("1.39")
    assert result.api_usd_per_million_tokens == D("0.40")


def test_without_tokens_there_is_no_api_or_per_million_figure() -> None:
    result = compare(EXAMPLE, WITH_API)
    assert result.api_usd_per_day is None
    assert result.pod_usd_per_million_tokens is None
    assert result.serverless_usd_per_million_tokens is None
    assert result.cheapest == "serverless"


def test_recommendation_for_the_example() -> None:
    assert compare(EXAMPLE, RATES, pods=1).recommendation == (
        "serverless: $4.17/day vs pod $65.28/day at 3,000 requests/day (duty cycle 6.9 %); "
        "a pod pays off above 47,001 requests/day"
    )


def test_pod_wins_under_dense_traffic() -> None:
    result = compare(Workload(D(40_000), D(2)), Prices(D("2.00"), D("2.50")), pods=1)
    assert result.cheapest == "pod"
    assert result.recommendation.startswith("pod: $48.00/day vs serverless $55.56/day")
    assert result.crossover_requests_per_day == 34_560
    # Right-sized at 70 %, 80,000 busy GPU-s need two GPUs: $96 a day, and serverless wins.
    sized = compare(Workload(D(40_000), D(2)), Prices(D("2.00"), D("2.50")))
    assert (sized.pods, sized.pod_usd_per_day, sized.cheapest) == (2, D(96), "serverless")
    # Run flat out, one GPU carries them and the pod wins again.
    full = compare(Workload(D(40_000), D(2)), Prices(D("2.00"), D("2.50")), target_utilization=D(1))
    assert (full.pods, full.cheapest) == (1, "pod")


# --- cold starts and scale-down windows ---------------------------------------------------------


def test_bursts_bill_cold_start_and_scaledown_window() -> None:
    workload = Workload(D(3000), D(2), bursts_per_day=D(10))
    prices = Prices(D("2.72"), D("2.50"), cold_start_seconds=D(20), scaledown_seconds=D(60))
    result = compare(workload, prices)
    # (6,000 busy + 10 x (20 + 60)) s x $2.50/h
    assert result.serverless_usd_per_day == D(6800) * D("2.50") / 3600
    assert usd(result.serverless_usd_per_day) == "$4.72"
    # The overhead is paid whatever the count: (65.28 x 3600 - 800 x 2.50) / (2.50 x 2) = 46,601.6
    assert result.one_pod_crossover_requests_per_day == 46_601
    assert compare(workload, prices, pods=1).crossover_requests_per_day == 46_601


def test_cold_start_prices_count_nothing_without_bursts() -> None:
    prices = Prices(D("2.72"), D("2.50"), cold_start_seconds=D(20), scaledown_seconds=D(60))
    assert (
        compare(EXAMPLE, prices).serverless_usd_per_day
        == compare(EXAMPLE, RATES).serverless_usd_per_day
    )


def test_overhead_above_the_pod_means_the_pod_always_wins() -> None:
    # 100 bursts x 20 min idle = 33.3 h billed a day: more than the pod's 24 h.
    workload = Workload(D(10), D(2), bursts_per_day=D(100))
    result = compare(workload, Prices(D(1), D(1), scaledown_seconds=D(1200)), pods=1)
    assert result.crossover_requests_per_day == 0
    assert result.crossover_utilization == 0
    assert result.cheapest == "pod"
    # Right-sized at 70 %, a pod costs $1.43 a busy hour against $1: past enough load,
    # serverless is cheaper again, overhead or not.
    sized = compare(workload, Prices(D(1), D(1), scaledown_seconds=D(1200)))
    assert (sized.cheapest, sized.crossover_requests_per_day) == ("pod", None)


def test_free_serverless_has_no_crossover() -> None:
    result = compare(EXAMPLE, Prices(D("2.72"), D(0)))
    assert result.one_pod_crossover_requests_per_day is None
    assert result.crossover_requests_per_day is None
    assert result.crossover_utilization is None
    assert result.recommendation.endswith(
        "serverless stays cheaper than a pod at any request count"
    )


# --- right-sized pods ----------------------------------------------------------------------------


def test_a_billion_requests_are_priced_on_16535_pods_and_serverless_wins() -> None:
    result = compare(Workload(D(10**9), D(1)), RATES)
    # 10^9 busy GPU-s a day over 86,400 x 0.7 per GPU = 16,534.4: 16,535 whole GPUs.
    assert result.pods == 16_535
    assert result.pod_usd_per_day == 16_535 * D("65.28")
    assert result.cheapest == "serverless"
    assert result.recommendation.startswith(
        "serverless: $694,444.44/day vs 16,535 pods $1,079,404.80/day at 1,000,000,000"
    )
    # With an API at $0.40/M and 1,000 tokens a request, the API is the cheapest of the three.
    api = compare(Workload(D(10**9), D(1), tokens_per_request=D(1000)), WITH_API)
    assert (api.cheapest, api.api_usd_per_day) == ("api", D(400_000))


def test_the_pod_cost_per_million_tokens_counts_every_pod() -> None:
    result = compare(Workload(D(200_000), D("0.8"), tokens_per_request=D(1000)), RATES)
    # 160,000 busy GPU-s a day: 2.6 GPUs at 70 %, so 3 pods, $195.84 a day over 200 M tokens.
    assert result.pods == 3
    assert result.pod_usd_per_million_tokens == 3 * D("65.28") / 200
    assert compare(Workload(D(1), D(1)), RATES).pods == 1  # at least one GPU to serve anything


def _pods_cheaper(requests: int, gpu_s: str, prices: Prices, u: str, bursts: int) -> bool:
    result = compare(
        Workload(D(requests), D(gpu_s), bursts_per_day=D(bursts)), prices, target_utilization=D(u)
    )
    return result.pod_usd_per_day < result.serverless_usd_per_day


@pytest.mark.parametrize(
    ("gpu_s", "pod", "u", "bursts", "cold", "crossover"),
    [
        # One pod carries 1,008 requests; the pod's day buys 576 on serverless; the second
        # pod loses until 1,152, the third and after win over their whole steps.
        ("60", "1", "0.7", 0, 0, 1_152),
        # Carries 1,536; 10 cold starts of 300 s a day: the third step is lost up to 3,389.
        ("45", "1.5", "0.8", 10, 300, 3_389),
    ],
)
def test_the_right_sized_crossover_is_where_pods_win_for_good(
    gpu_s: str, pod: str, u: str, bursts: int, cold: int, crossover: int
) -> None:
    prices = Prices(D(pod), D("2.50"), cold_start_seconds=D(cold))
    workload = Workload(D(0), D(gpu_s), bursts_per_day=D(bursts))
    assert compare(workload, prices, target_utilization=D(u)).crossover_requests_per_day == (
        crossover
    )
    # By brute force: serverless costs no more at the crossover, pods less at every load above
    # it (over many steps).
    assert not _pods_cheaper(crossover, gpu_s, prices, u, bursts)
    assert all(_pods_cheaper(r, gpu_s, prices, u, bursts) for r in range(crossover + 1, 12_000))


def test_no_right_sized_crossover_when_a_busy_hour_of_pod_costs_more_than_serverless() -> None:
    result = compare(EXAMPLE, RATES)  # $2.72 / 0.7 = $3.89 a busy hour against $2.50
    assert result.crossover_requests_per_day is None
    # Just past any step serverless is cheaper again: one past the 100th pod's load, say.
    assert not _pods_cheaper(100 * 30_240 + 1, "2", RATES, "0.7", 0)


def test_a_target_utilization_outside_0_to_1_is_refused() -> None:
    for bad in (D(0), D("1.5"), D("NaN")):
        with pytest.raises(BreakevenError):
            compare(EXAMPLE, RATES, target_utilization=bad)
    with pytest.raises(BreakevenError):
        compare(EXAMPLE, RATES, pods=0)


@pytest.mark.parametrize(
    "make",
    [
        lambda: Workload(D(-1), D(2)),
        lambda: Workload(D(1), D("NaN")),
        lambda: Workload(D(1), D(2), bursts_per_day=D("-0.5")),
        lambda: Prices(D(1), D("Infinity")),
        lambda: Prices(D(1), D(1), cold_start_seconds=D(-3)),
        lambda: Workload(D(1), 2.0),  # type: ignore[arg-type]
    ],
)
def test_bad_figures_are_refused(make: Callable[[], object]) -> None:
    with pytest.raises(BreakevenError):
        make()


# --- cost per million tokens (the L4 figure) ----------------------------------------------------


def test_l4_costs_0_28_per_million_tokens_when_busy() -> None:
    figure = cost_per_million_tokens(D("0.50"), D(500))  # 1.8 M tokens/h
    assert figure == D("0.50") / D("1.8")
    assert figure.quantize(D("0.0001")) == D("0.2778")
    assert usd(figure) == "$0.28"


@pytest.mark.parametrize(
    ("utilization", "expected"),
    [("0.9", "$0.31"), ("0.5", "$0.56"), ("0.1", "$2.78"), ("0.01", "$27.78")],
)
def test_l4_cost_scales_with_idle_time(utilization: str, expected: str) -> None:
    assert usd(cost_per_million_tokens(D("0.50"), D(500), D(utilization))) == expected


def test_cost_per_million_tokens_needs_tokens_and_some_utilization() -> None:
    with pytest.raises(BreakevenError):
        cost_per_million_tokens(D("0.50"), D(0))
    with pytest.raises(BreakevenError):
        cost_per_million_tokens(D("0.50"), D(500), D(0))


# --- billing units ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("amount", "unit", "exact", "printed"),
    [
        ("0.000694", "second", "2.4984", "$2.50"),
        ("0.000694", "s", "2.4984", "$2.50"),
        ("0.000625", "second", "2.25", "$2.25"),
        ("0.06667", "minute", "4.0002", "$4.00"),
        ("0.06667", "min", "4.0002", "$4.00"),
        ("2.72", "hour", "2.72", "$2.72"),
        ("2.72", "h", "2.72", "$2.72"),
        ("1592", "cents_per_hour_instance", "15.92", "$15.92"),
    ],
)
def test_per_hour_normalises_billing_units(
    amount: str, unit: str, exact: str, printed: str
) -> None:
    rate = per_hour(D(amount), unit)
    assert rate == D(exact)
    assert usd(rate) == printed


def test_lambda_instance_cents_per_gpu_hour() -> None:
    assert per_hour(D(1592), "cents_per_hour_instance", gpus=8) == D("1.99")


def test_unknown_billing_unit_is_refused() -> None:
    with pytest.raises(BreakevenError, match="fortnight"):
        per_hour(D(1), "fortnight")
    with pytest.raises(BreakevenError):
        per_hour(D(1), "hour", gpus=0)


# --- the CLI, in process ------------------------------------------------------------------------


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gpuwatch")
    add_parser(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(["breakeven", *argv])


def _run(*argv: str, measured: Callable[[str], Measured] | None = None) -> tuple[int, str]:
    out = io.StringIO()
    status = run(_parse(*argv), measured, out)
    return status, out.getvalue()


def test_table_for_the_economics_example() -> None:
    status, text = _run(*EXAMPLE_FLAGS)
    assert status == 0
    assert text == EXAMPLE_TABLE
    assert max(len(line) for line in text.splitlines()) <= 100


def test_table_with_tokens_api_and_cold_starts() -> None:
    status, text = _run(
        *EXAMPLE_FLAGS,
        "--tokens-per-request=1000",
        "--api-usd-per-million-tokens=0.40",
        "--bursts-per-day=10",
        "--cold-start-seconds=20",
        "--scaledown-seconds=60",
    )
    assert status == 0
    assert "overhead: 10 bursts/day x (20 s cold start + 60 s scale-down idle) = 800 s/day" in text
    assert "pod x 1                    65.28         21.7600" in text
    assert "serverless                  4.72          1.5741" in text
    assert "API                         1.20          0.4000" in text
    assert "recommendation    API: $1.20/day vs serverless $4.72/day and 1 pod $65.28/day" in text
    assert max(len(line) for line in text.splitlines()) <= 100


def test_json_for_the_economics_example() -> None:
    status, text = _run("--json", *EXAMPLE_FLAGS, "--tokens-per-request", "1000")
    assert status == 0
    payload = json.loads(text)
    assert payload["pod_usd_per_day"] == 65.28
    assert payload["serverless_usd_per_day"] == 4.17
    assert payload["api_usd_per_day"] is None
    # Right-sized at 70 %, pods never pay off at these rates; one always-on pod above 47,001.
    assert payload["crossover_requests_per_day"] is None
    assert payload["crossover_utilization"] is None
    assert payload["one_pod_crossover_requests_per_day"] == 47_001
    assert (payload["pods"], payload["target_utilization"]) == (1, 0.7)
    assert payload["duty_cycle"] == 0.0694
    assert payload["pod_usd_per_million_tokens"] == 21.76
    assert payload["serverless_usd_per_million_tokens"] == 1.3889
    assert payload["cheapest"] == "serverless"
    assert payload["recommendation"].startswith("serverless: $4.17/day vs 1 pod $65.28/day")
    assert payload["source"] == "given figures"
    assert (payload["measured_hours"], payload["withheld"]) == (None, None)


def test_json_with_the_api() -> None:
    _, text = _run(
        "--json", *EXAMPLE_FLAGS, "--tokens-per-request=1000", "--api-usd-per-million-tokens=0.40"
    )
    payload = json.loads(text)
    assert payload["api_usd_per_day"] == 1.2
    assert payload["api_usd_per_million_tokens"] == 0.4
    assert payload["cheapest"] == "api"


@pytest.mark.parametrize(
    ("drop", "named"),
    [
        ("--pod-usd-per-hour", ["--pod-usd-per-hour"]),
        ("--gpu-seconds-per-request", ["--gpu-seconds-per-request"]),
        ("--requests-per-day", ["--requests-per-day"]),
    ],
)
def test_a_missing_flag_is_named(
    drop: str, named: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    at = EXAMPLE_FLAGS.index(drop)
    argv = EXAMPLE_FLAGS[:at] + EXAMPLE_FLAGS[at + 2 :]
    status, text = _run(*argv, measured=lambda window: _measured(EXAMPLE))
    assert (status, text) == (2, "")
    err = capsys.readouterr().err
    for flag in named:
        assert flag in err


def test_the_issues_billion_requests_name_the_pods_and_the_default_serverless_price() -> None:
    argv = ["--requests-per-day", "1e9", "--gpu-seconds-per-request", "1"]
    status, text = _run(*argv, "--pod-usd-per-hour", "2.72")
    assert status == 0
    assert "pods: 16,535 (whole GPUs" in text
    assert "pod x 16,535        1,079,404.80" in text
    assert "recommendation    serverless: $694,444.44/day vs 16,535 pods $1,079,404.80/day" in text
    default = (
        "serverless at $2.50/h, a typical serverless A100 80GB: give --serverless-usd-per-hour"
    )
    assert default in _flat(text)
    _, text = _run("--json", *argv, "--pod-usd-per-hour", "2.72", "--target-utilization", "0.9")
    payload = json.loads(text)
    # 10^9 GPU-s over 86,400 x 0.9 = 12,860.1: 12,861 pods at $65.28.
    assert (payload["pods"], payload["target_utilization"]) == (12_861, 0.9)
    assert payload["pod_usd_per_day"] == 839_566.08
    assert payload["cheapest"] == "serverless"


def test_a_target_utilization_flag_out_of_range_is_an_argparse_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as exc:
        _parse("--target-utilization", "70")
    assert exc.value.code == 2
    assert "did you mean 0.7?" in capsys.readouterr().err


def test_the_pod_rate_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    status, _ = _run("--requests-per-day=1", "--gpu-seconds-per-request=1")
    assert status == 2
    assert "--pod-usd-per-hour" in capsys.readouterr().err


def test_without_workload_or_measured_data_the_flags_are_named(
    capsys: pytest.CaptureFixture[str],
) -> None:
    status, _ = _run("--pod-usd-per-hour=2.72", "--serverless-usd-per-hour=2.50")
    assert status == 2
    err = capsys.readouterr().err
    assert "--requests-per-day" in err
    assert "--gpu-seconds-per-request" in err


def _flat(text: str) -> str:
    """The table's words with its line wraps undone."""
    return " ".join(text.split())


def _measured(workload: Workload, hours: float = 720.0) -> Measured:
    return Measured(workload, observed_hours=hours, gpu_hours=hours, min_observed_hours=24.0)


def test_measured_workload_is_used_when_figures_are_absent() -> None:
    windows: list[str] = []

    def measured(window: str) -> Measured:
        windows.append(window)
        return _measured(Workload(D(3000), D(2), tokens_per_request=D(500)))

    rates = ["--pod-usd-per-hour=2.72", "--serverless-usd-per-hour=2.50"]
    status, text = _run("--json", *rates, measured=measured)
    assert status == 0
    assert windows == ["30d"]
    payload = json.loads(text)
    assert payload["serverless_usd_per_day"] == 4.17
    assert payload["tokens_per_request"] == 500
    assert payload["source"] == "measured over 720.0 h in the last 30d"
    assert (payload["measured_hours"], payload["min_observed_hours"]) == (720, 24)
    assert payload["withheld"] is None

    # A window is passed through; a flag the user gives beats the measured figure.
    status, text = _run("--window=7d", "--tokens-per-request=1000", *rates, measured=measured)
    assert status == 0
    assert windows == ["30d", "7d"]
    assert "(measured over 720.0 h in the last 7d)" in _flat(text)
    assert "tokens: 1,000 per request" in text


def test_measured_over_too_little_time_withholds_the_per_day_figures() -> None:
    workload = Workload(D(17_280), D("0.30877287606397778859527121"), D(71))
    status, text = _run("--pod-usd-per-hour=2.72", measured=lambda w: _measured(workload, 0.2))
    assert status == 0
    assert "(measured over 0.2 h in the last 30d)" in _flat(text)
    assert "0.309 GPU-s" in text and "0.30877" not in text  # figures for people
    assert "USD/day" not in text  # no per-day table
    assert "recommendation none yet: only 0.2 h observed" in _flat(text)
    assert "[cost] min_observed" in _flat(text)
    assert "crossover " in text  # a property of one request: still given
    _, text = _run("--json", "--pod-usd-per-hour=2.72", measured=lambda w: _measured(workload, 0.2))
    payload = json.loads(text)
    assert payload["withheld"].startswith("only 0.2 h observed")
    for key in ("pod_usd_per_day", "serverless_usd_per_day", "pods", "cheapest", "duty_cycle"):
        assert payload[key] is None, key
    # $2.72 a GPU-hour at 70 % is $3.89 a busy hour, against $2.50: right-sized pods never win.
    assert payload["crossover_requests_per_day"] is None
    assert "a pod costs $3.89 per busy GPU-hour against serverless $2.50" in " ".join(
        payload["notes"]
    )
    one_pod = D("65.28") * 3600 / (workload.gpu_seconds_per_request * D("2.50"))
    assert payload["one_pod_crossover_requests_per_day"] == int(one_pod) == 304_441


def test_given_figures_win_over_measured_data() -> None:
    def measured(window: str) -> Measured:
        raise AssertionError("not called when the figures are given")

    status, _ = _run(*EXAMPLE_FLAGS, measured=measured)
    assert status == 0


def test_measured_data_failure_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    def measured(window: str) -> Measured:
        raise GpuwatchError("no requests stored in the last 30d")

    status, _ = _run("--pod-usd-per-hour=2.72", "--serverless-usd-per-hour=2.5", measured=measured)
    assert status == 1
    assert "no requests stored in the last 30d" in capsys.readouterr().err


def test_a_bad_window_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    status, _ = _run("--window=a month", *EXAMPLE_FLAGS)
    assert status == 2
    assert "--window" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["abc", "-1", "nan", "inf"])
def test_a_bad_figure_is_an_argparse_error(value: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        _parse("--requests-per-day", value)
    assert exc.value.code == 2
    assert "--requests-per-day" in capsys.readouterr().err
