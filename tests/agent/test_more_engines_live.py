"""`gpuwatch collect --once --json` scraping a simulated Triton (TensorRT-LLM), NIM, LMDeploy
and Dynamo over real HTTP, each recognised by ``engine = "auto"``: the canonical signals it
prints equal what the simulator knows to be true, abandoned work included."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent.cli.main import main
from agent.sim.server import EngineServer
from agent.sim.traffic import Request, Traffic, cumulative_counts

MODEL = "Llama-8B"  # Dynamo's frontend lower-cases it
VERSIONS = {"triton-trtllm": "triton", "nim": "nim", "lmdeploy": "lmdeploy", "dynamo": "dynamo"}
F = "gpuwatch_engine_requests_finished_total"


def traffic() -> Traffic:
    """Two DP ranks, 24 finished requests (4 aborted by their client, 2 engine errors) and
    3 streams whose client went away after 5 tokens."""
    t = Traffic(models=(MODEL,), engines=2)
    t.serve(12, engine="0")
    t.serve(12, engine="1")
    t.drop(3, after_tokens=5)
    t.set_gauges(engine="0", running=3, waiting=2, kv_usage=0.4)
    t.set_gauges(engine="1", running=1, waiting=4, kv_usage=0.7)
    return t


@pytest.fixture(params=sorted(VERSIONS))
def served(request: pytest.FixtureRequest) -> Iterator[tuple[str, Traffic, EngineServer]]:
    t = traffic()
    with EngineServer(request.param, t) as server:
        yield request.param, t, server


def collect(
    tmp_path: Path, url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> list[dict[str, Any]]:
    config = tmp_path / "gpuwatch.toml"
    config.write_text(
        'host = "box"\n[collectors.nvml]\nenabled = false\n'
        f'[[targets]]\nname = "t1"\nurl = "{url}"\nengine = "auto"\n'
    )
    monkeypatch.setenv("GPUWATCH_DATABASE_URL", f"sqlite:///{tmp_path / 'gw.db'}")
    code = main(["collect", "--once", "--json", "--config", str(config)])
    out = capsys.readouterr()
    assert code == 0, out.err
    return [json.loads(line) for line in out.out.splitlines()]


def by_key(lines: list[dict[str, Any]]) -> dict[tuple[str, str], float]:
    out: dict[tuple[str, str], float] = {}
    for line in lines:
        if line["collector"] == "target/t1" and "model" in line["labels"]:
            labels = line["labels"]
            key = (line["metric"], labels.get("reason") or labels.get("le") or "")
            assert key not in out, f"duplicate series {key}"
            out[key] = line["value"]
    return out


def test_each_engine_scraped_live_prints_the_true_signals(
    served: tuple[str, Traffic, EngineServer],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    version, t, server = served
    lines = collect(tmp_path, server.url, monkeypatch, capsys)
    engine = VERSIONS[version]
    assert {line["labels"]["engine"] for line in lines if "engine" in line["labels"]} == {engine}
    assert {line["labels"]["model"] for line in lines if "model" in line["labels"]} == {
        MODEL.lower() if engine == "dynamo" else MODEL
    }
    got = by_key(lines)
    done, dropped = t.requests(), t.snapshot().dropped
    every = done + dropped
    assert got[("gpuwatch_engine_requests_waiting", "")] == 6  # 2 + 4, summed over ranks
    assert got[("gpuwatch_engine_requests_running", "")] == 4  # 3 + 1 (Dynamo: 10 - 6)
    if engine in ("triton", "nim", "lmdeploy"):  # the fullest rank; the frontend knows none
        assert got[("gpuwatch_engine_kv_cache_usage_ratio", "")] == pytest.approx(0.7, abs=1e-4)
    else:
        assert ("gpuwatch_engine_kv_cache_usage_ratio", "") not in got
    _assert_tokens(engine, got, done, every)
    _assert_finished(engine, got, done, dropped)
    _assert_ttft(engine, got, done if engine == "nim" else every)


def _assert_tokens(
    engine: str,
    got: dict[tuple[str, str], float],
    done: tuple[Request, ...],
    every: tuple[Request, ...],
) -> None:
    if engine == "triton":  # Triton counts requests, not tokens: unknown, never 0
        assert not any("tokens" in metric for metric, _ in got)
        return
    assert got[("gpuwatch_engine_generation_tokens_total", "")] == sum(
        r.generation_tokens for r in every
    )
    assert got[("gpuwatch_engine_prompt_tokens_total", "")] == sum(r.prompt_tokens for r in every)
    completed = ("gpuwatch_engine_completed_generation_tokens_total", "")
    if engine == "nim":  # per finished request: the dropped streams' tokens are abandoned
        assert got[completed] == sum(r.generation_tokens for r in done)
    else:
        assert completed not in got


def _assert_finished(
    engine: str,
    got: dict[tuple[str, str], float],
    done: tuple[Request, ...],
    dropped: tuple[Request, ...],
) -> None:
    def n(*reasons: str) -> int:
        return sum(1 for r in done if r.finish_reason in reasons)

    reasons = {reason: v for (metric, reason), v in got.items() if metric == F}
    if engine == "nim":  # vLLM V0's finished_reason; a dropped stream finished nothing
        assert reasons == {"stop": n("stop"), "length": n("length"), "abort": n("abort"),
                           "error": n("error")}  # fmt: skip
        return
    # Triton (CANCELED), LMDeploy (ResponseType.CANCEL) and Dynamo (disconnected clients) count
    # the clients that went away, mid-stream ones included, as abandoned work.
    assert reasons == {
        "completed": n("stop", "length"),
        "abort": n("abort") + len(dropped),
        "error": n("error"),
    }


def _assert_ttft(
    engine: str, got: dict[tuple[str, str], float], observed: tuple[Request, ...]
) -> None:
    metric = "gpuwatch_engine_ttft_seconds"
    les = sorted((float(le), v) for (m, le), v in got.items() if m == metric + "_bucket")
    values = [r.ttft for r in observed]
    assert tuple(v for _, v in les) == cumulative_counts(values, [le for le, _ in les[:-1]])
    assert got[(metric + "_count", "")] == len(values)
    assert got[(metric + "_sum", "")] == pytest.approx(sum(values))
    if engine == "triton":  # milliseconds on the wire: Triton's 100 ms bound is 0.1 s here
        assert [le for le, _ in les[:-1]] == [0.1, 0.5, 2.0, 5.0]


def test_a_configured_engine_is_also_accepted_and_nim_answers_at_v1_metrics(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    t = traffic()
    with EngineServer("nim", t) as server:
        assert server.url.endswith("/v1/metrics")
        config = tmp_path / "gpuwatch.toml"
        config.write_text(
            'host = "box"\n[collectors.nvml]\nenabled = false\n'
            f'[[targets]]\nname = "t1"\nurl = "{server.url}"\nengine = "nim"\n'
        )
        monkeypatch.setenv("GPUWATCH_DATABASE_URL", f"sqlite:///{tmp_path / 'gw.db'}")
        assert main(["collect", "--once", "--json", "--config", str(config)]) == 0
    got = by_key([json.loads(line) for line in capsys.readouterr().out.splitlines()])
    assert got[("gpuwatch_engine_requests_running", "")] == 4
