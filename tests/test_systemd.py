"""The shipped systemd unit: valid for systemd, sandboxed, and with the settings users rely on."""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest

UNIT = Path(__file__).resolve().parent.parent / "systemd" / "gpuwatch.service"
EXEC_PATH = "/opt/gpuwatch/venv/bin/gpuwatch"
MAX_EXPOSURE = 3.0

SYSTEMD_ANALYZE = shutil.which("systemd-analyze")
needs_systemd_analyze = pytest.mark.skipif(
    SYSTEMD_ANALYZE is None, reason="systemd-analyze is not installed (package: systemd)"
)


def parse_unit(text: str) -> dict[str, dict[str, list[str]]]:
    """Sections -> keys -> every value in order (DeviceAllow= and friends may repeat)."""
    sections: dict[str, dict[str, list[str]]] = {}
    current: dict[str, list[str]] | None = None
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("[") and line.endswith("]"):
            current = sections.setdefault(line[1:-1], {})
            continue
        assert current is not None, f"assignment outside a section: {raw!r}"
        assert not line.endswith("\\"), "keep the unit free of continuation lines"
        key, sep, value = line.partition("=")
        assert sep, f"not an assignment: {raw!r}"
        current.setdefault(key.strip(), []).append(value.strip())
    return sections


@pytest.fixture(scope="module")
def service() -> dict[str, list[str]]:
    return parse_unit(UNIT.read_text())["Service"]


def run_analyze(*args: str) -> subprocess.CompletedProcess[str]:
    assert SYSTEMD_ANALYZE is not None
    env = {**os.environ, "SYSTEMD_COLORS": "0", "SYSTEMD_PAGER": "", "LC_ALL": "C.UTF-8"}
    return subprocess.run(
        [SYSTEMD_ANALYZE, "--no-pager", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )


@needs_systemd_analyze
def test_verify_is_clean(tmp_path: Path) -> None:
    # verify insists that ExecStart= exists and is executable, and /opt/gpuwatch is not
    # installed here. Point only that one path at a stub; every other line is the real unit.
    text = UNIT.read_text()
    assert text.count(EXEC_PATH) == 1
    stub = tmp_path / "bin" / "gpuwatch"
    stub.parent.mkdir()
    stub.write_text("#!/bin/sh\nexit 0\n")
    stub.chmod(stub.stat().st_mode | stat.S_IXUSR)
    copy = tmp_path / "gpuwatch.service"
    copy.write_text(text.replace(EXEC_PATH, str(stub)))

    result = run_analyze("verify", "--man=no", str(copy))
    output = (result.stdout + result.stderr).strip()
    assert result.returncode == 0 and output == "", output


@needs_systemd_analyze
def test_security_exposure_is_low() -> None:
    result = run_analyze("security", "--offline=yes", str(UNIT))
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    match = re.search(r"Overall exposure level for gpuwatch\.service: (\d+(?:\.\d+)?)", output)
    assert match, output
    exposure = float(match.group(1))
    assert exposure <= MAX_EXPOSURE, output


def test_properties_users_rely_on(service: dict[str, list[str]]) -> None:
    def one(key: str) -> str:
        values = service.get(key, [])
        assert len(values) == 1, f"{key}= should be set exactly once, got {values}"
        return values[0]

    assert one("Type") == "notify"
    assert one("NotifyAccess") == "main"
    assert one("WatchdogSec") == "60"
    assert one("Restart") == "on-failure"
    assert one("RestartSec")
    assert one("StateDirectory") == "gpuwatch"
    # It would make /etc/gpuwatch writable under ProtectSystem=strict (test_systemd_boot.py).
    assert "ConfigurationDirectory" not in service
    assert one("ExecStart").split() == [EXEC_PATH, "run"]
    # Not /bin/kill: procps is missing on minimal systems (tests/test_systemd_boot.py).
    assert one("ExecReload") == "/bin/sh -c 'kill -HUP \"$$MAINPID\"'"
    assert one("EnvironmentFile") == "-/etc/gpuwatch/gpuwatch.env"
    assert one("KillSignal") == "SIGTERM"
    assert one("TimeoutStopSec")
    assert one("User") == "gpuwatch"
    assert "video" in one("SupplementaryGroups").split()


def test_sandbox_keeps_what_the_daemon_needs(service: dict[str, list[str]]) -> None:
    # NVML must reach the NVIDIA character devices through a closed device policy.
    assert service["DevicePolicy"] == ["closed"]
    allowed = {v.split()[0] for v in service["DeviceAllow"]}
    assert {"char-nvidia-frontend", "char-nvidia-uvm", "char-nvidia-caps"} <= allowed
    assert service.get("PrivateDevices", ["no"]) == ["no"]
    # Other processes' /proc/PID/cgroup maps GPU processes to units.
    assert service.get("ProtectProc", ["default"]) == ["default"]
    assert service.get("PrivateUsers", ["no"]) == ["no"]
    # Loopback and internet (billing, Slack), AF_UNIX for sd_notify and PostgreSQL.
    assert service["RestrictAddressFamilies"] == ["AF_UNIX AF_INET AF_INET6"]
    assert "IPAddressDeny" not in service and "PrivateNetwork" not in service
    for key in ("NoNewPrivileges", "MemoryDenyWriteExecute", "ProtectKernelTunables"):
        assert service[key] == ["yes"], key
    assert service["ProtectSystem"] == ["strict"]
    assert service["CapabilityBoundingSet"] == [""]
    assert service["UMask"] == ["0077"]


def test_runtime_dependencies_load_without_write_execute_memory() -> None:
    # MemoryDenyWriteExecute=yes kills W+X mappings. The kernel's own PR_SET_MDWE
    # (Linux >= 6.3) enforces the same rule, so load the daemon's native dependencies under it.
    probe = """
import ctypes, mmap, sys
libc = ctypes.CDLL(None, use_errno=True)
if libc.prctl(65, 1, 0, 0, 0) != 0:  # PR_SET_MDWE, PR_MDWE_REFUSE_EXEC_GAIN
    sys.exit(77)
try:
    mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
    sys.exit("W+X mapping was allowed: MDWE not in force")
except OSError:
    pass
import pynvml, sqlalchemy, psycopg, httpx, prometheus_client, slack_sdk, apscheduler, alembic
import agent.daemon.sdnotify
"""
    result = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=UNIT.parent.parent,
        check=False,
    )
    if result.returncode == 77:
        pytest.skip("kernel lacks prctl(PR_SET_MDWE) (Linux < 6.3)")
    assert result.returncode == 0, result.stderr
