"""`gpuwatch run` as a real process, killed with SIGKILL while a notification is being retried
and again while the alert fires: Slack (a loopback server, through slack_sdk) gets the firing
message exactly once, and nothing is sent again after the restarts."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from tests.agent.daemon_harness import RunningDaemon, free_port, start_daemon
from tests.alerts.notifiers.conftest import Loopback, Reply, loopback  # noqa: F401

HOOK = "/services/T9/B9/killsecret"


def run_dir(tmp_path: Path, n: int) -> Path:
    """One folder per process run (its notify socket and log)."""
    folder = tmp_path / f"run{n}"
    folder.mkdir()
    return folder


def wait_until(check: Callable[[], bool], daemon: RunningDaemon, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.05)
    raise AssertionError(f"{what} did not happen within {timeout} s; log:\n{daemon.log()}")


def test_sigkill_mid_retry_and_while_firing_loses_and_repeats_nothing(
    tmp_path: Path,
    loopback: Loopback,  # noqa: F811
) -> None:
    loopback.reply(HOOK, Reply(500, "server error"))
    port = free_port()
    config = tmp_path / "gpuwatch.toml"
    config.write_text(
        f'host = "test-box"\ndatabase_url = "sqlite:///{tmp_path / "gw.db"}"\n'
        f'[daemon]\ninterval_seconds = 1\nmetrics_listen = "127.0.0.1:{port}"\n'
        '[notify.slack]\nwebhook_url_env = "HOOK"\n'
        "[digest]\nenabled = false\n"  # only alerts in this channel, whatever the weekday
    )
    env = {"HOOK": loopback.url + HOOK}
    # No NVML library in the test process's environment: the collector is blind from the
    # start, so CollectorDown fires after three missed collections.
    daemon = start_daemon(config, run_dir(tmp_path, 1), port, env)
    try:
        wait_until(lambda: len(loopback.requests) == 1, daemon, "the first attempt", 20)
        daemon.kill()  # SIGKILL: the failed attempt is recorded, its retry is 10 s away
    finally:
        daemon.kill()
    first = loopback.requests[0].json()["text"]
    assert first.startswith("[FIRING:1]") and "CollectorDown" in first

    loopback.reply(HOOK, Reply(200, "ok"))
    daemon = start_daemon(config, run_dir(tmp_path, 2), port, env)
    try:
        wait_until(lambda: len(loopback.requests) == 2, daemon, "the retry", 25)
        time.sleep(3)  # evaluations go on: the alert still fires, and nothing new is sent
        daemon.kill()
    finally:
        daemon.kill()
    assert loopback.requests[1].body == loopback.requests[0].body  # the same message, retried

    daemon = start_daemon(config, run_dir(tmp_path, 3), port, env)
    try:
        daemon.wait_for_metric("gpuwatch_collector_success")
        time.sleep(4)
        daemon.stop()
    finally:
        daemon.kill()
    assert len(loopback.requests) == 2
    assert "killsecret" not in daemon.log()
