"""The /metrics text as Prometheus' own scrape parser reads it: the cases of
model/textparse/promparse_test.go (data/prometheus_promparse.json), run through the scrape
collector's real path (an HTTP answer fetched, decoded, parsed and mapped).

Where gpuwatch reads a body differently, the test says which and why; the README's "Where
gpuwatch differs from Prometheus and Alertmanager" names the same differences.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent.sim.render import render
from agent.sim.traffic import Traffic
from collectors.base import CollectError
from collectors.engines.exposition import Exposition, ExpositionError
from collectors.engines.registry import read_by_a_mapper
from collectors.limits import ScrapeLimits
from collectors.scrape import ScrapeCollector, TargetSpec

T0 = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
UPSTREAM = json.loads(
    (Path(__file__).parent / "data" / "prometheus_promparse.json").read_text(encoding="utf-8")
)
# Every body below ends with one family a mapper reads, so a body the collector reads whole maps
# to samples and one it refuses fails the scrape: what a user sees (gpuwatch_target_up).
MARKER = '\n# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="m"} 7\n'
RUNNING = "gpuwatch_engine_requests_running"


def scrape(body: str | bytes) -> list[Any]:
    """The samples one scrape of ``body`` maps to, through ScrapeCollector itself."""
    content = body if isinstance(body, bytes) else body.encode("utf-8")
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=content))
    target = TargetSpec(name="llm", url="http://engine.test/metrics", engine="vllm")
    collector = ScrapeCollector(target, host="box", client=httpx.Client(transport=transport))
    return collector.collect(T0)


def mapped(samples: list[Any], metric: str) -> dict[str, float]:
    return {s.labels["model"]: s.value for s in samples if s.metric == metric}


def numbers_for_le_and_quantile(labels: Mapping[str, str]) -> dict[str, Any]:
    """Upstream writes ``le`` and ``quantile`` of histograms and summaries as Go floats ("1" as
    "1.0"); gpuwatch's mappers read them as numbers (and write ``le`` back as Go does)."""
    return {k: float(v) if k in ("le", "quantile") else v for k, v in labels.items()}


