"""SloBurnRate end to end on the simulated clock: a vLLM simulator over HTTP whose requests
take exactly the latencies given, the App's tick (collect, store, evaluate) and its minute
rollup, against an objective of e2e <= 1 s (a vLLM bucket bound) for 99 % of requests.

The numbers are the SRE Workbook's Table 5-8 (agent.cost.slo_math.WORKBOOK_WINDOWS): with a
1 % error budget, 10 % of requests over the threshold burn at 10 (above 6, below 14.4) and
20 % burn at 20 (above 14.4)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent.alerting.conditions import conditions
from agent.alerting.inputs import LatencyCadence, gather
from agent.config.settings import load_config
from agent.cost.slo_math import WORKBOOK_WINDOWS, burn_rate
from agent.daemon.app import App
from agent.sim.server import EngineServer
from agent.sim.traffic import Traffic
from agent.storage.db import upgrade_database
from alerts.model import AlertState, Severity, State
from tests.conftest import FakeNvml
from tests.fakenvml.build import FakeGpu, FakeNvmlConfig, FakeProcess, GiB

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
STEP = timedelta(seconds=60)
GPU = "GPU-00000000-0000-0000-0000-00000000aaaa"
MODELS = ("llama-8b", "qwen-7b", "mistral-7b")
RULE = "SloBurnRate"
FAST, SLOW = 0.5, 3.0  # seconds end to end: within and over the 1 s threshold


@dataclass
class Box:
    app: App
    traffic: Traffic
    now: datetime

    def run(self, duration: timedelta, good: int, bad: int) -> None:
        """``good`` fast and ``bad`` slow requests on the first model per minute, each tick
        followed by the minute rollup (the daemon runs it once a minute)."""
        end = self.now + duration
        while self.now < end:
            self.traffic.serve(good, e2e_latency=FAST)
            if bad:
                self.traffic.serve(bad, e2e_latency=SLOW)
            self.app.tick(self.now)
            self.app.roll_up(self.now)
            self.now += STEP

    def alerts(self) -> dict[str, AlertState]:
        """SloBurnRate's pending or firing alerts by their window label."""
        return {
            s.key.label_map()["window"]: s
            for s in self.app.alerting.states()
            if s.key.rule == RULE and s.state in (State.PENDING, State.FIRING)
        }


@pytest.fixture
def box(tmp_path: Path, db_url: str, fake_nvml: FakeNvml) -> Iterator[Box]:
    fake_nvml.write(
        FakeNvmlConfig(
            gpus=(FakeGpu(uuid=GPU, util=80, used=60 * GiB),),
            processes=(FakeProcess(gpu=0, pid=100, mem=60 * GiB),),
        )
    )
    traffic = Traffic(models=MODELS)
    server = EngineServer("vllm-0.33", traffic).start()
    config_file = tmp_path / "gpuwatch.toml"
    config_file.write_text(
        f'host = "box"\ndatabase_url = "{db_url}"\n[daemon]\ninterval_seconds = 60\n'
        f'[[rates]]\ngpu = "{GPU}"\nusd_per_hour = 3.60\n'
        f'[[targets]]\nname = "llm"\nurl = "{server.url}"\ngpus = ["0"]\n'
        '[[slo]]\nmodel = "*"\ne2e = "1s"\nobjective = 0.99\n'
    )
    upgrade_database(db_url)
    app = App.open(load_config(str(config_file), {}))
    try:
        yield Box(app, traffic, T0)
    finally:
        app.close()
        server.stop()


PAGE_1H, PAGE_6H, TICKET_3D = WORKBOOK_WINDOWS


def test_the_workbook_numbers() -> None:
    assert (PAGE_1H.factor, PAGE_6H.factor, TICKET_3D.factor) == (14.4, 6.0, 1.0)
    assert burn_rate(0.1, 0.99) == pytest.approx(10.0)  # between 6 and 14.4
    assert burn_rate(0.2, 0.99) == pytest.approx(20.0)  # above 14.4


