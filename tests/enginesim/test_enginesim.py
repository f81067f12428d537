"""The engine simulator: traffic truth, every version's text against the reference facts and
against prometheus_client itself, and the HTTP server's fault modes over real sockets."""

from __future__ import annotations

import math
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Summary
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString

from agent.enginesim import (
    ITL_CYCLE,
    PROFILES,
    VERSIONS,
    EngineServer,
    Traffic,
    content_type,
    cumulative_counts,
    render,
)
from agent.enginesim.dcgm import dcgm_value
from agent.enginesim.expo import Buckets, Family, Scalar, go_float, render_text
from agent.enginesim.expo import Summary as SummarySeries
from agent.enginesim.llamacpp import cpp_double
from agent.enginesim.tgi import DURATION_BUCKETS, rust_float
from agent.enginesim.vllm import API_SERVER_PIDS

T0 = 1_796_037_041.5
Labels = tuple[tuple[str, str], ...]
Samples = dict[tuple[str, Labels], float]


class Clock:
    def __init__(self, now: float = T0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def traffic(models: tuple[str, ...] = ("llama-8b",), engines: int = 1, gpus: int = 1) -> Traffic:
    return Traffic(models, engines, gpus=gpus, clock=Clock())


def samples(text: str) -> Samples:
    """Every sample as prometheus_client's parser reads it, keyed by name and sorted labels."""
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }


def families(text: str) -> dict[str, tuple[str, int]]:
    """Exposed family name (as in # TYPE) -> (type, number of samples)."""
    out: dict[str, tuple[str, int]] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ")
            out[name] = (kind, 0)
        elif line and not line.startswith("#"):
            name = re.split(r"[{ ]", line, maxsplit=1)[0]
            fam = next(f for f in (name, *_stems(name)) if f in out)
            out[fam] = (out[fam][0], out[fam][1] + 1)
    return out


def _stems(name: str) -> list[str]:
    return [name.removesuffix(s) for s in ("_bucket", "_count", "_sum") if name.endswith(s)]


def value(s: Samples, name: str, **labels: str) -> float:
    return s[(name, tuple(sorted(labels.items())))]


def assert_histogram(s: Samples, name: str, observed: tuple[float, ...], **labels: str) -> None:
    """Bucket counts, _count and _sum equal the truth, for whatever le set was printed."""
    key = tuple(sorted(labels.items()))
    buckets = {
        float(dict(ls)["le"]): v
        for (n, ls), v in s.items()
        if n == f"{name}_bucket" and tuple(p for p in ls if p[0] != "le") == key
    }
    bounds = sorted(b for b in buckets if not math.isinf(b))
    assert buckets, f"no buckets for {name}{labels}"
    expected = cumulative_counts(observed, bounds)
    assert tuple(buckets[b] for b in [*bounds, math.inf]) == expected
    assert s[(f"{name}_count", key)] == len(observed)
    assert s[(f"{name}_sum", key)] == pytest.approx(sum(observed))


# ----------------------------------------------------------------------------------------
# Traffic: the truth


def test_one_cycle_has_known_totals() -> None:
    t = traffic()
    t.serve(len(PROFILES))
    totals = t.totals()
    assert totals.requests == 12
    assert totals.prompt_tokens == sum(p.prompt_tokens for p in PROFILES) == 16765
    assert totals.cached_prompt_tokens == 6480
    assert totals.computed_prompt_tokens == 16765 - 6480
    assert totals.generation_tokens == 850
    assert totals.preemptions == 3
    assert dict(totals.finished) == {"stop": 6, "length": 3, "abort": 2, "error": 1}
    assert totals.successful == 9


def test_traffic_is_deterministic_and_exact() -> None:
    a, b = traffic(), traffic()
    assert a.serve(30) == b.serve(30)
    ttft = a.observed("ttft")
    assert ttft[:5] == (0.05, 0.25, 0.0008, 1.0, 12.5)  # exact decimals, bounds included
    assert all(len(repr(v)) <= 10 for v in a.observed("e2e"))
    assert len(a.observed("itl")) == sum(max(r.generation_tokens - 1, 0) for r in a.requests())
    assert set(a.observed("itl")) <= set(ITL_CYCLE)
    assert max(a.observed("e2e")) > 146  # above TGI's top duration bucket
    assert max(a.observed("itl")) > 2.5 and min(a.observed("itl")) < 0.002


def test_truth_filters_by_model_engine_and_reason() -> None:
    t = traffic(models=("a", "b"), engines=2)
    t.serve(12, model="a", engine="1")
    t.serve(5, model="b")
    assert t.totals(model="a").requests == 12
    assert t.totals(model="a", engine="0").requests == 0
    assert t.totals(model="b", engine="0").requests == 5
    ok = t.observed("e2e", model="a", reasons=("stop", "length"))
    assert len(ok) == 9
    with pytest.raises(ValueError):
        t.observed("nonsense")
    with pytest.raises(ValueError):
        t.serve(1, model="c")


