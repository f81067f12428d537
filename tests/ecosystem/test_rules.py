"""contrib/prometheus: the rules file passes promtool's checks and its own unit tests."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.ecosystem.dashboard import RULE_TESTS, RULES


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.skip("promtool not installed (`make test` installs Debian's prometheus as root)")
    return found


def test_promtool_check_rules_finds_every_rule_valid() -> None:
    done = subprocess.run(
        [promtool(), "check", "rules", str(RULES)], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 34 rules found" in done.stdout


def test_promtool_unit_tests_pass() -> None:
    # Every alerting rule fires and stays quiet where gpuwatch's would; recording rules' values.
    done = subprocess.run(
        [promtool(), "test", "rules", *map(str, RULE_TESTS)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=RULES.parent,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("SUCCESS") == len(RULE_TESTS)


def test_a_wrong_rule_fails_its_unit_tests(tmp_path: Path) -> None:
    """The unit tests can fail: GpuIdle without its warm-up guard fires on a loading model."""
    text = RULES.read_text()
    guard = "(min by (host, target) (min_over_time(gpuwatch_target_up[10m])) < 1)"
    assert guard in text
    (tmp_path / RULES.name).write_text(text.replace(guard, "(vector(0) < 1)"))
    for test in RULE_TESTS:
        shutil.copy(test, tmp_path / test.name)
    done = subprocess.run(
        [promtool(), "test", "rules", RULE_TESTS[0].name],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert done.returncode == 1
    assert "name: GpuIdle" in done.stdout + done.stderr