def series(case: Mapping[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    return [(s["name"], numbers_for_le_and_quantile(s["labels"])) for s in case["series"]]


@pytest.mark.parametrize("test", ["TestPromParse", "TestUTF8PromParse"])
def test_every_series_of_upstreams_bodies_is_read_as_promparse_reads_it(test: str) -> None:
    """Among them: a label set without commas (``{ quantile = "2.0" a = "b" }``), labels named
    ``__type__`` (kept as labels, as Prometheus does without its type-and-unit feature), and a
    family typed summary in one block and untyped in a later one. All were refused before."""
    case = UPSTREAM[test]
    seen: list[tuple[str, dict[str, Any]]] = []
    limits = ScrapeLimits()

    def check(name: str, labels: Mapping[str, str]) -> None:  # sees every sample parsed
        limits.check_labels(name, labels)
        seen.append((name, numbers_for_le_and_quantile(labels)))

    Exposition.parse(case["input"], keep=read_by_a_mapper, check=check)
    expected = series(case)
    # A body prometheus_client refuses is read again as promparse reads it, and checked again
    # from its start: what the first reading checked is where the second begins.
    first_reading, again = seen[: len(seen) - len(expected)], seen[len(seen) - len(expected) :]
    assert again == expected
    assert first_reading == expected[: len(first_reading)]
    assert mapped(scrape(case["input"] + MARKER), RUNNING) == {"m": 7.0}  # the target is up


@pytest.mark.parametrize("test", ["TestPromParse", "TestUTF8PromParse"])
def test_each_series_has_upstreams_value_and_timestamp(test: str) -> None:
    case = UPSTREAM[test]
    lines = [line for line in case["input"].split("\n") if line and not line.startswith("#")]
    assert len(lines) == len(case["series"])
    for line, expected in zip(lines, case["series"], strict=True):
        ((name, family),) = Exposition.parse(line).families.items()
        (sample,) = family.samples
        assert sample.value == expected["value"], line
        stamp = None if sample.timestamp is None else round(float(sample.timestamp) * 1000)
        assert stamp == expected.get("timestamp_ms"), line


@pytest.mark.parametrize(
    "case", UPSTREAM["TestPromParseErrors"], ids=lambda c: repr(c["input"])[:40]
)
def test_what_promparse_refuses_fails_the_scrape(case: Mapping[str, Any]) -> None:
    text = case["input"]
    body = text.encode(case["bytes"]) if "bytes" in case else text.encode("utf-8")
    with pytest.raises(CollectError, match="not Prometheus text format|not UTF-8 text"):
        scrape(body + MARKER.encode())


@pytest.mark.parametrize(
    "case", UPSTREAM["TestPromNullByteHandling"], ids=lambda c: repr(c["input"])[:40]
)
def test_null_bytes_as_promparse_reads_them(case: Mapping[str, Any]) -> None:
    body = case["input"] + MARKER
    if not case["upstream_error"] or case.get("ours") == "accepted":
        # A NUL inside a label value is text like any other. The one case read where promparse
        # refuses: a NUL in a metric name before its label set; a name no mapper reads, so
        # nothing of it is stored and the rest of the body is unaffected (the README says so).
        assert mapped(scrape(body), RUNNING) == {"m": 7.0}
    else:
        with pytest.raises(CollectError, match="not Prometheus text format"):
            scrape(body)


def test_a_series_twice_in_a_family_a_mapper_reads_still_fails_the_scrape() -> None:
    """Upstream's TestPromParse body has go_gc_duration_seconds{quantile="1.0",a="b"} four times,
    which promparse yields four times. The collector does not keep that family (no mapper reads
    it), so the body is read; were the family read, the duplicate refuses the body, as the
    README says: a series counted twice would count its tokens twice."""
    with pytest.raises(ExpositionError, match=r'duplicate sample go_gc_duration_seconds\{a="b"'):
        Exposition.parse(UPSTREAM["TestPromParse"]["input"])


# -- the same cases on families the mappers read ------------------------------------------------


def vllm_body() -> str:
    traffic = Traffic(models=("m",))
    traffic.serve(5)
    body = render("vllm-0.33", traffic)
    return body[0] if isinstance(body, tuple) else body


GAUGE = 'vllm:num_requests_running{engine="0",model_name="m"} 0.0'
TTFT_COUNT = "gpuwatch_engine_ttft_seconds_count"


@pytest.mark.parametrize(
    "spelled",
    [
        'vllm:num_requests_running{ engine = "0" model_name = "m" } 0.0',
        'vllm:num_requests_running{engine="0"model_name="m"} 0.0',
        'vllm:num_requests_running { engine="0", model_name="m", } 0.0',
        'vllm:num_requests_running{__type__="gauge",engine="0",model_name="m"} 0.0',
        'vllm:num_requests_running{engine="0",__unit__="requests",model_name="m"} 0.0',
    ],
    ids=["no_commas", "no_blank", "blanks", "__type__", "__unit__"],
)
def test_a_label_set_spelled_as_promparse_allows_maps_as_the_plain_one(spelled: str) -> None:
    body = vllm_body()
    assert GAUGE in body
    plain = scrape(body)
    assert scrape(body.replace(GAUGE, spelled)) == plain


def test_a_family_again_in_a_later_block_without_type_adds_its_series() -> None:
    """promparse yields every sample whatever block it is in; so the mapper sees both blocks:
    engine 1's requests and observations count beside engine 0's."""
    body = vllm_body()
    ttft = [line for line in body.splitlines() if line.startswith("vllm:time_to_first_token")]
    again = [GAUGE.replace('"0"', '"1"').replace("0.0", "3.0")]
    again += [line.replace('engine="0"', 'engine="1"') for line in ttft]
    before = scrape(body)
    after = scrape(body + "\n".join(again) + "\n")
    assert mapped(after, RUNNING) == {"m": mapped(before, RUNNING)["m"] + 3.0}
    assert mapped(after, TTFT_COUNT) == {"m": 2 * mapped(before, TTFT_COUNT)["m"]}
