"""Triton, NIM, LMDeploy and Dynamo: their /metrics bodies (tests/fixtures/engines-real, whose
README names where each came from) through ``engine = "auto"`` and the mapper, every figure
checked against the raw lines it came from, with the arithmetic written out here."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from collectors.base import Sample
from collectors.engines.exposition import Exposition
from collectors.engines.registry import detect, read_by_a_mapper
from collectors.engines.rules import Context
from collectors.signals import signal_of

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "engines-real"
ENGINE_OF = {
    "triton/densenet-onnx.txt": "triton",
    "triton/tensorrtllm-backend-readme.txt": "triton",
    "triton/issue-8561-failure-reasons.txt": "triton",
    "triton/first-response-histogram-docs.txt": "triton",
    "triton/trtllm-dynamo-docs.txt": "triton",
    "nim/llama-3.1-8b-instruct.txt": "nim",
    "lmdeploy/internlm2_5-7b-chat.txt": "lmdeploy",
    "dynamo/qwen3-0.6b-frontend.txt": "dynamo",
}
E = "gpuwatch_engine_"


def mapped(text: str, configured_model: str = "configured-model") -> list[Sample]:
    """As a scrape does with ``engine = "auto"``: parse keeping what a mapper reads, detect, map."""
    exposition = Exposition.parse(text, keep=read_by_a_mapper)
    engine = detect(exposition)
    assert engine is not None
    context = Context("box", "target", engine.name, configured_model, datetime.now(UTC))
    return engine.map_samples(exposition, context)


def fixture(name: str) -> list[Sample]:
    return mapped((FIXTURES / name).read_text())


def value(samples: list[Sample], metric: str, **labels: str) -> float:
    (found,) = [s.value for s in samples if s.metric == E + metric
                and all(s.labels.get(k) == v for k, v in labels.items())]  # fmt: skip
    return found


def absent(samples: list[Sample], metric: str) -> bool:
    return not any(s.metric.startswith(E + metric) for s in samples)


def buckets(samples: list[Sample], metric: str) -> dict[str, float]:
    return {s.labels["le"]: s.value for s in samples if s.metric == E + metric + "_bucket"}


def test_every_capture_is_recognised_by_auto_as_its_engine() -> None:
    found = {str(p.relative_to(FIXTURES)) for p in FIXTURES.glob("*/*.txt")}
    assert found == set(ENGINE_OF)
    for name, engine in ENGINE_OF.items():
        exposition = Exposition.parse((FIXTURES / name).read_text(), keep=read_by_a_mapper)
        detected = detect(exposition)
        assert detected is not None and detected.name == engine, name


def test_nim_maps_like_vllm_without_the_prefix() -> None:
    s = fixture("nim/llama-3.1-8b-instruct.txt")
    m = {"model": "meta/llama-3.1-8b-instruct"}  # model_name, not the configured model
    assert {x.labels["model"] for x in s} == {m["model"]}
    # num_requests_running 1.0, num_requests_waiting 0.0, gpu_cache_usage_perc 0.000284...
    assert value(s, "requests_running", **m) == 1.0
    assert value(s, "requests_waiting", **m) == 0.0
    assert value(s, "kv_cache_usage_ratio", **m) == 0.0002848191398461977
    # prompt_tokens_total 109.0, generation_tokens_total 174.0
    assert value(s, "prompt_tokens_total", **m) == 109.0
    assert value(s, "generation_tokens_total", **m) == 174.0
    # request_finish_total{finished_reason="length"} 5.0; request_success_total (5.0, no
    # reason) is not added to it: one count of the same five requests.
    assert value(s, "requests_finished_total", reason="length", **m) == 5.0
    assert sum(x.value for x in s if x.metric == E + "requests_finished_total") == 5.0
    # request_generation_tokens_sum 174.0 over _count 5.0: every generated token belongs to a
    # finished request, so nothing was abandoned (174 - 174 = 0).
    assert value(s, "completed_generation_tokens_total", **m) == 174.0
    assert value(s, "requests_completed_total", **m) == 5.0
    assert value(s, "completed_prompt_tokens_total", **m) == 109.0
    # TTFT: le 0.02 -> 2, 0.04 -> 4, 0.75 -> 5, +Inf 5; _sum 0.6119842529296875 s.
    ttft = buckets(s, "ttft_seconds")
    assert (ttft["0.02"], ttft["0.04"], ttft["0.75"], ttft["+Inf"]) == (2.0, 4.0, 5.0, 5.0)
    assert value(s, "ttft_seconds_sum", **m) == 0.6119842529296875
    # No inter_token_latency family: time_per_output_token's 169 observations, 1.8568... s.
    assert value(s, "inter_token_latency_seconds_count", **m) == 169.0
    assert value(s, "inter_token_latency_seconds_sum", **m) == 1.856855869293213
    assert value(s, "e2e_latency_seconds_count", **m) == 5.0
    assert absent(s, "queue_time_seconds")  # no request_queue_time_seconds in this build


def test_triton_core_counts_requests_per_model_and_no_tokens_or_latencies() -> None:
    s = fixture("triton/densenet-onnx.txt")
    assert len({x.labels["model"] for x in s}) == 8  # every loaded model, versions summed
    d = {"model": "densenet_onnx"}
    # nv_inference_request_success{model="densenet_onnx",version="1"} 3, failure 0
    assert value(s, "requests_finished_total", reason="completed", **d) == 3.0
    assert value(s, "requests_finished_total", reason="error", **d) == 0.0
    # nv_inference_pending_request_count{model="densenet_onnx",version="1"} 0
    assert value(s, "requests_waiting", **d) == 0.0
    # nv_inference_request_duration_us 1327965 and queue_duration_us 145 are cumulative
    # microsecond counters (a mean at best), never a latency histogram; no token counters.
    for signal in ("e2e_latency", "queue_time", "ttft", "prompt_tokens", "generation_tokens"):
        assert absent(s, signal), signal
    assert absent(s, "requests_running") and absent(s, "kv_cache_usage")  # no TRT-LLM here


def test_triton_tensorrt_llm_running_and_kv_usage() -> None:
    s = fixture("triton/tensorrtllm-backend-readme.txt")
    t = {"model": "tensorrt_llm"}
    # nv_trt_llm_request_metrics{request_type="scheduled"} 1: in this iteration's batch
    assert value(s, "requests_running", **t) == 1.0
    # No "fraction" row in this README version: used 1 over max 6239 blocks.
    assert value(s, "kv_cache_usage_ratio", **t) == 1 / 6239
    # No "waiting" row and no nv_inference_pending_request_count: the queue is unknown.
    assert absent(s, "requests_waiting") and absent(s, "requests_finished")


def test_triton_failure_reasons_a_cancel_is_abandoned_work() -> None:
    text = (FIXTURES / "triton/issue-8561-failure-reasons.txt").read_text()
    s = mapped(text)
    r = {"model": "resnet_50"}
    assert value(s, "requests_finished_total", reason="completed", **r) == 2.0  # success 2
    assert value(s, "requests_finished_total", reason="abort", **r) == 0.0  # CANCELED 0
    assert value(s, "requests_finished_total", reason="error", **r) == 0.0  # OTHER+BACKEND+...
    # The same body edited by us, so the reasons are not all zero: CANCELED 3, REJECTED 1.
    edited = text.replace('reason="CANCELED",version="1"} 0', 'reason="CANCELED",version="1"} 3')
    edited = edited.replace('reason="REJECTED",version="1"} 0', 'reason="REJECTED",version="1"} 1')
    e = mapped(edited)
    assert value(e, "requests_finished_total", reason="abort", **r) == 3.0
    assert value(e, "requests_finished_total", reason="error", **r) == 1.0  # 0 + 0 + 1


def test_triton_first_response_histogram_from_milliseconds_to_seconds() -> None:
    s = fixture("triton/first-response-histogram-docs.txt")
    # le="100" 8, "500" 30, "2000" 36, "5000" 37, "+Inf" 37 (ms): the same counts at 0.1,
    # 0.5, 2 and 5 s; _sum 10771 ms is 10.771 s; _count 37 unchanged.
    assert buckets(s, "ttft_seconds") == {"0.1": 8.0, "0.5": 30.0, "2.0": 36.0, "5.0": 37.0,
                                          "+Inf": 37.0}  # fmt: skip
    assert value(s, "ttft_seconds_sum", model="my_model") == 10.771
    assert value(s, "ttft_seconds_count", model="my_model") == 37.0


def test_trtllm_serve_names_are_read_under_triton() -> None:
    s = fixture("triton/trtllm-dynamo-docs.txt")
    q = {"model": "Qwen/Qwen3-0.6B"}  # model_name; engine_type="trtllm" is summed away
    # request_success_total{finished_reason="stop"} 150.0, "length" 5.0
    assert value(s, "requests_finished_total", reason="stop", **q) == 150.0
    assert value(s, "requests_finished_total", reason="length", **q) == 5.0
    # TTFT le 0.01 -> 0, 0.05 -> 12 (the docs' example prints no +Inf: kept as printed),
    # _count 150, _sum 8.75 s
    assert buckets(s, "ttft_seconds") == {"0.01": 0.0, "0.05": 12.0}
    assert value(s, "ttft_seconds_count", **q) == 150.0
    assert value(s, "ttft_seconds_sum", **q) == 8.75
    # time_per_output_token: per request (150 of them, 12.5 s summed), read as the ITL
    assert value(s, "inter_token_latency_seconds_sum", **q) == 12.5
    assert value(s, "e2e_latency_seconds_sum", **q) == 45.2
    assert value(s, "queue_time_seconds_sum", **q) == 32.1
    for signal in ("requests_running", "requests_waiting", "kv_cache", "prompt_tokens"):
        assert absent(s, signal), signal  # not in this example


def test_lmdeploy_tokens_and_finish_reasons() -> None:
    s = fixture("lmdeploy/internlm2_5-7b-chat.txt")
    m = {"model": "internlm/internlm2_5-7b-chat"}
    assert value(s, "requests_running", **m) == 1.0  # num_requests_running 1.0
    assert value(s, "requests_waiting", **m) == 2.0  # num_requests_waiting 2.0
    assert value(s, "kv_cache_usage_ratio", **m) == 0.25  # gpu_cache_usage_perc 0.25
    # prompt_tokens_total 814.0 = 100 + 200 + 50 + 400 finished + 64 of the running request;
    # generation_tokens_total 78.0 = 20 + 10 + 5 + 40 + 3.
    assert value(s, "prompt_tokens_total", **m) == 814.0
    assert value(s, "generation_tokens_total", **m) == 78.0
    # request_success_total: ResponseType.FINISH 3.0 + SUCCESS 0.0 completed; CANCEL 1.0
    # abandoned; the ten other types (all 0.0) errors.
    assert value(s, "requests_finished_total", reason="completed", **m) == 3.0
    assert value(s, "requests_finished_total", reason="abort", **m) == 1.0
    assert value(s, "requests_finished_total", reason="error", **m) == 0.0
    # Its per-request histograms observe the cancelled request too: no completed_* counters.
    assert absent(s, "completed_") and absent(s, "requests_completed")
    # TTFT _count 5 (every request's first token), _sum 0.92 = 0.05 + 0.2 + 0.03 + 0.6 + 0.04
    assert value(s, "ttft_seconds_count", **m) == 5.0
    assert value(s, "ttft_seconds_sum", **m) == 0.92
    # iter_token_latency _count 73 = 19 + 9 + 4 + 39 + 2 inter-token gaps
    assert value(s, "inter_token_latency_seconds_count", **m) == 73.0
    assert value(s, "e2e_latency_seconds_sum", **m) == 3.5500000000000003  # 0.5+0.6+0.25+2.2
    assert value(s, "queue_time_seconds_sum", **m) == 0.41  # 0.01 + 0.1 + 0.0 + 0.3
    assert value(s, "spec_decode_draft_tokens_total", **m) == 0.0  # registered, no drafting


def test_dynamo_frontend_disconnected_clients_are_abandoned_work() -> None:
    s = fixture("dynamo/qwen3-0.6b-frontend.txt")
    q = {"model": "qwen/qwen3-0.6b"}
    # queued_requests 7 wait for a first token; inflight_requests 10: 10 - 7 = 3 running
    assert value(s, "requests_waiting", **q) == 7.0
    assert value(s, "requests_running", **q) == 3.0
    # requests_total status="success" 9 (chat, stream) + 2 (completions, unary) = 11
    assert value(s, "requests_finished_total", reason="completed", **q) == 11.0
    # disconnected_clients 2 (unlabelled: the body's one model) are abandoned; they ended as
    # errors too, so of status="error" 3 the errors proper are 3 - 2 = 1.
    assert value(s, "requests_finished_total", reason="abort", **q) == 2.0
    assert value(s, "requests_finished_total", reason="error", **q) == 1.0
    # output_tokens_total 1189 (every streamed token); input_sequence_tokens_sum 15699
    assert value(s, "generation_tokens_total", **q) == 1189.0
    assert value(s, "prompt_tokens_total", **q) == 15699.0
    # output_sequence_tokens (1180) is observed for disconnected requests too: not "completed"
    assert absent(s, "completed_") and absent(s, "requests_completed")
    ttft = buckets(s, "ttft_seconds")
    assert (ttft["0.047"], ttft["0.1"], ttft["1.0"], ttft["+Inf"]) == (3.0, 8.0, 14.0, 16.0)
    assert value(s, "ttft_seconds_sum", **q) == 6.41
    # ITL: 64 gaps of 0.03125 s, 24 of 0.0625, 7 of 0.25 and one of 1.5: 96, 6.75 s
    assert value(s, "inter_token_latency_seconds_count", **q) == 96.0
    assert value(s, "inter_token_latency_seconds_sum", **q) == 6.75
    assert value(s, "e2e_latency_seconds_count", **q) == 14.0  # request_duration_seconds
    assert absent(s, "kv_cache_usage") and absent(s, "queue_time")  # not at the frontend


def test_dynamo_builds_with_error_type_count_cancellations_once() -> None:
    """Builds that label ``error_type`` say which errors were cancellations; the lines are
    those of a frontend exposition with that label (values ours)."""
    body = "\n".join((
        "# TYPE dynamo_frontend_requests_total counter",
        'dynamo_frontend_requests_total{endpoint="chat_completions",error_type="",'
        'model="m",request_type="stream",status="success"} 40',
        'dynamo_frontend_requests_total{endpoint="chat_completions",error_type="cancelled",'
        'model="m",request_type="stream",status="error"} 5',
        'dynamo_frontend_requests_total{endpoint="chat_completions",error_type="internal",'
        'model="m",request_type="stream",status="error"} 2',
        "# TYPE dynamo_frontend_disconnected_clients gauge",
        "dynamo_frontend_disconnected_clients 5",
        "",
    ))  # fmt: skip
    s = mapped(body)
    assert value(s, "requests_finished_total", reason="completed", model="m") == 40.0
    assert value(s, "requests_finished_total", reason="abort", model="m") == 5.0  # not 10
    assert value(s, "requests_finished_total", reason="error", model="m") == 2.0


@pytest.mark.parametrize("name", sorted(ENGINE_OF))
def test_every_sample_is_a_canonical_signal_with_the_engine_label(name: str) -> None:
    for sample in fixture(name):
        assert signal_of(sample.metric) is not None, sample.metric
        assert sample.labels["engine"] == ENGINE_OF[name]