def test_a_burn_of_10_fires_the_6h_pair_and_the_ticket_not_the_1h_pair(box: Box) -> None:
    box.run(timedelta(minutes=3), good=9, bad=1)  # 10 % slow: burn 10
    pending = box.alerts()
    assert set(pending) == {"6h", "3d"}  # both windows hold data at that rate: for 2m starts
    assert {s.state for s in pending.values()} == {State.PENDING}
    box.run(timedelta(minutes=4), good=9, bad=1)
    fired = box.alerts()
    assert set(fired) == {"6h", "3d"}  # 10 < 14.4: the 1h/5m pair never holds
    six, three = fired["6h"], fired["3d"]
    assert six.state is State.FIRING and three.state is State.FIRING
    assert six.severity is Severity.CRITICAL  # a page pair
    assert three.severity is Severity.WARNING  # the ticket pair
    assert float(six.annotations["burn_rate_long"]) == pytest.approx(10.0)
    assert float(six.annotations["burn_rate_short"]) == pytest.approx(10.0)
    assert six.annotations["factor"] == "6" and three.annotations["factor"] == "1"
    assert six.annotations["basis"] == "histograms"
    assert six.annotations["objective"] == "0.99"
    assert six.key.label_map() == {"host": "box", "model": "llama-8b", "window": "6h"}
    # The other models serve nothing: unknown burn, no alert.
    assert {s.key.label_map()["model"] for s in box.app.alerting.states()} == {"llama-8b"}


def test_a_burn_of_20_pends_fires_after_for_and_the_short_window_resolves_it(box: Box) -> None:
    box.run(timedelta(minutes=2), good=8, bad=2)  # 20 % slow: burn 20 > 14.4
    assert box.alerts()["1h"].state is State.PENDING
    box.run(timedelta(minutes=3), good=8, bad=2)  # the rule's for: 2m has passed
    page = box.alerts()["1h"]
    assert page.state is State.FIRING and page.severity is Severity.CRITICAL
    assert float(page.annotations["burn_rate_long"]) == pytest.approx(20.0)
    assert page.annotations["short_window"] == "5m"
    box.run(timedelta(minutes=25), good=8, bad=2)
    # Good traffic only: within the short window (plus the rollup's minute) the 5m burn is 0
    # while the 1h window still burns above 14.4 (20 x 30 / 37): the short window resets it.
    box.run(timedelta(minutes=7), good=10, bad=0)
    assert "1h" not in box.alerts()
    inputs = gather(box.app.store, box.app.tick(box.now), box.app.config, box.now)
    [burn] = [b for b in inputs.slo_burns or () if b.model == MODELS[0] and b.window == PAGE_1H]
    assert burn.long is not None and burn.long > PAGE_1H.factor
    assert burn.short == 0.0


def test_an_evaluation_with_three_models_costs_a_few_ms(box: Box) -> None:
    for model in MODELS:
        box.traffic.serve(9, model=model, e2e_latency=FAST)
        box.traffic.serve(1, model=model, e2e_latency=SLOW)
    box.run(timedelta(minutes=20), good=9, bad=1)
    round_ = box.app.tick(box.now)
    store, config, rules = box.app.store, box.app.config, box.app.alerting.rules
    cadence = LatencyCadence(60.0)
    without = {n: s for n, s in rules.items() if n != RULE}
    timings: dict[str, list[float]] = {"with": [], "without": [], "first": []}
    for i in range(20):
        now = box.now + timedelta(seconds=i)  # within one minute: the rollup part is cached
        for name, table in (("with", rules), ("without", without)):
            began = time.perf_counter()
            found, _ = conditions(table, gather(store, round_, config, now, rules=table,
                                                cadence=cadence))  # fmt: skip
            timings["first" if i == 0 and name == "with" else name].append(
                time.perf_counter() - began
            )
    models = {c.key.label_map()["model"] for c in found if c.key.rule == RULE}
    extra = min(timings["with"]) - min(timings["without"])
    print(f"\nSloBurnRate, 3 models: first read {timings['first'][0] * 1e3:.1f} ms,"
          f" then +{extra * 1e3:.1f} ms per evaluation")  # fmt: skip
    assert models <= set(MODELS)
