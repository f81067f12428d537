"""Runs inside the booted Debian container, as a oneshot unit, with Debian's own python3.

Installs gpuwatch as systemd/README.md says (its "Install" block, run as it is written; pip is
pointed at the wheels built on the host through PIP_NO_INDEX/PIP_FIND_LINKS), then exercises
the unit under the real systemd and writes what it saw to result.json in the shared folder. It
only observes: tests/test_systemd_boot.py, on the host, judges. Standard library only (it runs
before and outside the daemon's virtualenv). Whatever happens, it powers the container off.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
import traceback
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

SHARED = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("/gpuwatch-test")
RESULT = SHARED / "result.json"
METRICS = "http://127.0.0.1:9877/metrics"
FAKE_NVML_CONFIG = Path("/etc/gpuwatch/fakenvml.conf")  # the drop-in points the fake here
CONFIG = Path("/etc/gpuwatch/gpuwatch.toml")
UNIT = "gpuwatch"

result: dict[str, Any] = {"steps": {}}


def run(*cmd: str, timeout: float = 120, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(cmd), capture_output=True, text=True, timeout=timeout, check=False, **kwargs
    )


def show(*props: str) -> dict[str, str]:
    out = run("systemctl", "show", UNIT, *(f"--property={p}" for p in props)).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def journal(*args: str) -> list[str]:
    return run("journalctl", "--no-pager", "-o", "cat", *args).stdout.splitlines()


def cursor() -> str:
    out = run("journalctl", "--no-pager", "-n", "0", "--show-cursor").stdout
    match = re.search(r"-- cursor: (\S+)", out)
    return match.group(1) if match else ""


def scrape() -> str:
    try:
        with urllib.request.urlopen(METRICS, timeout=5) as response:  # noqa: S310 (loopback)
            return response.read().decode()
    except OSError as exc:
        return f"unreachable: {exc}"


def wait_for(what: str, check: Callable[[], bool], timeout: float) -> float | None:
    """Seconds until ``check()`` held, or None when it never did within ``timeout``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if check():
            return round(time.monotonic() - start, 1)
        time.sleep(0.5)
    result.setdefault("timeouts", []).append(what)
    return None


def place(source: str, target: Path, mode: int = 0o644) -> None:
    """Copy a prepared file into place atomically (the fake NVML re-reads on a new inode)."""
    tmp = target.with_name(f".{target.name}.tmp")
    shutil.copyfile(SHARED / source, tmp)
    tmp.chmod(mode)
    os.replace(tmp, target)


def metrics_show(host: str) -> Callable[[], bool]:
    """The fake GPU's utilization is served under ``host``."""
    pattern = r'^gpuwatch_gpu_utilization_ratio\{[^}]*host="' + re.escape(host) + '"'
    needle = re.compile(pattern, re.M)
    return lambda: bool(needle.search(scrape()))


def listening(port: int) -> list[str]:
    """IPv4 addresses with a socket listening on ``port`` (no ss here: iproute2 is missing)."""
    found = []
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, _, hex_port = local.partition(":")
        if state == "0A" and int(hex_port, 16) == port:  # TCP_LISTEN
            octets = bytes.fromhex(address)[::-1]  # little-endian on x86 and arm64
            found.append(".".join(str(b) for b in octets) + f":{port}")
    return found


def step_install() -> None:
    # No /bin/kill here (procps is not in minbase): the old ExecReload failed on such systems.
    result["kill_binary"] = [p for p in ("/bin/kill", "/usr/bin/kill") if os.path.exists(p)]
    # The test's own parts first: the drop-in (fake NVML's file, a shorter WatchdogSec) and
    # the fake's "hardware" (one healthy GPU). The README's block then runs unchanged.
    Path("/etc/systemd/system/gpuwatch.service.d").mkdir(parents=True, exist_ok=True)
    shutil.copyfile(SHARED / "test-dropin.conf", "/etc/systemd/system/gpuwatch.service.d/test.conf")
    FAKE_NVML_CONFIG.parent.mkdir(mode=0o755, exist_ok=True)
    place("fakenvml.conf", FAKE_NVML_CONFIG)
    env = {**os.environ, "PIP_NO_INDEX": "1", "PIP_FIND_LINKS": str(SHARED / "wheelhouse")}
    started = time.monotonic()
    done = run("bash", "-euxo", "pipefail", str(SHARED / "install.sh"),
               cwd=SHARED / "src", env=env, timeout=400)  # fmt: skip
    result["install"] = {
        "rc": done.returncode,
        "seconds": round(time.monotonic() - started, 1),
        "output": (done.stdout + done.stderr)[-6000:],
    }


