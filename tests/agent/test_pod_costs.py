"""Cost, idle dollars and useful tokens per Kubernetes pod and namespace, end to end: the
daemon's App ticks a node over the fake NVML and a real pod-resources gRPC server (see
tests/agent/pod_cost_helpers.py for the node and its known truth), then `gpuwatch cost
--json`, the cost table, every report format and the weekly digest show each pod's share.

The truth, at 3.60 USD an hour per GPU for 2 hours (7.20 USD a GPU):
- GPU 0 (90 % busy): team-a/chat-0 at 75 % SM, team-b/eval-3 at 25 %: 5.40 and 1.80 USD, idle
  dollars their share of the GPU's 10 % idle time (0.54 and 0.18);
- GPU 1 (5 % busy): the kubelet gave it to team-b/notebook-1, which runs no process: all its
  7.20 USD by request, 95 % idle (6.84);
- GPU 2 (idle): nobody's, "(no pod)": 7.20 USD, all idle.
"""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from agent.cli.main import main
from agent.reporting.build import build_report
from agent.reporting.digest import digest_payload
from agent.reporting.period import range_period
from agent.reporting.render.dispatch import render
from agent.storage.db import open_database
from tests.agent.pod_cost_helpers import END, GPU_COST, NOW, T0, TOKENS_PER_TICK, node_run
from tests.conftest import FakeNvml

TICKS = 12  # intervals closed in (T0, END]: the chat target's useful tokens are 12 ticks'
CHAT_TOKENS = TOKENS_PER_TICK * TICKS


def cost_json(config_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any) -> Any:
    monkeypatch.setattr("agent.cli.main.utc_now", lambda: NOW)
    capsys.readouterr()
    assert main(["cost", "--window", "2h5m", "--json", "--config", str(config_path)]) == 0
    return json.loads(capsys.readouterr().out)


