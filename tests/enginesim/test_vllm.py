"""The simulated vLLM versions against the reference facts: which families each version
has, counters and histograms equal to the traffic's truth, _created and restarts, and the
multiprocess shape of 0.10 and later."""

from __future__ import annotations

import re

import pytest

from agent.sim.render import render
from agent.sim.traffic import Traffic
from agent.sim.vllm import API_SERVER_PIDS
from tests.enginesim.sim_helpers import (
    T0,
    Clock,
    assert_histogram,
    families,
    samples,
    traffic,
    value,
)

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
