"""The PrometheusRule is contrib/prometheus/gpuwatch-rules.yml, as scripts/gen-prometheusrule
makes it: a change to the rules file without rerunning the script fails here."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import yaml

from tests.deploy.kube import BASE, ROOT, one, render

SCRIPT = ROOT / "scripts" / "gen-prometheusrule"
RULES = ROOT / "contrib" / "prometheus" / "gpuwatch-rules.yml"


def test_the_committed_prometheusrule_is_what_the_script_makes_now() -> None:
    done = subprocess.run([sys.executable, str(SCRIPT), "--check"], capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr


def test_its_groups_are_the_contrib_rules_exactly() -> None:
    rendered = one(render(BASE), "PrometheusRule")
    contrib = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    assert rendered["spec"] == contrib
    assert sum(len(g["rules"]) for g in rendered["spec"]["groups"]) == sum(
        len(g["rules"]) for g in contrib["groups"]
    )


def test_the_check_fails_on_a_stale_file(tmp_path: Path) -> None:
    # The script's own check, on a copy of its files in which a rule then changes.
    root = tmp_path
    for path in (SCRIPT, RULES, BASE / "prometheusrule.yaml"):
        target = root / path.relative_to(ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, target)
    check = [sys.executable, str(root / "scripts" / "gen-prometheusrule"), "--check"]
    assert subprocess.run(check, capture_output=True, timeout=60, check=False).returncode == 0
    rules = root / RULES.relative_to(ROOT)
    text = rules.read_text(encoding="utf-8")
    assert "for: 30s" in text
    rules.write_text(text.replace("for: 30s", "for: 1m", 1), encoding="utf-8")
    done = subprocess.run(check, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 1
    assert "prometheusrule.yaml is stale: run scripts/gen-prometheusrule" in done.stderr
    # Writing it makes it fresh again, with the changed rule in it.
    subprocess.run(check[:-1], timeout=60, check=True)
    assert subprocess.run(check, capture_output=True, timeout=60, check=False).returncode == 0
    generated = yaml.safe_load((root / "deploy/kubernetes/base/prometheusrule.yaml").read_text())
    assert generated["spec"] == yaml.safe_load(rules.read_text())
