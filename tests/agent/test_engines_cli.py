"""`gpuwatch collect --once --json` against the engine simulator, one test per engine version:
every canonical signal printed equals what the simulator knows to be true."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.cli.main import main
from agent.sim.server import EngineServer
from agent.sim.traffic import Traffic, cumulative_counts

MODEL, OTHER = "llama-8b", "qwen-7b"
V1 = ("vllm-0.8.5", "vllm-0.10", "vllm-0.33")
HISTOGRAMS = {
    "gpuwatch_engine_ttft_seconds": "ttft",
    "gpuwatch_engine_e2e_latency_seconds": "e2e",
    "gpuwatch_engine_queue_time_seconds": "queue",
}


def traffic_for(version: str) -> Traffic:
    """Two models; data parallel (two engine ranks) where the engine has them."""
    dp = version in V1 or version == "sglang-0.5"
    traffic = Traffic(models=(MODEL, OTHER), engines=2 if dp else 1)
    traffic.serve(12, model=MODEL, engine="0")
    traffic.serve(7, model=OTHER, engine="0")
    traffic.set_gauges(model=MODEL, engine="0", running=3, waiting=2, kv_usage=0.4)
    if dp:
        traffic.serve(5, model=MODEL, engine="1")
        traffic.set_gauges(model=MODEL, engine="1", running=1, waiting=4, kv_usage=0.7)
    return traffic


def collect_json(
    tmp_path: Path, url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> list[dict[str, Any]]:
    config = tmp_path / "gpuwatch.toml"
    config.write_text(
        'host = "box"\n[collectors.nvml]\nenabled = false\n'
        f'[[targets]]\nname = "t1"\nurl = "{url}"\nmodel = "{MODEL}"\n'
    )
    monkeypatch.setenv("GPUWATCH_DATABASE_URL", f"sqlite:///{tmp_path / 'gw.db'}")
    code = main(["collect", "--once", "--json", "--config", str(config)])
    out = capsys.readouterr()
    assert code == 0, out.err
    return [json.loads(line) for line in out.out.splitlines()]


def values(lines: list[dict[str, Any]], model: str = MODEL) -> dict[tuple[str, str], float]:
    """{(metric, reason or le or ""): value} of one model's engine samples."""
    out: dict[tuple[str, str], float] = {}
    for line in lines:
        labels = line["labels"]
        if line["collector"] == "target/t1" and labels.get("model") == model:
            key = (line["metric"], labels.get("reason") or labels.get("le") or "")
            assert key not in out, f"duplicate series {key}"
            out[key] = line["value"]
    return out


@pytest.fixture(params=["vllm-0.6", *V1, "sglang-0.5", "tgi-3", "llamacpp"])
def engine(request: pytest.FixtureRequest) -> Iterator[tuple[str, Traffic, EngineServer]]:
    traffic = traffic_for(request.param)
    with EngineServer(request.param, traffic) as server:
        yield request.param, traffic, server


