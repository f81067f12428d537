"""`gpuwatch demo` as users run it: a real process, its report, its files, its database's mark.

A short history (`--days 2`) keeps this in `make test`; test_demo_month.py runs the default
month. The demo builds the fake NVML library itself (gcc and nvml.h, as `make demo` sets up).
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.storage.db import open_database
from agent.storage.demo_mark import DEMO_APPLICATION_ID

REPO = Path(__file__).resolve().parents[2]
MODELS = ("llama-3.1-70b", "qwen2.5-7b", "mistral-7b-instruct")
MONEY = r"\$[\d,]+\.\d+"


def gpuwatch(args: list[str], home: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUWATCH_", "FAKE_NVML"))}
    env.update({"XDG_STATE_HOME": str(home / "state"), "HOME": str(home)})
    return subprocess.run(
        [sys.executable, "-m", "agent.cli.main", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """One demo run for this module's tests: (its folder, what it printed)."""
    home = tmp_path_factory.mktemp("home")
    done = gpuwatch(["demo", "--days", "2"], home)
    assert done.returncode == 0, done.stderr
    yield home / "state" / "gpuwatch" / "demo", done.stdout


def models_section(report: str) -> dict[str, list[str]]:
    """model -> its row's cells, from the table report's MODELS section."""
    section = report.split("\nMODELS", 1)[1].split("\n\n", 1)[0]
    rows = [line.split() for line in section.splitlines()[2:]]
    return {cells[0]: cells[1:] for cells in rows}


def test_the_demo_prints_a_report_with_cost_per_million_tokens_for_each_model(
    demo: tuple[Path, str],
) -> None:
    _, out = demo
    assert "simulated rounds of 2 hosts over 2 days" in out
    assert "simulating the fleet" not in out  # no progress bar when stdout is not a terminal
    spend = re.search(rf"^  spend \(billed or metered: see note\)\s+({MONEY})$", out, re.MULTILINE)
    assert spend and spend.group(1) != "$0.00"
    models = models_section(out)
    assert set(models) == set(MODELS)
    for model, (requests, tokens, cost, per_million, *_) in models.items():
        assert int(requests.replace(",", "")) > 0, model
        assert int(tokens.replace(",", "")) > 0, model
        assert re.fullmatch(MONEY, cost) and cost != "$0.00", model
        assert float(per_million.lstrip("$")) > 0, model
    assert "GpuIdle" in out  # the spare H100 nobody uses
    # The GPUs as the NVML collector read them through pynvml, over the fake library.
    assert "NVIDIA H100" in out and "NVIDIA L40S" in out


def test_the_history_s_configuration_says_its_interval(demo: tuple[Path, str]) -> None:
    folder, _ = demo
    for host in ("demo-h100", "demo-l40s"):
        text = (folder / f"{host}.toml").read_text()
        assert "interval_seconds = 3600  # the history: one simulated round per interval" in text
        assert "demo = true" in text


def test_the_demo_writes_its_html_report_and_digest_and_says_where(demo: tuple[Path, str]) -> None:
    folder, out = demo
    html, digest = folder / "report.html", folder / "digest.json"
    assert f"HTML report     {html}" in out and f"digest preview  {digest}" in out
    assert html.read_text().lstrip().lower().startswith("<!doctype html")
    assert all(model in html.read_text() for model in MODELS)
    payload = json.loads(digest.read_text())
    assert payload["blocks"] and "text" in payload


