"""Objectives from request spans, end to end: the loopback engine of test_slo_report (90 % of
requests in 0.6 s, 10 % in 3 s) also sends each request's span, as vLLM does with
``--otlp-traces-endpoint``, through the OpenTelemetry SDK's HTTP exporter to the daemon's own
receiver. The spans win: basis "spans", the same 0.90, and now the tokens delivered within the
objective and what each million of them cost, in `cost --json` and every report format."""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

from agent.config.settings import load_config
from agent.daemon.app import App
from agent.daemon.otlp_listen import OtlpListeners
from agent.reporting.render.dispatch import render
from agent.sim.server import EngineServer
from agent.sim.traffic import Traffic
from tests.agent.box_helpers import (
    box_toml,
    cost_json,
    open_box,
    report_of,
    run_ticks,
    served_attainment,
)
from tests.collectors.otlp_helpers import Request, free_port, send, tracer_for
from tests.conftest import FakeNvml
from tests.fakenvml.build import FakeGpu, FakeNvmlConfig

GPU = "GPU-cccccccc-1111-2222-3333-444444444444"
MODEL = "llama-8b"
TICKS = 13
GOOD, LATE = Request(e2e=0.6, output_tokens=120), Request(e2e=3.0, output_tokens=500)


@pytest.fixture
def box(db_url: str, tmp_path: Path, fake_nvml: FakeNvml) -> Iterator[tuple[App, Path]]:
    fake_nvml.write(FakeNvmlConfig(gpus=(FakeGpu(uuid=GPU, util=60),)))
    traffic = Traffic(models=(MODEL,))
    port = free_port()
    with EngineServer("vllm-0.33", traffic) as server:
        path = tmp_path / "gpuwatch.toml"
        toml = box_toml(
            db_url,
            f'[otlp]\nhttp_listen = "127.0.0.1:{port}"\n',
            f'[[targets]]\nname = "t1"\nurl = "{server.url}"\ngpus = [0]\n',
            f'[[slo]]\nmodel = "{MODEL}"\ne2e = "1s"\nobjective = 0.95\n',
        )
        path.write_text(toml)
        listeners = OtlpListeners.for_config(load_config(str(path), {}))
        assert listeners is not None
        app = open_box(db_url, path, toml, inbox=listeners.inbox)
        listeners.apply(app.config)
        exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces/t1")
        try:
            with tracer_for(exporter) as provider:

                def serve(_: int) -> None:  # 9 requests in 0.6 s, 1 in 3 s, and their spans
                    traffic.serve(9, e2e_latency=0.6)
                    traffic.serve(1, e2e_latency=3.0)
                    send(provider, [GOOD] * 9 + [LATE])

                run_ticks(app, TICKS, serve)
            yield app, path
        finally:
            app.close()
            listeners.stop()


def test_cost_json_takes_the_spans_exact_attainment_and_prices_the_good_tokens(
    box: tuple[App, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    (model,) = cost_json(box[1], capsys)["models"]
    slo: dict[str, Any] = model["slo"]
    batches = TICKS - 1
    assert slo["basis"] == "spans" and slo["exact"] is True
    assert slo["attainment"] == 0.9 and slo["met"] is False
    assert slo["requests"] == 10 * batches and slo["good_requests"] == 9 * batches
    assert slo["good_tokens"] == 9 * 120 * batches
    cost = Decimal(model["cost_usd"])
    per_million = Decimal(slo["cost_per_million_good_tokens_usd"])
    assert per_million == pytest.approx(cost * 1_000_000 / (9 * 120 * batches), abs=Decimal("1e-6"))


def test_every_report_format_shows_the_basis_and_the_price_of_tokens_within(
    box: tuple[App, Path],
) -> None:
    report = report_of(box[0], TICKS)
    (model,) = json.loads(render(report, "json"))["models"]
    assert model["slo_basis"] == "spans" and model["slo_attainment_ratio"] == 0.9
    assert model["slo_good_tokens"] == 9 * 120 * (TICKS - 1)
    per_million = Decimal(str(model["slo_good_token_cost_per_million_usd"]))
    table = render(report, "table").split("OBJECTIVES")[1]
    assert "spans" in table and f"${per_million:,.4f}" in table
    for fmt in ("markdown", "html", "csv"):
        out = render(report, fmt)
        assert "spans" in out and f"{per_million:,.3f}" in out, fmt


def test_the_digest_prices_the_tokens_within_the_objective(box: tuple[App, Path]) -> None:
    from agent.reporting.digest import digest_payload

    payload = digest_payload(report_of(box[0], TICKS), None)
    (section,) = [
        b["text"]["text"]
        for b in payload["blocks"]
        if b.get("text", {}).get("text", "").startswith("*Objectives")
    ]
    (line,) = section.splitlines()[1:]
    assert "90.0% within e2e <= 1s (objective 95.0%: missed, from spans)" in line
    assert "per 1M tokens within" in line


def test_metrics_serve_the_spans_attainment_per_window(box: tuple[App, Path]) -> None:
    got = served_attainment(box[0], TICKS)
    assert set(got) == {"1h", "24h", "7d", "30d"}
    for sample in got.values():
        assert sample.value == 0.9
        assert sample.labels == {"host": "box", "model": MODEL, "window": sample.labels["window"],
                                 "basis": "spans", "estimate": "exact"}  # fmt: skip
