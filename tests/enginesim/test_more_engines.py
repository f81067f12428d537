"""The simulated Triton, NIM, LMDeploy and Dynamo against their captures
(tests/fixtures/engines-real): the same families, with the same TYPE and HELP, for everything a
mapper reads; and each dialect's number and label formatting."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from agent.sim.dynamo import TTFT, log_buckets
from agent.sim.render import render
from agent.sim.traffic import Traffic
from collectors.engines.registry import read_by_a_mapper
from tests.enginesim.sim_helpers import traffic

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "engines-real"
CAPTURE = {
    "triton-trtllm": ("triton/densenet-onnx.txt", "triton/tensorrtllm-backend-readme.txt",
                      "triton/first-response-histogram-docs.txt"),
    "nim": ("nim/llama-3.1-8b-instruct.txt",),
    "lmdeploy": ("lmdeploy/internlm2_5-7b-chat.txt",),
    "dynamo": ("dynamo/qwen3-0.6b-frontend.txt",),
}  # fmt: skip


def headers(text: str) -> dict[str, tuple[str, str]]:
    """Family name -> (TYPE, HELP) from the comment lines."""
    helps = dict(re.findall(r"^# HELP (\S+) (.*)$", text, re.MULTILINE))
    types = dict(re.findall(r"^# TYPE (\S+) (\S+)$", text, re.MULTILINE))
    return {name: (kind, helps.get(name, "")) for name, kind in types.items()}


def served() -> Traffic:
    t = traffic()
    t.serve(12)
    t.drop(2, after_tokens=4)
    return t


@pytest.mark.parametrize("version", sorted(CAPTURE))
def test_the_simulator_prints_every_mapped_family_as_the_capture_does(version: str) -> None:
    sim = headers(render(version, served()))
    real: dict[str, tuple[str, str]] = {}
    for name in CAPTURE[version]:
        real |= headers((FIXTURES / name).read_text())
    mapped = {n for n in real if read_by_a_mapper(n.removesuffix("_total"))}
    assert mapped, version
    for name in mapped:
        assert name in sim, f"{version}: the capture's {name} is missing"
        assert sim[name] == real[name], name


def test_triton_prints_as_prometheus_cpp() -> None:
    text = render("triton-trtllm", served())
    # Shortest numbers, labels sorted, a histogram's _count and _sum before its buckets.
    assert 'nv_inference_request_success{model="llama-8b",version="1"} 9\n' in text
    assert (
        'nv_inference_request_failure{model="llama-8b",reason="CANCELED",version="1"} 4\n' in text
    )
    assert re.search(
        r"_histogram_ms_count\{[^}]*\} 14\n[^\n]*_histogram_ms_sum\{[^}]*\} [\d.]+\n"
        r'[^\n]*_histogram_ms_bucket\{model="llama-8b",version="1",le="100"\}',
        text,
    )


def test_dynamo_buckets_follow_generate_log_buckets() -> None:
    # generate_log_buckets(0.001, 480, 18): 0, then 17 log-spaced values to 2 significant
    # figures, the first of them 0.001 * (480 / 0.001) ** (1 / 17) = 0.00216... -> 0.0022.
    assert TTFT[:3] == (0.0, 0.0022, 0.0047) and TTFT[-1] == 480.0 and len(TTFT) == 18
    assert log_buckets(1.0, 1.2, 50)[1:3] == (1.0, 1.1)  # duplicates after rounding removed
    text = render("dynamo", served())
    assert "dynamo_frontend_disconnected_clients 4\n" in text  # 2 aborted + 2 dropped
    assert 'dynamo_frontend_inflight_requests{model="llama-8b"} 0\n' in text