def test_cost_json_splits_a_time_sliced_gpu_by_the_pods_sm_use(
    db_url: str, fake_nvml: FakeNvml, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    with node_run(db_url, fake_nvml, tmp_path):
        pass
    doc = cost_json(tmp_path / "gpuwatch.toml", monkeypatch, capsys)

    pods = {(p["namespace"], p["pod"]): p for p in doc["pods"]}
    assert list(pods) == [("team-a", "chat-0"), ("team-b", "eval-3"),
                          ("team-b", "notebook-1"), ("(no pod)", "(no pod)")]  # fmt: skip
    want = {
        ("team-a", "chat-0"): (GPU_COST * 3 / 4, GPU_COST * 3 / 4 / 10, 1.5, "sm_utilization"),
        ("team-b", "eval-3"): (GPU_COST / 4, GPU_COST / 4 / 10, 0.5, "sm_utilization"),
        ("team-b", "notebook-1"): (GPU_COST, GPU_COST * Decimal("0.95"), 2.0, "request"),
        ("(no pod)", "(no pod)"): (GPU_COST, GPU_COST, 2.0, "whole_gpu"),
    }
    for key, (cost, idle, hours, basis) in want.items():
        p = pods[key]
        assert Decimal(p["cost_usd"]) == cost, key
        assert Decimal(p["idle_cost_usd"]) == idle, key
        assert p["gpu_hours"] == pytest.approx(hours), key
        assert p["split_basis"] == basis, key
    # The pods add up to the GPUs' metered cost, to the digit.
    total = sum(Decimal(p["cost_usd"]) for p in doc["pods"])
    assert total == Decimal(doc["fleet"]["cost_usd"]) == 3 * GPU_COST
    # Useful tokens: chat-0 serves the target "chat" alone; the others serve no target.
    assert pods[("team-a", "chat-0")]["useful_tokens"] == CHAT_TOKENS
    assert pods[("team-a", "chat-0")]["targets"] == ["node-1/chat"]
    per_m = Decimal(pods[("team-a", "chat-0")]["cost_per_million_tokens_usd"])
    assert per_m == GPU_COST * 3 / 4 / Decimal(int(CHAT_TOKENS)) * 1_000_000
    for key in (("team-b", "eval-3"), ("team-b", "notebook-1"), ("(no pod)", "(no pod)")):
        assert pods[key]["useful_tokens"] is None
        assert pods[key]["cost_per_million_tokens_usd"] is None

    namespaces = {n["namespace"]: n for n in doc["namespaces"]}
    assert list(namespaces) == ["team-a", "team-b", "(no pod)"]
    assert Decimal(namespaces["team-b"]["cost_usd"]) == GPU_COST + GPU_COST / 4
    assert namespaces["team-b"]["team"] == "research"
    assert namespaces["team-b"]["project"] == "evals"
    assert namespaces["team-a"]["team"] is None
    assert namespaces["team-a"]["useful_tokens"] == CHAT_TOKENS
    assert namespaces["team-b"]["useful_tokens"] is None


def test_a_labelled_namespace_brings_its_untargeted_gpu_time_to_its_team(
    db_url: str, fake_nvml: FakeNvml, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    with node_run(db_url, fake_nvml, tmp_path):
        pass
    doc = cost_json(tmp_path / "gpuwatch.toml", monkeypatch, capsys)

    teams = {t["name"]: t for t in doc["teams"]}
    # GPU 0 is the target chat's (eval-3's process is no target's: the target allocation gives
    # the whole GPU to chat), so eval-3's share is not counted again for team-b's team; the
    # notebook's GPU 1, which no target held, is research's; GPU 2 stays nobody's.
    assert Decimal(teams["(unlabelled)"]["cost_usd"]) == GPU_COST
    assert Decimal(teams["research"]["cost_usd"]) == GPU_COST
    assert Decimal(teams["research"]["idle_cost_usd"]) == GPU_COST * Decimal("0.95")
    assert teams["research"]["gpu_hours"] == pytest.approx(2.0)
    assert Decimal(teams["(no target)"]["cost_usd"]) == GPU_COST
    assert sum(Decimal(t["cost_usd"]) for t in doc["teams"]) == 3 * GPU_COST
    projects = {p["name"]: p for p in doc["projects"]}
    assert Decimal(projects["evals"]["cost_usd"]) == GPU_COST

    # The same figures in the table.
    capsys.readouterr()
    assert main(["cost", "--window", "2h5m", "--config", str(tmp_path / "gpuwatch.toml")]) == 0
    table = capsys.readouterr().out
    rows = {line.split()[0]: line.split() for line in table.splitlines() if line.strip()}
    assert rows["team-a/chat-0"][1:6] == ["5.40", "0.54", "1.5", "12,000", "$450.0000"]
    assert rows["team-b/eval-3"][1:6] == ["1.80", "0.18", "0.5", "n/a", "n/a"]
    assert rows["team-b"][1:4] == ["9.00", "7.02", "2.5"]
    assert rows["team-b"][-2:] == ["research", "evals"]
    assert rows["research"][1] == "7.20"


def test_every_report_format_and_the_digest_show_namespaces_and_pods(
    db_url: str, fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    with node_run(db_url, fake_nvml, tmp_path) as config:
        engine = open_database(config.database_url)
        try:
            period = range_period(T0.isoformat(), END.isoformat(), "UTC")
            report = build_report(engine, config, period, now=NOW)
        finally:
            engine.dispose()

    doc = json.loads(render(report, "json"))
    assert [(p["namespace"], p["pod"], p["cost_usd"]) for p in doc["pods"]] == [
        ("team-a", "chat-0", "5.40"), ("team-b", "eval-3", "1.80"),
        ("team-b", "notebook-1", "7.20"), ("(no pod)", "(no pod)", "7.20"),
    ]  # fmt: skip
    assert [(n["namespace"], n["idle_cost_usd"], n["team"]) for n in doc["namespaces"]] == [
        ("team-a", "0.54", None), ("team-b", "7.02", "research"), ("(no pod)", "7.20", None),
    ]  # fmt: skip
    assert doc["pods"][0]["useful_tokens"] == CHAT_TOKENS
    assert doc["pods"][1]["useful_tokens"] is None
    assert {t["name"]: t["cost_usd"] for t in doc["teams"]}["research"] == "7.20"

    table = render(report, "table")
    assert "NAMESPACES" in table and "PODS" in table
    lines = table.splitlines()
    (at,) = [i for i, line in enumerate(lines) if "notebook-1" in line]
    assert "$7.20" in lines[at] and "$6.84" in lines[at]
    assert lines[at + 1].split() == ["split", "by:", "request"]
    markdown = render(report, "markdown")
    assert "## Pods" in markdown or "### Pods" in markdown
    assert "| team-b | eval-3 |" in markdown.replace("  ", " ")
    html = render(report, "html")
    assert "Namespaces" in html and "notebook-1" in html
    rows = list(csv.reader(io.StringIO(render(report, "csv"))))
    assert any("notebook-1" in row and "7.20" in row for row in rows)

    blocks = digest_payload(report, None)["blocks"]
    texts = [b["text"]["text"] for b in blocks if b["type"] == "section" and "text" in b]
    (namespaces,) = [t for t in texts if t.startswith("*By namespace")]
    assert namespaces.splitlines()[1:] == [
        "*team-b* (team research): $9.00 · $7.02 idle · 2.5 GPU-h",
        "*(no pod)*: $7.20 · $7.20 idle · 2.0 GPU-h",
        "*team-a*: $5.40 · $0.54 idle · 1.5 GPU-h",
    ]


def test_off_kubernetes_there_are_no_pods(db_url: str, fake_nvml: FakeNvml, tmp_path: Path) -> None:
    from agent.config.settings import load_config
    from agent.daemon.app import App
    from agent.storage.db import upgrade_database
    from collectors.nvml import NvmlCollector
    from tests.agent.pod_cost_helpers import HARDWARE

    fake_nvml.write(HARDWARE)
    path = tmp_path / "gpuwatch.toml"
    path.write_text(f'host = "box"\ndatabase_url = "{db_url}"\n[[rates]]\ngpu = "*"\n'
                    'usd_per_hour = 3.60\n')  # fmt: skip
    config = load_config(str(path), {})
    upgrade_database(config.database_url)
    app = App.open(config, [NvmlCollector(host="box", proc_root=tmp_path / "noproc")])
    try:
        for i in range(3):
            app.tick(T0 + timedelta(minutes=10 * i))
        app.roll_up(T0 + timedelta(minutes=30))
        period = range_period(T0.isoformat(), END.isoformat(), "UTC")
        report = build_report(app.engine, config, period, now=NOW)
    finally:
        app.close()
    doc = json.loads(render(report, "json"))
    assert doc["pods"] == [] and doc["namespaces"] == []
    assert "NAMESPACES" not in render(report, "table")
    blocks = digest_payload(report, None)["blocks"]
    assert not any("By namespace" in json.dumps(b) for b in blocks)


def test_a_team_budget_counts_its_namespaces_untargeted_gpu_time(
    db_url: str, fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    budget = '[[budget.teams]]\nteam = "research"\nmonthly_usd = 100\n'
    with node_run(db_url, fake_nvml, tmp_path, extra=budget) as config:
        engine = open_database(config.database_url)
        try:
            period = range_period(T0.isoformat(), END.isoformat(), "UTC")
            report = build_report(engine, config, period, now=NOW)
        finally:
            engine.dispose()
    (research,) = report.team_budgets
    # notebook-1's GPU 1, which no target held; not eval-3's share of the target chat's GPU 0.
    assert research.team == "research" and research.spent_usd == GPU_COST
    assert research.used_ratio == pytest.approx(float(GPU_COST / 100))
