"""Issue 43's "done when" for the FOCUS 1.3 export: `gpuwatch export focus --focus-version 1.3`
of the demo's days has the allocation columns filled, and its EffectiveCost adds up to the
report's metered total within a cent (exactly to the 1.0 export's). A day of the demo here
(`--days 1`, a few seconds); test_demo_month.py checks the default month the same way.
"""

from __future__ import annotations

import csv
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

from tests.agent import focus13_checker as checker
from tests.demo.test_demo_cli import gpuwatch


def exported(home: Path, config: Path, out: Path, *flags: str) -> list[dict[str, str]]:
    done = gpuwatch(["export", "focus", "--config", str(config), *flags, "--output", str(out)],
                    home)  # fmt: skip
    assert done.returncode == 0, done.stderr
    with out.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def check_demo_export(home: Path, folder: Path, days: int) -> None:
    """The demo's days (to tomorrow, in UTC: the demo's timezone) exported as FOCUS 1.3 and 1.0
    and reported, from the demo's own configuration."""
    config = folder / "demo-h100.toml"
    today = datetime.now(UTC).date()
    period = ("--from", str(today - timedelta(days=days + 1)), "--to", str(today + timedelta(1)))
    f13 = exported(home, config, home / "f13.csv", *period, "--focus-version", "1.3",
                   "--granularity", "day")  # fmt: skip
    f10 = exported(home, config, home / "f10.csv", *period, "--granularity", "day")
    report = gpuwatch(["report", "--config", str(config), *period, "--format", "json"], home)
    assert report.returncode == 0, report.stderr
    totals = json.loads(report.stdout)["totals"]

    assert checker.check(list(f13[0]), f13, f10) == []
    effective = sum((Decimal(r["EffectiveCost"]) for r in f13), Decimal(0))
    assert effective == sum((Decimal(r["EffectiveCost"]) for r in f10), Decimal(0))
    assert abs(effective - Decimal(str(totals["metered_usd"]))) < Decimal("0.01")
    assert effective > 0
    # The allocation columns are filled: every GPU a target held is split, with its idle rows.
    split = [r for r in f13 if r["AllocatedMethodId"]]
    held = {r["ResourceId"] for r in f10 if "gpuwatch/target" in json.loads(r["Tags"])}
    assert held and {r["ResourceId"] for r in split} == held
    for column in ("AllocatedMethodDetails", "AllocatedResourceId", "AllocatedResourceName",
                   "AllocatedTags"):  # fmt: skip
        assert any(r[column] for r in split), column
    assert any(r["AllocatedResourceId"].endswith("/idle") for r in split)
    # Tokens: a target on two GPUs has its tokens shared between them, not counted twice.
    tokens = sum((Decimal(r["x_OutputTokens"]) for r in f13 if r["x_OutputTokens"]), Decimal(0))
    assert abs(tokens - totals["generated_tokens"]) < 1


def test_a_day_of_the_demo_exports_as_focus_1_3_with_its_metered_total(tmp_path: Path) -> None:
    done = gpuwatch(["demo", "--days", "1"], tmp_path)
    assert done.returncode == 0, done.stderr
    check_demo_export(tmp_path, tmp_path / "state" / "gpuwatch" / "demo", 1)
