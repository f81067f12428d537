"""The default `gpuwatch demo`: a month, as `make demo` runs it (slow: `make test-demo`).

About 45 s of CPU for the history (BENCHMARKS.md, the demo's month), over a minute on a busy
2-core machine, so it runs from its own target that .ci/run calls after `make test`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.demo.test_demo_cli import MODELS, MONEY, gpuwatch, models_section
from tests.demo.test_focus13_demo import check_demo_export

pytestmark = pytest.mark.slow


def test_the_default_month_has_spend_tokens_and_cost_per_million_tokens_for_each_model(
    tmp_path: Path,
) -> None:
    done = gpuwatch(["demo"], tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "simulated rounds of 2 hosts over 30 days" in out
    spend = re.search(rf"^  spend \(billed or metered: see note\)\s+({MONEY})$", out, re.MULTILINE)
    assert spend and float(spend.group(1).lstrip("$").replace(",", "")) > 1000
    models = models_section(out)
    assert set(models) == set(MODELS)
    for model, (requests, tokens, cost, per_million, *_) in models.items():
        assert int(requests.replace(",", "")) > 100_000, model
        assert int(tokens.replace(",", "")) > 10_000_000, model
        assert cost != "$0.00" and float(per_million.lstrip("$")) > 0, model
    # The month's story: the spare GPU and the paused model idle, the stress afternoon, the
    # budget's thresholds.
    alerts = out.split("\nALERTS", 1)[1].split("\n\n", 1)[0]
    for rule in ("GpuIdle", "KvCacheSaturated", "BudgetThreshold"):
        assert rule in alerts
    # Issue 43's FOCUS 1.3 "done when", over the month: allocation columns filled, EffectiveCost
    # the report's metered total within a cent.
    check_demo_export(tmp_path, tmp_path / "state" / "gpuwatch" / "demo", 30)
