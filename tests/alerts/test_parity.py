"""Where gpuwatch follows Prometheus and Alertmanager, the cases they settled (issue 14): a
silence at its end instant, a `for` lengthened by a reload, one bucket bound spelled twice."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from agent.sim.render import render
from agent.sim.traffic import Traffic
from alerts.lifecycle import evaluate
from alerts.model import AlertKey, Condition, State
from alerts.rules import DEFAULT_RULES
from alerts.silence import Silence, parse_matchers
from collectors.engines.exposition import Exposition
from collectors.engines.registry import ENGINES
from collectors.engines.rules import Context

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
HOT = AlertKey.of("GpuHot", {"host": "box", "gpu_uuid": "GPU-1"})


def test_a_silence_still_mutes_at_the_instant_it_ends() -> None:
    silence = Silence("s1", tuple(parse_matchers("alertname=GpuHot")), T0,
                      T0 + timedelta(hours=1), "ops", "fan swap")  # fmt: skip
    labels = {"alertname": "GpuHot", "host": "box"}
    assert silence.active(T0 + timedelta(hours=1)) and silence.matches(labels)
    assert not silence.active(T0 + timedelta(hours=1, microseconds=1))
    assert not silence.active(T0 - timedelta(microseconds=1))


def test_a_for_lengthened_past_a_firing_alert_sends_it_back_to_pending() -> None:
    short = {"GpuHot": replace(DEFAULT_RULES["GpuHot"], for_seconds=60.0)}
    holds = [Condition(HOT, 95.0)]
    states = evaluate(short, holds, {}, T0).states
    states = evaluate(short, holds, states, T0 + timedelta(minutes=1)).states
    assert states[HOT].state is State.FIRING

    longer = {"GpuHot": replace(DEFAULT_RULES["GpuHot"], for_seconds=600.0)}  # the reload
    result = evaluate(longer, holds, states, T0 + timedelta(minutes=2))
    assert result.states[HOT].state is State.PENDING
    assert [(t.key, t.to) for t in result.transitions] == [(HOT, State.PENDING)]
    assert result.states[HOT].active_at == T0  # the condition's start is kept

    again = evaluate(longer, holds, result.states, T0 + timedelta(minutes=10))
    assert again.states[HOT].state is State.FIRING  # once it has held the new `for`


def test_one_bucket_bound_spelled_twice_is_summed_as_histogram_quantile_does() -> None:
    traffic = Traffic(models=("m",))
    traffic.serve(5)
    body = render("vllm-0.33", traffic)
    text = body[0] if isinstance(body, tuple) else body
    line = 'vllm:time_to_first_token_seconds_bucket{engine="0",le="0.02",model_name="m"}'
    twin = line.replace('le="0.02"', 'le="2e-2"')
    assert line in text
    doubled = text.replace(line, f"{twin} 3.0\n{line}")

    def bucket(exposition_text: str) -> float:
        exposition = Exposition.parse(exposition_text)
        context = Context("box", "llm", "vllm", "m", T0)
        samples = ENGINES["vllm"].map_samples(exposition, context)
        (found,) = [s.value for s in samples if s.metric == "gpuwatch_engine_ttft_seconds_bucket"
                    and s.labels["le"] == "0.02"]  # fmt: skip
        return found

    assert bucket(doubled) == bucket(text) + 3.0