def test_collect_once_json_prints_the_true_engine_signals(
    engine: tuple[str, Traffic, EngineServer],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    version, traffic, server = engine
    lines = collect_json(tmp_path, server.url, monkeypatch, capsys)
    got = values(lines)
    truth = traffic.totals(model=MODEL)
    kind = version.split("-")[0]
    assert {line["labels"]["engine"] for line in lines if "engine" in line["labels"]} == {kind}

    running = 3 + (1 if traffic.engines != ("0",) else 0)
    waiting = 2 + (4 if traffic.engines != ("0",) else 0)
    assert got[("gpuwatch_engine_requests_running", "")] == running  # summed over DP ranks
    assert got[("gpuwatch_engine_requests_waiting", "")] == waiting
    if kind in ("vllm", "sglang"):  # the fullest rank, not a sum
        kv = 0.7 if traffic.engines != ("0",) else 0.4
        assert got[("gpuwatch_engine_kv_cache_usage_ratio", "")] == kv
    else:
        assert ("gpuwatch_engine_kv_cache_usage_ratio", "") not in got  # unknown, not zero

    assert got[("gpuwatch_engine_prompt_tokens_total", "")] == truth.prompt_tokens
    if version in ("vllm-0.33", "sglang-0.5", "llamacpp"):
        computed = got[("gpuwatch_engine_prompt_tokens_computed_total", "")]
        assert computed == truth.computed_prompt_tokens
    else:  # the engine does not say which prompt tokens were cache hits
        assert ("gpuwatch_engine_prompt_tokens_computed_total", "") not in got
    successful = [r for r in traffic.requests(model=MODEL) if r.finish_reason in ("stop", "length")]
    generated = sum(r.generation_tokens for r in successful)
    expected_generated = generated if kind == "tgi" else truth.generation_tokens
    assert got[("gpuwatch_engine_generation_tokens_total", "")] == expected_generated
    _assert_finished(kind, version, got, truth.finished)
    _assert_histograms(kind, traffic, got)


def _assert_finished(
    kind: str, version: str, got: dict[tuple[str, str], float], finished: dict[str, int]
) -> None:
    metric = "gpuwatch_engine_requests_finished_total"
    reasons = {reason: v for (m, reason), v in got.items() if m == metric}
    if kind == "vllm":
        # vLLM reports engine errors as aborts before 0.14.
        errors_apart = version == "vllm-0.33"
        expected = {"stop": finished["stop"], "length": finished["length"]}
        expected["abort"] = finished["abort"] + (0 if errors_apart else finished["error"])
        if errors_apart:
            expected |= {"error": finished["error"], "repetition": 0}
        assert reasons == expected
    elif kind == "sglang":
        done = finished["stop"] + finished["length"] + finished["error"]
        assert reasons == {"completed": done, "abort": finished["abort"]}
    elif kind == "tgi":  # a client abort is neither a success nor a failure in TGI
        done = finished["stop"] + finished["length"]
        assert reasons == {"completed": done, "error": finished["error"]}
    else:
        assert reasons == {}  # llama.cpp does not count finished requests


def _assert_histograms(kind: str, traffic: Traffic, got: dict[tuple[str, str], float]) -> None:
    if kind == "llamacpp":
        assert not any(m.endswith("_bucket") for m, _ in got)
        return
    for metric, observable in HISTOGRAMS.items():
        les = sorted(
            (float(le), v) for (m, le), v in got.items() if m == metric + "_bucket"
        )  # fmt: skip
        if kind == "tgi" and metric == "gpuwatch_engine_ttft_seconds":
            assert les == []  # TGI has no time-to-first-token histogram: absent
            continue
        requests = traffic.requests(model=MODEL)
        if kind == "tgi":  # TGI's duration histograms see successful requests only
            requests = tuple(r for r in requests if r.finish_reason in ("stop", "length"))
        observed = [v for r in requests for v in r.observations(observable)]
        bounds = [le for le, _ in les[:-1]]
        assert tuple(v for _, v in les) == cumulative_counts(observed, bounds), metric
        assert got[(metric + "_count", "")] == len(observed)


def test_dcgm_exporter_feeds_the_canonical_gpu_signals(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    traffic = Traffic(gpus=2)
    reading = traffic.set_gpu(1, util_pct=87, fb_used_mib=40_000, power_w=612.25, energy_mj=123_456)
    with EngineServer("dcgm", traffic) as server:
        lines = collect_json(tmp_path, server.url, monkeypatch, capsys)
    gpu1 = {
        line["metric"]: line["value"]
        for line in lines
        if line["labels"].get("gpu_index") == "1" and line["collector"] == "target/t1"
    }
    mib = 1024 * 1024
    assert gpu1["gpuwatch_gpu_utilization_ratio"] == 0.87
    assert gpu1["gpuwatch_gpu_memory_used_bytes"] == 40_000 * mib
    total = reading.fb_used_mib + reading.fb_free_mib + reading.fb_reserved_mib
    assert gpu1["gpuwatch_gpu_memory_total_bytes"] == total * mib
    assert gpu1["gpuwatch_gpu_power_watts"] == 612.25
    assert gpu1["gpuwatch_gpu_energy_joules_total"] == 123.456
    uuid = next(
        line["labels"]["gpu_uuid"] for line in lines if line["labels"].get("gpu_index") == "1"
    )
    assert uuid == reading.uuid


def test_multiprocess_pid_children_are_aggregated_not_added_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    traffic = traffic_for("vllm-0.10")
    with EngineServer("vllm-0.10", traffic, multiprocess=True) as server:
        assert 'pid="' in server_text(server)  # one kv_cache_usage_perc series per process
        got = values(collect_json(tmp_path, server.url, monkeypatch, capsys))
    assert got[("gpuwatch_engine_kv_cache_usage_ratio", "")] == 0.7
    assert (
        got[("gpuwatch_engine_prompt_tokens_total", "")]
        == traffic.totals(model=MODEL).prompt_tokens
    )


def test_sglang_priority_breakdowns_are_not_counted_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    traffic = traffic_for("sglang-0.5")
    with EngineServer("sglang-0.5", traffic, priority=True) as server:
        assert 'priority="' in server_text(server)
        got = values(collect_json(tmp_path, server.url, monkeypatch, capsys))
    truth = traffic.totals(model=MODEL)
    assert got[("gpuwatch_engine_generation_tokens_total", "")] == truth.generation_tokens
    assert got[("gpuwatch_engine_ttft_seconds_count", "")] == truth.requests


def test_before_the_first_request_lazy_families_are_absent_not_zero(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    traffic = Traffic(models=(MODEL,))
    with EngineServer("vllm-0.6", traffic) as server:
        assert "# TYPE vllm:time_to_first_token_seconds histogram" in server_text(server)
        got = values(collect_json(tmp_path, server.url, monkeypatch, capsys))
    assert got[("gpuwatch_engine_generation_tokens_total", "")] == 0  # exposed at 0 by V0
    assert not any(metric.startswith("gpuwatch_engine_ttft_seconds") for metric, _ in got)
    assert not any(metric == "gpuwatch_engine_requests_finished_total" for metric, _ in got)


def server_text(server: EngineServer) -> str:
    import httpx

    return httpx.get(server.url, timeout=5).text
