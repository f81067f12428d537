"""The simulated SGLang, TGI, llama.cpp and dcgm-exporter texts: their labels, number
formatting and values against the traffic's truth."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from agent.sim.dcgm import dcgm_value
from agent.sim.llamacpp import cpp_double
from agent.sim.render import VERSIONS, render
from agent.sim.tgi import DURATION_BUCKETS, rust_float
from collectors.engines.exposition import Exposition
from collectors.engines.registry import detect, read_by_a_mapper
from collectors.engines.rules import Context
from tests.enginesim.sim_helpers import assert_histogram, samples, traffic, value


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


@pytest.mark.parametrize("version", VERSIONS)
def test_the_families_a_scrape_drops_are_none_a_mapper_reads(version: str) -> None:
    # A scrape keeps only the families of collectors.engines.READ_FAMILIES (memory: two vLLM
    # bodies parsed at once held every sample of both). Every signal must come out the same.
    engines = 1 if version == "vllm-0.6" else 2  # V0 has no data parallelism
    t = traffic(models=("llama-8b", "qwen-7b"), engines=engines)
    for engine in range(engines):
        t.serve(12, engine=str(engine))
    text = render(version, t)
    context = Context("h1", "llm", "auto", "llama-8b", datetime(2026, 12, 2, tzinfo=UTC))
    whole = Exposition.parse(text)
    kept = Exposition.parse(text, keep=read_by_a_mapper)
    engine = detect(whole)

    assert engine is not None and detect(kept) is engine
    assert set(kept.names()) == set(whole.names())
    assert len(kept.families) < len(whole.families) or version in ("dcgm", "llamacpp")
    assert engine.map_samples(kept, context) == engine.map_samples(whole, context)
    assert engine.map_samples(kept, context)  # something to compare