def test_cumulative_counts_are_inclusive() -> None:
    assert cumulative_counts([0.1, 0.25, 0.3, 9.0], [0.25, 1.0]) == (2, 3, 4)


def test_restart_resets_engines_and_moves_start_time() -> None:
    clock = Clock()
    t = Traffic(clock=clock)
    t.serve(3)
    t.set_gauges(running=4, kv_usage=0.5)
    t.set_gpu(0, energy_mj=123)
    t.restart()  # same clock reading: still strictly later
    assert t.totals().requests == 0
    assert t.started_at > T0
    assert t.snapshot().gauges_of("llama-8b", "0").running == 0
    assert t.snapshot().gpus[0].energy_mj == 123


# ----------------------------------------------------------------------------------------
# The text is prometheus_client's own


@pytest.mark.parametrize("x", [0.0, 1.0, 0.1, 2.5, 7680.0, 16384.0, 123456.0, 1234567.0, T0, 1e-7])
def test_go_float_matches_prometheus_client(x: float) -> None:
    assert go_float(x) == floatToGoString(x)


def test_single_process_text_matches_prometheus_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "time", lambda: T0)
    registry = CollectorRegistry()
    labels = ["model_name", "engine"]
    c = Counter("vllm:prompt_tokens", "Prompt.", labels, registry=registry)
    c.labels("m", "0").inc(1234567)
    c.labels("m", "1")
    Counter("vllm:never", "Never.", labels, registry=registry)
    g = Gauge("vllm:kv", "KV.", labels, registry=registry)
    g.labels("m", "0").set(0.25)
    h = Histogram("vllm:ttft", "TTFT.", labels, buckets=[0.25, 1, 7680], registry=registry)
    h.labels("m", "0").observe(0.25)
    h.labels("m", "0").observe(9000)
    sm = Summary("http_size", "Size.", ["handler"], registry=registry)
    sm.labels("/x").observe(3)
    ours = [
        Family(
            "vllm:prompt_tokens",
            "counter",
            "Prompt.",
            (
                Scalar((("model_name", "m"), ("engine", "0")), 1234567),
                Scalar((("model_name", "m"), ("engine", "1")), 0),
            ),
            T0,
        ),
        Family("vllm:never", "counter", "Never.", (), T0),
        Family("vllm:kv", "gauge", "KV.", (Scalar((("model_name", "m"), ("engine", "0")), 0.25),)),
        Family(
            "vllm:ttft",
            "histogram",
            "TTFT.",
            (
                Buckets(
                    (("model_name", "m"), ("engine", "0")), (0.25, 1, 7680), (1, 1, 1, 2), 9000.25
                ),
            ),
            T0,
        ),
        Family("http_size", "summary", "Size.", (SummarySeries((("handler", "/x"),), 1, 3.0),), T0),
    ]
    assert render_text(ours) == generate_latest(registry).decode()


_MP_SCRIPT = """
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
labels = ["model_name", "is_streaming"]
c = Counter("sglang:prompt_tokens_total", "Prompt.", labels)
c.labels("m", "true").inc(3)
Counter("sglang:never_total", "Never.", labels)
h = Histogram("sglang:queue_time_seconds", "Queue.", ["model_name"], buckets=[0.0, 0.001, 1])
h.labels("m").observe(0.0005)
h.labels("m").observe(2.0)
running = Gauge("sglang:running", "Running.", ["model_name"], multiprocess_mode="mostrecent")
running.labels("m").set(5)
Gauge("sglang:retracted", "Retracted.", ["model_name"]).labels("m").set(2)
registry = CollectorRegistry()
MultiProcessCollector(registry)
print(generate_latest(registry).decode(), end="")
"""


def _blocks(text: str) -> list[str]:
    text = re.sub(r'pid="\d+"', 'pid="PID"', text)
    return sorted("# HELP " + b for b in text.split("# HELP ") if b)


def test_multiprocess_text_matches_prometheus_client(tmp_path: Path) -> None:
    env = {"PROMETHEUS_MULTIPROC_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    real = subprocess.run(
        [sys.executable, "-c", _MP_SCRIPT], env=env, capture_output=True, text=True, check=True
    ).stdout
    ours = [
        Family(
            "sglang:prompt_tokens",
            "counter",
            "Prompt.",
            (Scalar((("model_name", "m"), ("is_streaming", "true")), 3),),
        ),
        Family("sglang:never", "counter", "Never.", ()),
        Family(
            "sglang:queue_time_seconds",
            "histogram",
            "Queue.",
            (Buckets((("model_name", "m"),), (0.0, 0.001, 1.0), (0, 1, 1, 2), 2.0005),),
        ),
        Family("sglang:running", "gauge", "Running.", (Scalar((("model_name", "m"),), 5),)),
        Family(
            "sglang:retracted",
            "gauge",
            "Retracted.",
            (Scalar((("model_name", "m"), ("pid", "PID")), 2),),
        ),
    ]
    assert _blocks(render_text(ours, multiprocess=True)) == _blocks(real)