def test_the_demo_database_is_marked_and_a_real_daemon_refuses_it(
    demo: tuple[Path, str], tmp_path: Path
) -> None:
    folder, _ = demo
    database = folder / "demo.db"
    with sqlite3.connect(database) as conn:
        assert conn.execute("PRAGMA application_id").fetchone()[0] == DEMO_APPLICATION_ID
    real = tmp_path / "real.toml"
    real.write_text(f'database_url = "sqlite:///{database}"\n[daemon]\nmetrics_listen = ""\n')
    refused = gpuwatch(["run", "--config", str(real)], tmp_path, timeout=60)
    assert refused.returncode == 1
    assert refused.stderr.strip().splitlines()[-1] == (
        f"gpuwatch: database_url: {database} is a `gpuwatch demo` database of simulated data; "
        "gpuwatch does not run on it (point database_url at another file)"
    )
    # The demo's own configuration is let in: the CLI reads the demo with it.
    week = gpuwatch(["report", "--config", str(folder / "demo-h100.toml"), "--week"], tmp_path)
    assert week.returncode == 0, week.stderr


def test_the_demo_refuses_a_real_database_in_its_place(tmp_path: Path) -> None:
    folder = tmp_path / "here"
    real = folder / "demo.db"
    open_database(f"sqlite:///{real}").dispose()  # a real (unmarked) gpuwatch database
    before = real.read_bytes()
    refused = gpuwatch(["demo", "--days", "1", "--state-dir", str(folder)], tmp_path)
    assert refused.returncode == 1
    assert refused.stderr.strip() == (
        f"gpuwatch: {real} exists and is not a demo database; the demo does not touch it "
        "(choose another --state-dir)"
    )
    assert real.read_bytes() == before


def test_a_demo_configuration_refuses_a_real_database(tmp_path: Path) -> None:
    real = tmp_path / "real.db"
    open_database(f"sqlite:///{real}").dispose()
    config = tmp_path / "demo.toml"
    config.write_text(
        f'demo = true\ndatabase_url = "sqlite:///{real}"\n[collectors.nvml]\nenabled = false\n'
    )
    refused = gpuwatch(["collect", "--once", "--config", str(config)], tmp_path)
    assert refused.returncode == 1
    assert "is not a demo database: the demo never writes into a real one" in refused.stderr


def test_a_terminal_gets_a_progress_bar(tmp_path: Path) -> None:
    import pty

    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUWATCH_", "FAKE_NVML"))}
    leader, follower = pty.openpty()
    command = [sys.executable, "-m", "agent.cli.main", "demo", "--days", "1",
               "--state-dir", str(tmp_path / "demo")]  # fmt: skip
    with subprocess.Popen(command, env=env, cwd=REPO, stdout=follower, stderr=subprocess.DEVNULL):
        os.close(follower)
        seen = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the terminal closed: the demo is done
                break
            if not chunk:
                break
            seen += chunk
    os.close(leader)
    text = seen.decode()
    assert "\rsimulating the fleet [" in text
    assert "] 100%" in text and "MODELS" in text


def test_sigterm_while_simulating_stops_the_demo_and_its_host_processes(tmp_path: Path) -> None:
    import signal
    import time

    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUWATCH_", "FAKE_NVML"))}
    command = [sys.executable, "-m", "agent.cli.main", "demo", "--days", "20",
               "--state-dir", str(tmp_path / "demo")]  # fmt: skip
    with subprocess.Popen(command, env=env, cwd=REPO, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True) as proc:  # fmt: skip
        hosts: list[int] = []
        deadline = time.monotonic() + 60
        while len(hosts) < 2 and time.monotonic() < deadline:  # the two host processes
            time.sleep(0.2)
            tasks = Path(f"/proc/{proc.pid}/task")
            hosts = [int(p) for t in tasks.glob("*/children") for p in t.read_text().split()]
        assert len(hosts) == 2
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert err.strip() == "gpuwatch demo: interrupted; the demo database is incomplete"
    assert not [pid for pid in hosts if Path(f"/proc/{pid}").exists()]


def test_demo_must_be_true_or_false(tmp_path: Path) -> None:
    config = tmp_path / "bad.toml"
    config.write_text('demo = "yes"\n')
    done = gpuwatch(["check-config", "--config", str(config)], tmp_path)
    assert done.returncode == 2
    assert (
        done.stderr.strip()
        == f"gpuwatch: {config}: demo: expected true or false, got a string 'yes'"
    )
