"""SdNotifier against real AF_UNIX datagram sockets, the way systemd's notify socket works."""

from __future__ import annotations

import logging
import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.daemon.sdnotify import SdNotifier, watchdog_interval_seconds


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[tuple[socket.socket, str]]:
    path = str(tmp_path / "notify")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sock.bind(path)
    sock.settimeout(5)
    yield sock, path
    sock.close()


def test_ready_watchdog_stopping_status_arrive(receiver: tuple[socket.socket, str]) -> None:
    sock, path = receiver
    with SdNotifier.from_env({"NOTIFY_SOCKET": path}) as notifier:
        assert notifier.enabled
        assert notifier.ready()
        assert notifier.watchdog()
        assert notifier.status("collecting\n3 GPUs")
        assert notifier.stopping()
        got = [sock.recv(4096).decode() for _ in range(4)]
    assert got == ["READY=1", "WATCHDOG=1", "STATUS=collecting 3 GPUs", "STOPPING=1"]


def test_reloading_carries_monotonic_timestamp(receiver: tuple[socket.socket, str]) -> None:
    sock, path = receiver
    with SdNotifier.from_env({"NOTIFY_SOCKET": path}) as notifier:
        assert notifier.reloading()
    lines = sock.recv(4096).decode().split("\n")
    assert lines[0] == "RELOADING=1"
    key, _, value = lines[1].partition("=")
    assert key == "MONOTONIC_USEC" and int(value) > 0


def test_abstract_namespace() -> None:
    name = f"gpuwatch-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        sock.bind("\0" + name)
        sock.settimeout(5)
        with SdNotifier.from_env({"NOTIFY_SOCKET": "@" + name}) as notifier:
            assert notifier.ready()
        assert sock.recv(4096) == b"READY=1"


@pytest.mark.parametrize("env", [{}, {"NOTIFY_SOCKET": ""}, {"NOTIFY_SOCKET": "vsock:2:1234"}])
def test_without_usable_socket_everything_is_a_noop(env: dict[str, str]) -> None:
    notifier = SdNotifier.from_env(env)
    assert not notifier.enabled
    assert not notifier.ready()
    assert not notifier.watchdog()
    assert not notifier.stopping()
    assert not notifier.reloading()
    assert not notifier.status("x")
    notifier.close()


def test_send_failure_never_raises_and_logs_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="agent.daemon.sdnotify")
    with SdNotifier.from_env({"NOTIFY_SOCKET": str(tmp_path / "nobody-listens")}) as notifier:
        assert notifier.enabled
        assert not notifier.ready()
        assert not notifier.watchdog()
    failures = [r for r in caplog.records if "failed" in r.getMessage()]
    assert len(failures) == 1 and failures[0].levelno == logging.DEBUG


def test_watchdog_interval_is_half_of_watchdog_usec() -> None:
    env = {"WATCHDOG_USEC": "60000000"}
    assert watchdog_interval_seconds(env) == 30.0
    assert SdNotifier.from_env(env).watchdog_interval_seconds() == 30.0


@pytest.mark.parametrize("usec", ["", "0", "-5", "abc", "1.5"])
def test_watchdog_interval_none_when_unset_or_malformed(usec: str) -> None:
    assert watchdog_interval_seconds({}) is None
    assert watchdog_interval_seconds({"WATCHDOG_USEC": usec}) is None


def test_watchdog_pid_must_be_this_process() -> None:
    def interval(watchdog_pid: str, pid: int | None = None) -> float | None:
        env = {"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": watchdog_pid}
        return watchdog_interval_seconds(env, pid=pid)

    me = os.getpid()
    assert interval(str(me)) == 1.0
    assert interval(str(me + 1)) is None
    assert interval("x") is None
    assert interval("7", pid=7) == 1.0