# ----------------------------------------------------------------------------------------
# Every version parses, before and after traffic


@pytest.fixture(params=["idle", "served"])
def served(request: pytest.FixtureRequest) -> Traffic:
    t = traffic()
    if request.param == "served":
        t.serve(24)
        t.set_gauges(running=3, waiting=2, deferred=1, kv_usage=0.4567)
    return t


@pytest.mark.parametrize("version", VERSIONS)
def test_every_version_parses(version: str, served: Traffic) -> None:
    text = render(version, served)
    assert list(text_string_to_metric_families(text))
    assert text.endswith("\n")


@pytest.mark.parametrize("version", VERSIONS)
def test_every_version_passes_prometheus_own_parser(version: str, served: Traffic) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (`make test` installs Debian's prometheus as root)")
    result = subprocess.run(
        [promtool, "check", "metrics"],
        input=render(version, served),
        capture_output=True,
        text=True,
        check=False,
    )
    # Lint complaints (no _total on TGI counters, no HELP...) are the engines' real style.
    assert "error while linting" not in result.stdout + result.stderr


# ----------------------------------------------------------------------------------------
# Which families each version has (engine-metrics.md §1.2-1.4)

COMMON_V1 = {
    "vllm:num_requests_running",
    "vllm:num_requests_waiting",
    "vllm:num_preemptions_total",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
    "vllm:request_success_total",
    "vllm:time_to_first_token_seconds",
    "vllm:e2e_request_latency_seconds",
    "vllm:request_queue_time_seconds",
    "vllm:iteration_tokens_total",
    "vllm:cache_config_info",
}
PRESENT = {
    "vllm-0.6": {
        "vllm:gpu_cache_usage_perc",
        "vllm:num_requests_swapped",
        "vllm:time_per_output_token_seconds",
        "vllm:avg_prompt_throughput_toks_per_s",
        "vllm:avg_generation_throughput_toks_per_s",
        "vllm:time_in_queue_requests",
        "vllm:tokens_total",
        "python_gc_objects_collected_total",
        "process_start_time_seconds",
    },
    "vllm-0.8.5": COMMON_V1
    | {
        "vllm:gpu_cache_usage_perc",
        "vllm:gpu_prefix_cache_queries_total",
        "vllm:gpu_prefix_cache_hits_total",
        "vllm:time_per_output_token_seconds",
        "http_requests_total",
        "python_gc_objects_collected_total",
    },
    "vllm-0.10": COMMON_V1
    | {
        "vllm:gpu_cache_usage_perc",
        "vllm:kv_cache_usage_perc",
        "vllm:gpu_prefix_cache_queries_total",
        "vllm:prefix_cache_queries_total",
        "vllm:prefix_cache_hits_total",
        "vllm:time_per_output_token_seconds",
        "vllm:inter_token_latency_seconds",
    },
    "vllm-0.33": COMMON_V1
    | {
        "vllm:kv_cache_usage_perc",
        "vllm:num_requests_waiting_by_reason",
        "vllm:prefix_cache_hits_total",
        "vllm:prompt_tokens_by_source_total",
        "vllm:prompt_tokens_cached_total",
        "vllm:inter_token_latency_seconds",
        "vllm:request_time_per_output_token_seconds",
        "vllm:request_prefill_kv_computed_tokens",
        "vllm:request_num_preemptions",
        "http_request_duration_highr_seconds",
    },
}
ABSENT = {
    "vllm-0.6": {
        "vllm:kv_cache_usage_perc",
        "vllm:inter_token_latency_seconds",
        "http_requests_total",
    },
    "vllm-0.8.5": {
        "vllm:kv_cache_usage_perc",
        "vllm:prefix_cache_queries_total",
        "vllm:inter_token_latency_seconds",
        "vllm:num_requests_swapped",
        "vllm:avg_prompt_throughput_toks_per_s",
    },
    "vllm-0.10": {"vllm:request_time_per_output_token_seconds", "vllm:num_requests_swapped"},
    "vllm-0.33": {
        "vllm:gpu_cache_usage_perc",
        "vllm:gpu_prefix_cache_queries_total",
        "vllm:time_per_output_token_seconds",
        "vllm:num_requests_swapped",
        "vllm:avg_generation_throughput_toks_per_s",
    },
}


@pytest.mark.parametrize("version", list(PRESENT))
def test_vllm_families_per_version(version: str) -> None:
    t = traffic()
    t.serve(12)
    names = set(families(render(version, t)))
    assert PRESENT[version] <= names
    assert not ABSENT[version] & names


def test_v0_has_model_name_only_and_v1_adds_engine() -> None:
    t = traffic()
    t.serve(12)
    v0 = samples(render("vllm-0.6", t))
    assert ("vllm:prompt_tokens_total", (("model_name", "llama-8b"),)) in v0
    assert not any("engine" in dict(ls) for _, ls in v0)
    v1 = samples(render("vllm-0.8.5", t))
    assert value(v1, "vllm:prompt_tokens_total", model_name="llama-8b", engine="0") > 0


def test_deprecated_help_texts_in_0_10() -> None:
    text = render("vllm-0.10", traffic())
    assert re.search(r"# HELP vllm:gpu_cache_usage_perc .*DEPRECATED", text)
    assert re.search(r"# HELP vllm:time_per_output_token_seconds .*DEPRECATED", text)
    assert not re.search(r"# HELP vllm:kv_cache_usage_perc .*DEPRECATED", text)
    assert "number of queried blocks" in render("vllm-0.8.5", traffic())


# ----------------------------------------------------------------------------------------
# vLLM values equal the truth


@pytest.mark.parametrize("version", ["vllm-0.8.5", "vllm-0.10", "vllm-0.33"])
def test_v1_counters_and_histograms_equal_truth(version: str) -> None:
    t = traffic(models=("llama-8b", "qwen-7b"), engines=2)
    t.serve(12, model="llama-8b", engine="0")
    t.serve(7, model="llama-8b", engine="1")
    t.serve(30, model="qwen-7b", engine="1")
    s = samples(render(version, t))
    for model in t.models:
        for engine in t.engines:
            key = {"model_name": model, "engine": engine}
            truth = t.totals(model=model, engine=engine)
            assert value(s, "vllm:prompt_tokens_total", **key) == truth.prompt_tokens
            assert value(s, "vllm:generation_tokens_total", **key) == truth.generation_tokens
            assert value(s, "vllm:num_preemptions_total", **key) == truth.preemptions
            for reason in ("stop", "length"):
                got = value(s, "vllm:request_success_total", finished_reason=reason, **key)
                assert got == truth.finished[reason]
            observed = {
                m: t.observed(m, model=model, engine=engine)
                for m in ("ttft", "itl", "e2e", "queue")
            }
            assert_histogram(s, "vllm:time_to_first_token_seconds", observed["ttft"], **key)
            assert_histogram(s, "vllm:e2e_request_latency_seconds", observed["e2e"], **key)
            assert_histogram(s, "vllm:request_queue_time_seconds", observed["queue"], **key)
            itl = (
                "vllm:time_per_output_token_seconds"
                if version == "vllm-0.8.5"
                else "vllm:inter_token_latency_seconds"
            )
            assert_histogram(s, itl, observed["itl"], **key)


def test_finish_reasons_per_version() -> None:
    t = traffic()
    t.serve(12)  # one error, two aborts
    old = samples(render("vllm-0.10", t))
    assert (
        value(
            old,
            "vllm:request_success_total",
            model_name="llama-8b",
            engine="0",
            finished_reason="abort",
        )
        == 3
    )
    assert not any(dict(ls).get("finished_reason") == "error" for _, ls in old)
    new = samples(render("vllm-0.33", t))
    key = {"model_name": "llama-8b", "engine": "0"}
    assert value(new, "vllm:request_success_total", finished_reason="abort", **key) == 2
    assert value(new, "vllm:request_success_total", finished_reason="error", **key) == 1
    assert value(new, "vllm:request_success_total", finished_reason="repetition", **key) == 0


def test_0_33_prompt_tokens_by_source_and_waiting_by_reason() -> None:
    t = traffic()
    t.serve(12)
    t.set_gauges(waiting=5, deferred=2)
    s = samples(render("vllm-0.33", t))
    key = {"model_name": "llama-8b", "engine": "0"}
    truth = t.totals()
    by = {
        src: value(s, "vllm:prompt_tokens_by_source_total", source=src, **key)
        for src in ("local_compute", "local_cache_hit", "external_kv_transfer")
    }
    assert by == {
        "local_compute": truth.computed_prompt_tokens,
        "local_cache_hit": truth.cached_prompt_tokens,
        "external_kv_transfer": 0,
    }
    assert value(s, "vllm:prompt_tokens_total", **key) == sum(by.values())
    assert value(s, "vllm:prompt_tokens_cached_total", **key) == truth.cached_prompt_tokens
    assert value(s, "vllm:prefix_cache_hits_total", **key) == truth.cached_prompt_tokens
    assert value(s, "vllm:num_requests_waiting", **key) == 7
    assert value(s, "vllm:num_requests_waiting_by_reason", reason="deferred", **key) == 2
    assert_histogram(s, "vllm:request_time_per_output_token_seconds", t.observed("tpot"), **key)


def test_v0_is_empty_before_the_first_request() -> None:
    t = traffic()
    fams = families(render("vllm-0.6", t))
    for name in (
        "vllm:time_to_first_token_seconds",
        "vllm:e2e_request_latency_seconds",
        "vllm:request_success_total",
        "vllm:request_prompt_tokens",
    ):
        assert fams[name] == ("histogram" if "success" not in name else "counter", 0), name
    assert fams["vllm:prompt_tokens_total"] == ("counter", 1)
    assert fams["vllm:num_requests_running"] == ("gauge", 1)
    t.serve(3)  # stop, length, stop: no abort child yet
    s = samples(render("vllm-0.6", t))
    assert (
        value(s, "vllm:request_success_total", model_name="llama-8b", finished_reason="stop") == 2
    )
    assert not any(dict(ls).get("finished_reason") == "abort" for _, ls in s)
    assert_histogram(
        s, "vllm:time_to_first_token_seconds", t.observed("ttft"), model_name="llama-8b"
    )


def test_v1_children_exist_at_zero_from_startup() -> None:
    s = samples(render("vllm-0.33", traffic(engines=2)))
    for engine in ("0", "1"):
        key = {"model_name": "llama-8b", "engine": engine}
        assert value(s, "vllm:request_success_total", finished_reason="abort", **key) == 0
        assert value(s, "vllm:time_to_first_token_seconds_count", **key) == 0


def test_bucket_sets_differ_between_versions() -> None:
    t = traffic()
    t.serve(12)
    old = samples(render("vllm-0.6", t))
    new = samples(render("vllm-0.33", t))
    top = {"model_name": "llama-8b", "le": "10.0"}
    # 12.5, 45.1 and 150.05 lie above V0's top bucket.
    assert value(old, "vllm:time_to_first_token_seconds_bucket", **top) == 9
    assert (
        "vllm:time_to_first_token_seconds_bucket",
        tuple(sorted({**top, "le": "2560.0"}.items())),
    ) not in old
    assert (
        value(new, "vllm:time_to_first_token_seconds_bucket", engine="0", **{**top, "le": "2560.0"})
        == 12
    )


# ----------------------------------------------------------------------------------------
# _created and restarts


def _created_families(text: str) -> set[str]:
    return {n for n in families(text) if n.endswith("_created")}


@pytest.mark.parametrize("version", ["vllm-0.8.5", "vllm-0.10", "vllm-0.33"])
def test_v1_single_process_has_created_for_counters_and_histograms(version: str) -> None:
    text = render(version, traffic())
    fams = families(text)
    wanted = {
        (n.removesuffix("_total") if kind == "counter" else n) + "_created"
        for n, (kind, count) in fams.items()
        if kind in ("counter", "histogram", "summary")
        and count
        and not n.startswith(("python_", "process_"))
    }
    assert _created_families(text) == wanted
    assert "vllm:prompt_tokens_created" in wanted
    assert "vllm:iteration_tokens_total_created" in wanted  # a histogram despite its name
    s = samples(text)
    assert value(s, "vllm:prompt_tokens_created", model_name="llama-8b", engine="0") == T0


@pytest.mark.parametrize(
    ("version", "mp"),
    [
        ("vllm-0.6", False),
        ("vllm-0.10", True),
        ("vllm-0.33", True),
        ("sglang-0.5", False),
        ("tgi-3", False),
        ("llamacpp", False),
        ("dcgm", False),
    ],
)
def test_no_created_elsewhere(version: str, mp: bool) -> None:
    t = traffic()
    t.serve(12)
    assert not _created_families(render(version, t, multiprocess=mp))


def test_restart_resets_counters_and_moves_created() -> None:
    clock = Clock()
    t = Traffic(clock=clock)
    t.serve(12)
    before = samples(render("vllm-0.33", t))
    key = {"model_name": "llama-8b", "engine": "0"}
    assert value(before, "vllm:prompt_tokens_total", **key) > 0
    clock.now = T0 + 600
    t.restart()
    after = samples(render("vllm-0.33", t))
    assert value(after, "vllm:prompt_tokens_total", **key) == 0
    assert value(after, "vllm:e2e_request_latency_seconds_count", **key) == 0
    assert value(after, "vllm:prompt_tokens_created", **key) == T0 + 600
    assert value(after, "process_start_time_seconds") == T0 + 600


def test_multiprocess_0_10_has_pid_on_kv_cache_usage_only() -> None:
    t = traffic(engines=2)
    t.serve(12)
    t.set_gauges(engine="1", kv_usage=0.5)
    text = render("vllm-0.10", t, multiprocess=True)
    s = samples(text)
    kv = {ls: v for (n, ls), v in s.items() if n == "vllm:kv_cache_usage_perc"}
    assert len(kv) == 2 * len(API_SERVER_PIDS)
    assert all("pid" in dict(ls) for ls in kv)
    assert (
        value(
            s,
            "vllm:kv_cache_usage_perc",
            model_name="llama-8b",
            engine="1",
            pid=str(API_SERVER_PIDS[0]),
        )
        == 0.5
    )
    assert not [
        ls for (n, ls), _ in s.items() if "pid" in dict(ls) and n != "vllm:kv_cache_usage_perc"
    ]
    assert "python_gc" not in text and "process_" not in text
    assert re.search(r"vllm:e2e_request_latency_seconds_sum\{.*\n.*_bucket", text)  # _sum first
    # From 0.12 the gauge is mostrecent: no pid.
    assert "pid=" not in render("vllm-0.33", t, multiprocess=True)
    with pytest.raises(ValueError):
        render("vllm-0.8.5", t, multiprocess=True)


# ----------------------------------------------------------------------------------------
# SGLang, TGI, llama.cpp, dcgm


def test_sglang_labels_values_and_multiprocess_shape() -> None:
    t = traffic(engines=2)
    assert "sglang:prompt_tokens_total" not in render("sglang-0.5", t)  # lazily created
    t.serve(12, engine="0")
    t.serve(12, engine="1")
    t.set_gauges(engine="1", kv_usage=0.456, running=7)
    text = render("sglang-0.5", t)
    s = samples(text)
    truth = t.totals()
    tok = {"model_name": "llama-8b", "engine_type": "unified"}
    prompt = sum(
        value(s, "sglang:prompt_tokens_total", is_streaming=x, **tok) for x in ("true", "false")
    )
    assert prompt == truth.prompt_tokens
    assert (
        value(s, "sglang:cached_tokens_total", cache_source="device", **tok)
        == truth.cached_prompt_tokens
    )
    assert value(s, "sglang:num_requests_total", **tok) == 24
    assert value(s, "sglang:num_aborted_requests_total", **tok) == 4
    sched = {**tok, "tp_rank": "0", "pp_rank": "0", "moe_ep_rank": "0", "dp_rank": "1"}
    assert value(s, "sglang:token_usage", **sched) == 0.46
    assert value(s, "sglang:num_running_reqs", **sched) == 7
    assert value(s, "sglang:num_retracted_reqs", pid="911", **sched) == 0
    assert 'le="0.0"' in text
    assert_histogram(s, "sglang:queue_time_seconds", t.observed("queue", engine="1"), **sched)
    assert_histogram(s, "sglang:inter_token_latency_seconds", t.observed("itl"), **tok)
    streaming = tuple(v for r in t.requests() if r.streaming for v in r.observations("ttft"))
    assert_histogram(s, "sglang:time_to_first_token_seconds", streaming, is_streaming="true", **tok)
    assert "_created" not in text and "python_" not in text
    assert re.search(r"sglang:queue_time_seconds_sum\{.*\n.*_bucket", text)


def test_sglang_priority_label_holds_totals() -> None:
    t = traffic()
    t.serve(12)
    s = samples(render("sglang-0.5", t, priority=True))
    assert (
        value(
            s,
            "sglang:num_requests_total",
            model_name="llama-8b",
            engine_type="unified",
            priority="",
        )
        == 12
    )


def test_tgi_formatting_and_values() -> None:
    t = traffic()
    assert "tgi_request_count" not in render("tgi-3", t)
    t.serve(12)
    text = render("tgi-3", t)
    assert "# HELP" not in text
    assert "\n# TYPE tgi_request_count counter\ntgi_request_count 12\n\n" in text
    assert "tgi_request_success 9\n" in text
    assert 'tgi_request_failure{err="generation"} 1\n' in text
    assert 'tgi_request_duration_bucket{le="0.00015000000000000001"} 0\n' in text
    assert "tgi_queue_size 0\n" in text
    assert "model_name" not in text
    assert not re.search(r"_total[{ ]", text)
    assert "time_to_first_token" not in text
    s = samples(text)
    ok = [r for r in t.requests() if r.successful]
    assert s[("tgi_request_input_length_sum", ())] == t.totals().prompt_tokens
    assert s[("tgi_request_generated_tokens_sum", ())] == sum(r.generation_tokens for r in ok)
    assert_histogram(s, "tgi_request_duration", tuple(r.e2e_latency for r in ok))
    les = re.findall(r'tgi_request_duration_bucket\{le="([^"]+)"\}', text)
    assert les[:3] == ["0.00015000000000000001", "0.00022500000000000002", "0.0003375"]
    assert les[-1] == "+Inf" and len(les) == 36


def test_tgi_duration_buckets_are_the_iterated_geometric_series() -> None:
    assert len(DURATION_BUCKETS) == 35
    assert DURATION_BUCKETS[0] == 0.0001 * 1.5
    assert DURATION_BUCKETS[-1] == pytest.approx(0.0001 * 1.5**35)
    assert 145 < DURATION_BUCKETS[-1] < 147


@pytest.mark.parametrize(
    ("x", "text"),
    [
        (3.0, "3"),
        (0.5, "0.5"),
        (262144.0, "262144"),
        (1e-7, "0.0000001"),
        (1e21, "1000000000000000000000"),
        (0.0001 * 1.5, "0.00015000000000000001"),
    ],
)
def test_rust_float(x: float, text: str) -> None:
    assert rust_float(x) == text


def test_llamacpp_values_and_doubles() -> None:
    t = traffic()
    t.serve(12)
    text = render("llamacpp", t)
    truth = t.totals()
    assert f"llamacpp:prompt_tokens_total {truth.computed_prompt_tokens}\n" in text
    assert f"llamacpp:prompt_tokens_cached_total {truth.cached_prompt_tokens}\n" in text
    assert f"llamacpp:tokens_predicted_total {truth.generation_tokens}\n" in text
    assert "{" not in text
    assert text.index("# TYPE llamacpp:n_tokens_max counter") < text.index("gauge")
    s = samples(text)
    assert value(s, "llamacpp:prompt_tokens_seconds") > 0


@pytest.mark.parametrize(
    ("x", "text"),
    [(143.0, "143"), (2165780.0, "2.16578e+06"), (0.5, "0.5"), (12.345678, "12.3457")],
)
def test_cpp_double(x: float, text: str) -> None:
    assert cpp_double(x) == text


def test_llamacpp_loses_precision_past_a_million() -> None:
    t = traffic()
    t.serve(12 * 100 + 1)
    computed = t.totals().computed_prompt_tokens
    assert computed > 1_000_000
    assert f"llamacpp:prompt_tokens_total {computed:g}\n" in render("llamacpp", t)
    assert samples(render("llamacpp", t))[("llamacpp:prompt_tokens_total", ())] != computed


def test_dcgm_formatting_and_values() -> None:
    t = traffic(gpus=2)
    t.set_gpu(1, util_pct=87, power_w=300.0, fb_used_mib=70000, energy_mj=123456789)
    text = render("dcgm", t)
    g1 = t.snapshot().gpus[1]
    labels = (
        f'gpu="1",UUID="{g1.uuid}",pci_bus_id="{g1.pci_bus_id}",device="nvidia1",'
        f'modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-box-01"'
    )
    assert f"DCGM_FI_DEV_POWER_USAGE{{{labels}," in text
    assert re.search(r'DCGM_FI_DEV_POWER_USAGE\{gpu="1".*\} 300\.000000\n', text)
    assert re.search(r'DCGM_FI_DEV_GPU_UTIL\{gpu="1".*\} 87\n', text)
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter" in text
    assert re.search(r'DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION\{gpu="1".*\} 123456789\n', text)
    s = {(n, dict(ls)["gpu"]): v for (n, ls), v in samples(text).items()}
    total = (
        s[("DCGM_FI_DEV_FB_USED", "1")]
        + s[("DCGM_FI_DEV_FB_FREE", "1")]
        + s[("DCGM_FI_DEV_FB_RESERVED", "1")]
    )
    assert total == 81559
    assert dcgm_value(69.5) == "69.500000" and dcgm_value(31) == "31"


# ----------------------------------------------------------------------------------------
# The server, over real HTTP


@pytest.fixture
def client() -> Iterator[httpx.Client]:
    with httpx.Client(timeout=5.0) as c:
        yield c


@pytest.mark.parametrize("version", VERSIONS)
def test_server_serves_the_render_with_its_content_type(version: str, client: httpx.Client) -> None:
    t = traffic()
    with EngineServer(version, t) as server:
        assert server.url.startswith("http://127.0.0.1:") and server.url.endswith("/metrics")
        t.serve(12)  # while it runs
        expected = render(version, t)  # before the read: llama.cpp's read resets a gauge
        r = client.get(server.url, headers={"Accept": "text/plain"})
    assert r.status_code == 200
    assert r.headers["content-type"] == content_type(version)
    assert r.text == expected


def test_content_types() -> None:
    assert content_type("vllm-0.10") == "text/plain; version=0.0.4; charset=utf-8"
    assert content_type("vllm-0.33") == "text/plain; version=1.0.0; charset=utf-8"
    assert content_type("sglang-0.5") == "text/plain; version=0.0.4; charset=utf-8"
    for version in ("tgi-3", "llamacpp", "dcgm"):
        assert content_type(version) == "text/plain; version=0.0.4"


def test_server_records_headers_and_requires_the_token(client: httpx.Client) -> None:
    with EngineServer("vllm-0.33", traffic(), token="s3cret") as server:
        assert client.get(server.url).status_code == 401
        assert client.get(server.url, headers={"Authorization": "Bearer wrong"}).status_code == 401
        ok = client.get(
            server.url, headers={"Authorization": "Bearer s3cret", "Accept": "text/plain"}
        )
        recorded = server.requests
    assert ok.status_code == 200
    assert recorded[-1].header("authorization") == "Bearer s3cret"
    assert recorded[-1].header("Accept") == "text/plain"
    assert recorded[0].header("Authorization") is None


def test_server_rejects_bad_options_at_construction() -> None:
    with pytest.raises(ValueError):
        EngineServer("vllm-0.7", traffic())
    with pytest.raises(ValueError):
        EngineServer("vllm-0.6", traffic(engines=2))
    with pytest.raises(ValueError):
        EngineServer("tgi-3", traffic(), multiprocess=True)


def test_server_fault_modes(client: httpx.Client) -> None:
    with EngineServer("vllm-0.10", traffic()) as server:
        assert client.get(server.url.replace("/metrics", "/other")).status_code == 404
        server.mode = "404"
        assert client.get(server.url).status_code == 404
        server.mode = "500"
        assert client.get(server.url).status_code == 500
        server.mode = "malformed"
        r = client.get(server.url)
        assert r.status_code == 200
        with pytest.raises(ValueError):
            list(text_string_to_metric_families(r.text))
        server.mode = "ok"
        assert client.get(server.url).status_code == 200
        with pytest.raises(ValueError):
            server.mode = "sideways"


def test_server_slow_mode(client: httpx.Client) -> None:
    with EngineServer("tgi-3", traffic(), mode="slow", slow_seconds=0.6) as server:
        with pytest.raises(httpx.ReadTimeout):
            client.get(server.url, timeout=0.2)
        started = time.monotonic()
        assert client.get(server.url, timeout=5).status_code == 200
        assert time.monotonic() - started >= 0.6


def test_server_oversized_mode_streams_more_than_the_limit(client: httpx.Client) -> None:
    server = EngineServer("vllm-0.33", traffic(), mode="oversized")
    with server, client.stream("GET", server.url) as r:
        assert "content-length" not in r.headers
        size = sum(len(chunk) for chunk in r.iter_bytes())
    assert size > 11 * 1024 * 1024


def test_server_stops_while_a_client_streams(client: httpx.Client) -> None:
    server = EngineServer("dcgm", traffic(), mode="oversized", oversized_bytes=50 * 1024 * 1024)
    with server, client.stream("GET", server.url) as r:
        next(r.iter_bytes())
    # Leaving both blocks closed the stream and joined the handler: nothing left running.


def test_server_negotiates_openmetrics_where_the_engine_does(client: httpx.Client) -> None:
    om = {"Accept": "application/openmetrics-text; version=1.0.0"}
    t = traffic()
    t.serve(12)
    with EngineServer("vllm-0.6", t) as old, EngineServer("vllm-0.8.5", t) as new:
        r_old = client.get(old.url, headers=om)
        r_new = client.get(new.url, headers=om)
    assert r_old.headers["content-type"].startswith("application/openmetrics-text")
    assert r_old.text.endswith("# EOF\n")
    assert "vllm:prompt_tokens_total{" in r_old.text  # the colon kept, as older clients did
    names = {f.name for f in openmetrics_families(r_old.text)}
    assert {"vllm:prompt_tokens", "vllm:time_to_first_token_seconds"} <= names
    assert r_new.headers["content-type"] == content_type("vllm-0.8.5")
    assert "# EOF" not in r_new.text


def test_llamacpp_read_resets_throughput_and_model_query(client: httpx.Client) -> None:
    t = traffic(models=("a", "b"))
    t.serve(12, model="b")
    with EngineServer("llamacpp", t) as server:
        first = client.get(server.url, params={"model": "b"}).text
        second = client.get(server.url, params={"model": "b"}).text
    assert f"llamacpp:tokens_predicted_total {t.totals(model='b').generation_tokens}\n" in first
    assert "llamacpp:prompt_tokens_seconds 0\n" not in first
    assert "llamacpp:prompt_tokens_seconds 0\n" in second  # the bucket reset on the first read
    assert t.requests(model="b")  # counters are unaffected
