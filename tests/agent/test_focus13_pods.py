"""FOCUS 1.3 on Kubernetes: a GPU the cost ledger split by pod is written as each pod's busy and
idle time, the GPU time no pod held as the unallocated portion, and passes the suite's 1.3
checker adding up to the 1.0 export's rows.

The node is tests/agent/pod_cost_helpers.py's, run for real (the daemon's App, a kubelet
pod-resources server, the fake NVML): GPU 0 time-sliced 3:1 by SM between pods team-a/chat-0 and
team-b/eval-3 (90 % busy), GPU 1 given by the kubelet to team-b/notebook-1 with no process
(5 % busy), GPU 2 held by nobody; namespace team-b labelled team research, project evals.
"""

from __future__ import annotations

import csv
import json
from decimal import Decimal
from pathlib import Path

from agent.cli import export as export_cli
from agent.cli.main import build_parser
from agent.config.settings import Config
from agent.reporting.focus_allocation import POD_REQUEST, POD_SM
from tests.agent import focus13_checker as checker
from tests.agent.pod_cost_helpers import GPU0, GPU1, GPU2, GPU_COST, NOW, node_run
from tests.conftest import FakeNvml

PERIOD = ("--from", "2026-11-02", "--to", "2026-11-03", "--granularity", "day")


def export(config: Config, out: Path, *flags: str) -> list[dict[str, str]]:
    args = build_parser().parse_args(["export", "focus", *PERIOD, *flags, "--output", str(out)])
    assert export_cli.run(args, config, NOW) == 0
    with out.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_a_gpu_split_by_pod_is_written_as_the_pods_allocated_charges(
    db_url: str, fake_nvml: FakeNvml, tmp_path: Path
) -> None:
    with node_run(db_url, fake_nvml, tmp_path) as config:
        origins = export(config, tmp_path / "f10.csv")
        rows = export(config, tmp_path / "f13.csv", "--focus-version", "1.3")
    assert checker.check(list(rows[0]), rows, origins) == []
    assert sum(Decimal(r["EffectiveCost"]) for r in rows) == 3 * GPU_COST  # 2 h of 3 GPUs

    by = {r["AllocatedResourceId"]: r for r in rows if r["ResourceId"] == GPU0}
    assert set(by) == {"node-1/team-a/chat-0", "node-1/team-a/chat-0/idle",
                       "node-1/team-b/eval-3", "node-1/team-b/eval-3/idle"}  # fmt: skip
    assert {r["AllocatedMethodId"] for r in by.values()} == {POD_SM}
    chat = [Decimal(by[k]["EffectiveCost"]) for k in by if "chat-0" in k]
    assert sum(chat) == GPU_COST * 3 / 4  # its SM share
    assert Decimal(by["node-1/team-a/chat-0/idle"]["EffectiveCost"]) == GPU_COST * 3 / 4 / 10
    assert json.loads(by["node-1/team-b/eval-3"]["AllocatedTags"]) == {
        "gpuwatch/namespace": "team-b", "gpuwatch/pod": "eval-3", "gpuwatch/portion": "busy",
        "team": "research", "project": "evals",
    }  # fmt: skip
    assert json.loads(by["node-1/team-a/chat-0"]["AllocatedTags"])["team"] == "(unlabelled)"
    assert by["node-1/team-a/chat-0"]["AllocatedResourceName"] == "pod team-a/chat-0 on node-1"

    notebook = [r for r in rows if r["ResourceId"] == GPU1]
    assert {r["AllocatedMethodId"] for r in notebook} == {POD_REQUEST}
    assert {r["AllocatedResourceId"] for r in notebook} == {
        "node-1/team-b/notebook-1", "node-1/team-b/notebook-1/idle"}  # fmt: skip
    (nobody,) = [r for r in rows if r["ResourceId"] == GPU2]  # no pod held it: not split
    assert nobody["AllocatedMethodId"] == "" and Decimal(nobody["EffectiveCost"]) == GPU_COST