def step_running() -> None:
    props = show("ActiveState", "SubState", "MainPID", "NRestarts")
    result["running"] = props
    pid = props.get("MainPID", "0")
    result["metrics_first"] = wait_for("first metrics", metrics_show("boot-before"), 90)
    status = Path(f"/proc/{pid}/status").read_text()
    result["proc_status"] = dict(
        (k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in status.splitlines())
    )
    result["ids"] = {
        "gpuwatch": run("id", "-u", "gpuwatch").stdout.strip(),
        "gpuwatch_gid": run("id", "-g", "gpuwatch").stdout.strip(),
        "video": run("getent", "group", "video").stdout.split(":")[2:3],
    }
    state = Path("/var/lib/gpuwatch")
    st = state.stat()
    result["state_dir"] = {
        "mode": oct(st.st_mode & 0o7777),
        "owner": run("stat", "-c", "%U:%G", str(state)).stdout.strip(),
        "files": sorted(p.name for p in state.iterdir()),
    }
    # Writes as root, but inside the service's mount namespace: EROFS where ProtectSystem=strict
    # made the tree read-only; the state directory must stay writable.
    writes = {}
    for folder in ("/usr/lib", "/etc/gpuwatch", "/opt/gpuwatch", "/var/lib/gpuwatch"):
        probe = f"{folder}/.boot-test-probe"
        done = run("nsenter", f"--target={pid}", "--mount", "--", "sh", "-c",
                   f"touch {probe} && rm {probe}")  # fmt: skip
        writes[folder] = "ok" if done.returncode == 0 else done.stderr.strip()
    result["writes"] = writes
    body = scrape()
    result["metrics_sample"] = [
        line for line in body.splitlines() if line.startswith("gpuwatch_gpu_utilization_ratio")
    ]
    result["listening"] = listening(9877)
    result["journal_start"] = [
        line for line in journal("-u", UNIT) if "gpuwatch started" in line or "Started" in line
    ]
    result["security"] = run("systemd-analyze", "security", "--no-pager", UNIT).stdout[-300:]


def step_reload() -> None:
    before = show("MainPID")["MainPID"]
    mark = cursor()
    place("gpuwatch-reloaded.toml", CONFIG, 0o640)
    os.chown(CONFIG, 0, int(result["ids"]["gpuwatch_gid"]))
    started = time.monotonic()
    done = run("systemctl", "reload", UNIT)
    result["reload"] = {
        "rc": done.returncode,
        "stderr": done.stderr.strip(),
        "seconds": round(time.monotonic() - started, 2),
        "applied_after": wait_for("reloaded metrics", metrics_show("boot-after"), 30),
        "pid_before": before,
        "pid_after": show("MainPID")["MainPID"],
        "journal": journal("-u", UNIT, f"--after-cursor={mark}"),
        "state": show("ActiveState")["ActiveState"],
    }


def last_nvml_success() -> float | None:
    match = re.search(
        r'^gpuwatch_collector_last_success_timestamp_seconds\{[^}]*collector="nvml"[^}]*\} (\S+)',
        scrape(),
        re.M,
    )
    return float(match.group(1)) if match else None


def step_watchdog() -> None:
    props = show("MainPID", "NRestarts", "WatchdogUSec")
    mark = cursor()
    place("fakenvml-hang.conf", FAKE_NVML_CONFIG)
    started = time.monotonic()

    def stuck() -> bool:  # no NVML success for 4 intervals (2 s): a tick is in the hung call
        last = last_nvml_success()
        return last is not None and time.time() - last > 8

    stuck_after = wait_for("tick stuck", stuck, 30)
    # The call already blocked stays blocked; the restarted daemon must find a driver that
    # answers, or its own first tick would hang as well.
    place("fakenvml.conf", FAKE_NVML_CONFIG)

    def restarted() -> bool:
        now = show("MainPID", "NRestarts", "ActiveState")
        return now["MainPID"] not in ("0", props["MainPID"]) and now["ActiveState"] == "active"

    seconds = wait_for("watchdog restart", restarted, 180)
    result["watchdog"] = {
        "stuck_after": stuck_after,
        "before": props,
        "after": show("MainPID", "NRestarts", "ActiveState"),
        "seconds_to_restart": seconds,
        "metrics_again": wait_for("metrics after restart", metrics_show("boot-after"), 60),
        "journal": [
            line
            for line in journal(f"--after-cursor={mark}")
            if "gpuwatch" in line.lower() or "watchdog" in line.lower()
        ][-40:],
        "elapsed": round(time.monotonic() - started, 1),
    }


def step_stop() -> None:
    pid = show("MainPID")["MainPID"]
    mark = cursor()
    # PID 1 logs the notifications it gets (STOPPING=1 among them) at debug level only.
    run("systemd-analyze", "log-level", "debug")
    started = time.monotonic()
    done = run("systemctl", "stop", UNIT)
    seconds = round(time.monotonic() - started, 2)
    run("systemd-analyze", "log-level", "info")
    result["stop"] = {
        "pid": pid,
        "rc": done.returncode,
        "seconds": seconds,
        "props": show("ActiveState", "Result", "ExecMainCode", "ExecMainStatus", "ExecMainPID"),
        "journal": [
            line
            for line in journal(f"--after-cursor={mark}")
            if ("gpuwatch" in line.lower() or f"PID {pid}" in line or f"process {pid}" in line)
            and not line.startswith("Sent message")  # D-Bus chatter at debug level
        ][-200:],
    }
    result["journal_unit"] = journal("-u", UNIT)[-200:]


def main() -> None:
    try:
        for name, step in (("install", step_install), ("running", step_running),
                           ("reload", step_reload), ("watchdog", step_watchdog),
                           ("stop", step_stop)):  # fmt: skip
            started = time.monotonic()
            try:
                step()
                result["steps"][name] = round(time.monotonic() - started, 1)
            except Exception:  # record and stop: later steps build on earlier ones
                result["error"] = f"step {name}: {traceback.format_exc()}"
                break
            if name == "install" and result["install"]["rc"] != 0:
                break
    finally:
        tmp = RESULT.with_name(".result.json.tmp")
        tmp.write_text(json.dumps(result, indent=1))
        os.replace(tmp, RESULT)
        run("systemctl", "poweroff", "--no-block")


if __name__ == "__main__":
    main()
