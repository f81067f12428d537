"""SloBurnRate from request spans: where a model's requests were judged from their own spans,
the burn is their missed share, exact, and the alert says so (basis "spans").

The engine's histograms and its spans disagree on purpose here: the histograms see 10 % of
requests over the 1 s threshold (burn 10: only the 6h pair), the spans 20 % (burn 20: the 1h
pair too). The alert follows the spans."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

from agent.config.settings import load_config
from agent.daemon.app import App
from agent.daemon.otlp_listen import OtlpListeners
from agent.sim.server import EngineServer
from agent.sim.traffic import Traffic
from agent.storage.db import upgrade_database
from alerts.model import State
from tests.agent.test_slo_burn import FAST, GPU, MODELS, RULE, SLOW, STEP, T0
from tests.collectors.otlp_helpers import Request, free_port, send, tracer_for
from tests.conftest import FakeNvml
from tests.fakenvml.build import FakeGpu, FakeNvmlConfig, FakeProcess, GiB


@pytest.fixture
def spans_box(
    tmp_path: Path, db_url: str, fake_nvml: FakeNvml
) -> Iterator[tuple[App, Traffic, OtlpListeners, int]]:
    gpu, process = (
        FakeGpu(uuid=GPU, util=80, used=60 * GiB),
        FakeProcess(gpu=0, pid=100, mem=60 * GiB),
    )
    fake_nvml.write(FakeNvmlConfig(gpus=(gpu,), processes=(process,)))
    traffic = Traffic(models=MODELS[:1])
    server = EngineServer("vllm-0.33", traffic).start()
    port = free_port()
    config_file = tmp_path / "gpuwatch.toml"
    config_file.write_text(
        f'host = "box"\ndatabase_url = "{db_url}"\n[daemon]\ninterval_seconds = 60\n'
        f'[otlp]\nhttp_listen = "127.0.0.1:{port}"\n'
        f'[[rates]]\ngpu = "{GPU}"\nusd_per_hour = 3.60\n'
        f'[[targets]]\nname = "llm"\nurl = "{server.url}"\ngpus = ["0"]\n'
        '[[slo]]\nmodel = "*"\ne2e = "1s"\nobjective = 0.99\n'
    )
    upgrade_database(db_url)
    config = load_config(str(config_file), {})
    listeners = OtlpListeners.for_config(config)
    assert listeners is not None
    listeners.apply(config)
    app = App.open(config, inbox=listeners.inbox)
    try:
        yield app, traffic, listeners, port
    finally:
        app.close()
        listeners.stop()
        server.stop()


def test_the_burn_follows_the_spans_and_says_so(
    spans_box: tuple[App, Traffic, OtlpListeners, int],
) -> None:
    app, traffic, _, port = spans_box
    now = T0
    exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces/llm")
    with tracer_for(exporter) as provider:
        for _ in range(6):  # the rule's for (2m) passes with room
            traffic.serve(9, e2e_latency=FAST)
            traffic.serve(1, e2e_latency=SLOW)  # the histograms: 10 % slow
            send(provider, [Request(e2e=FAST)] * 8 + [Request(e2e=SLOW)] * 2)  # spans: 20 %
            app.tick(now)
            app.roll_up(now)
            now += STEP
    firing = {
        s.key.label_map()["window"]: s
        for s in app.alerting.states()
        if s.key.rule == RULE and s.state is State.FIRING
    }
    assert set(firing) == {"1h", "6h", "3d"}  # burn 20: above 14.4, which 10 never is
    page = firing["1h"]
    assert page.annotations["basis"] == "spans"
    assert float(page.annotations["burn_rate_long"]) == pytest.approx(20.0)
    assert float(page.annotations["burn_rate_short"]) == pytest.approx(20.0)
