"""gpuwatch's container image, built as `make image` builds it and run with podman.

`make test-image` (slow). One run of the image as a user runs it on a GPU box: the host's
network (a simulated vLLM on the host's loopback, its bearer token a mounted secret file), the
fake libnvidia-ml mounted where the NVIDIA container toolkit puts the real one, the
configuration a mounted file, the state a mounted volume, the root file system read-only.
Then a report read from that volume by the image's own CLI, and two runs on podman's bridge
network: /metrics on a published port only when the configuration binds 0.0.0.0. How podman
is run on this machine (runc, ulimits) is in tests/container/podman.py and docs/container.md.
Needs root, buildah, debootstrap, podman and runc (make test-image installs them as root);
skips otherwise, saying so.
"""

from __future__ import annotations

import json
import os
import subprocess
import time
import tomllib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent.sim.server import EngineServer
from agent.sim.traffic import Traffic
from tests.agent.daemon_harness import free_port
from tests.container import podman
from tests.container.podman import Container, Mount
from tests.fakenvml.build import LIB_NAME, FakeGpu, FakeNvmlConfig, write_config

UID = 65532
GPU = FakeGpu(uuid="GPU-image-0", util=80)
MODEL = "llama-8b"
TOKEN = "engine-token-for-the-image-test"
SERVED = 20  # requests completed between the daemon's first and a later scrape
CONFIG = """host = "image-box"

[daemon]
interval_seconds = 1
metrics_listen = "127.0.0.1:{port}"

[[targets]]
name = "llama"
url = "{url}"
bearer_token_file = "/run/secrets/engine-token"

[[rates]]
gpu = "*"
usd_per_hour = 2.0
"""
PUBLISHED_CONFIG = """[daemon]
metrics_listen = "0.0.0.0:9877"

[collectors.nvml]
enabled = false
"""
WRITE_PROBE = """
import json, os
out = {}
for folder in ("/", "/etc/gpuwatch", "/opt/gpuwatch", "/usr/lib", "/var/lib/gpuwatch"):
    try:
        path = os.path.join(folder, ".gpuwatch-write-probe")
        open(path, "w").close()
        os.remove(path)
        out[folder] = "ok"
    except OSError as e:
        out[folder] = e.strerror
status = dict(line.split(":", 1) for line in open("/proc/1/status").read().splitlines())
out["status"] = {k: v.strip() for k, v in status.items() if k in ("Uid", "Gid", "CapEff")}
out["cmdline"] = open("/proc/1/cmdline").read().split("\\0")[:-1]
print(json.dumps(out))
"""


def _wait(what: str, probe: Callable[[], str | None], timeout: float = 60) -> str:
    """Poll ``probe`` until it returns a value (the daemon's start or scrape, not a schedule)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found is not None:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def _metrics(port: int) -> str | None:
    try:
        answer = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2)
    except httpx.HTTPError:
        return None
    return answer.text if answer.status_code == 200 else None


def _metrics_with(port: int, *needles: str) -> Callable[[], str | None]:
    def probe() -> str | None:
        text = _metrics(port)
        return text if text is not None and all(n in text for n in needles) else None

    return probe


def _prepare(work: Path, engine_url: str, port: int, fake_nvml_dir: Path) -> list[Mount]:
    state = work / "state"
    state.mkdir(mode=0o700)
    os.chown(state, UID, UID)  # a volume the image's user owns, as docs/container.md says
    (work / "gpuwatch.toml").write_text(CONFIG.format(port=port, url=engine_url))
    token = work / "engine-token"
    token.write_text(TOKEN)
    token.chmod(0o400)
    os.chown(token, UID, UID)
    write_config(work / "fakenvml.conf", FakeNvmlConfig(gpus=(GPU,)))
    return [
        Mount(state, "/var/lib/gpuwatch", read_only=False),
        Mount(work / "gpuwatch.toml", "/etc/gpuwatch/gpuwatch.toml"),
        Mount(token, "/run/secrets/engine-token"),
        Mount(fake_nvml_dir / LIB_NAME, "/usr/lib/libnvidia-ml.so.1"),
        Mount(work / "fakenvml.conf", "/etc/fakenvml.conf"),
    ]


def _run_on_host_network(
    image: str, mounts: list[Mount], engine: EngineServer, traffic: Traffic, port: int
) -> dict[str, Any]:
    """The daemon from start to SIGTERM; what a user would look at, recorded."""
    record: dict[str, Any] = {}
    box = Container.start(image, mounts=mounts, env={"FAKE_NVML_CONFIG": "/etc/fakenvml.conf"},
                          network=["--network=host"])  # fmt: skip
    try:
        record["metrics"] = _wait("the fake GPU and the engine on /metrics", _metrics_with(
            port, f'gpu_uuid="{GPU.uuid}"', 'gpuwatch_target_up{host="image-box",target="llama"} 1'
        ))  # fmt: skip
        record["probe"] = json.loads(box.exec_python(WRITE_PROBE))
        # SIGHUP re-reads the mounted file, rewritten in place (a mounted file keeps its inode).
        config = next(m.host for m in mounts if m.inside == "/etc/gpuwatch/gpuwatch.toml")
        config.write_text(config.read_text().replace('"image-box"', '"image-box-reloaded"'))
        box.signal("HUP")
        record["reloaded"] = _wait("the new host name on /metrics", _metrics_with(
            port, 'gpuwatch_target_up{host="image-box-reloaded",target="llama"} 1'
        ))  # fmt: skip
        # Requests completed after the first scrape (a baseline), seen by a later one.
        scrapes = len(engine.requests)
        record["served"] = traffic.serve(SERVED)
        _wait("another scrape", lambda: "yes" if len(engine.requests) > scrapes + 1 else None)
        started = time.monotonic()
        box.stop(timeout=30)
        record["stop_seconds"] = time.monotonic() - started
        record["state"] = box.inspect()["State"]
        record["host_config"] = box.inspect()["HostConfig"]
        record["stdout"], record["stderr"] = box.logs()
    finally:
        box.remove()
    return record


def _report(image: str, mounts: list[Mount], since: datetime) -> dict[str, Any]:
    """`gpuwatch report` in a fresh container over the same state, configuration and secret."""
    until = datetime.now(UTC) + timedelta(minutes=5)
    args = ("report", "--from", since.isoformat(), "--to", until.isoformat(), "--format", "json")
    report: dict[str, Any] = json.loads(podman.run_once(image, mounts=mounts[:3], args=args))
    return report


def _bridge_runs(image: str, work: Path) -> dict[str, Any]:
    """The image on podman's bridge network with 9877 published: configured to bind 0.0.0.0
    (a config file named by $GPUWATCH_CONFIG), and as built (no configuration at all)."""
    record: dict[str, Any] = {}
    config = work / "published.toml"
    config.write_text(PUBLISHED_CONFIG)
    config.chmod(0o644)
    ports = {"published": free_port(), "default": free_port()}
    boxes = {
        "published": Container.start(
            image, mounts=[Mount(config, "/config/gpuwatch.toml")],
            env={"GPUWATCH_CONFIG": "/config/gpuwatch.toml"},
            network=[f"--publish=127.0.0.1:{ports['published']}:9877"],
        ),
        "default": Container.start(
            image, mounts=[], env={}, network=[f"--publish=127.0.0.1:{ports['default']}:9877"]
        ),
    }  # fmt: skip
    try:
        record["published"] = _wait(
            "/metrics on the published port", _metrics_with(ports["published"], "gpuwatch_")
        )
        default = boxes["default"]

        def serving() -> str | None:
            return next(
                (x for x in default.logs()[1].splitlines() if "serving /metrics" in x), None
            )

        record["default_log"] = _wait("the default container's start", serving)
        record["default_metrics"] = _metrics(ports["default"])
    finally:
        for box in boxes.values():
            box.remove()
    return record


@pytest.fixture(scope="module")
def ran(
    tmp_path_factory: pytest.TempPathFactory, fake_nvml_dir: Path, request: pytest.FixtureRequest
) -> Iterator[dict[str, Any]]:
    reason = podman.skip_reason()
    if reason:
        pytest.skip(reason)
    times: dict[str, float] = {}
    started = time.monotonic()
    image = podman.image()
    times["image"] = time.monotonic() - started
    work = tmp_path_factory.mktemp("image")
    work.chmod(0o755)  # the image's user reaches the mounted files through it
    traffic = Traffic(models=(MODEL,))
    port = free_port()
    since = datetime.now(UTC) - timedelta(minutes=5)
    with EngineServer("vllm-0.33", traffic, token=TOKEN) as engine:
        mounts = _prepare(work, engine.url, port, fake_nvml_dir)
        started = time.monotonic()
        record = _run_on_host_network(image, mounts, engine, traffic, port)
        times["run"] = time.monotonic() - started
    started = time.monotonic()
    record["report"] = _report(image, mounts, since)
    record["bridge"] = _bridge_runs(image, work)
    times["report and bridge runs"] = time.monotonic() - started
    record["image"] = podman.image_config(image)
    record["state_files"] = {p.name: p.stat() for p in (work / "state").iterdir()}
    summary = ", ".join(f"{k} {v:.0f} s" for k, v in times.items())
    size = record["image"]["Size"] / 1e6
    capture = request.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():  # the times, shown even when pytest captures
        request.config.get_terminal_writer().line(f"\nimage {image} ({size:.0f} MB): {summary}")
    yield record


@pytest.mark.slow
def test_the_image_is_labelled_small_and_runs_gpuwatch_as_a_fixed_non_root_user(
    ran: dict[str, Any],
) -> None:
    config, labels = ran["image"]["Config"], ran["image"]["Labels"]
    assert config["User"] == f"{UID}:{UID}"
    assert config["Entrypoint"] == ["/opt/gpuwatch/bin/gpuwatch"] and config["Cmd"] == ["run"]
    project = tomllib.loads((podman.REPO / "pyproject.toml").read_text())["project"]
    assert labels["org.opencontainers.image.version"] == project["version"]
    assert labels["org.opencontainers.image.licenses"] == project["license"]
    # The commit it was built from ("-dirty" with uncommitted changes): one of this clone's.
    revision = labels["org.opencontainers.image.revision"].removesuffix("-dirty")
    assert _is_commit(revision), labels
    assert ran["image"]["Size"] < 300e6, ran["image"]["Size"]  # 212 MB when written


def _is_commit(revision: str) -> bool:
    done = subprocess.run(["git", "-C", str(podman.REPO), "cat-file", "-t", revision],
                          capture_output=True, text=True, check=False)  # fmt: skip
    return len(revision) == 40 and done.stdout.strip() == "commit"


@pytest.mark.slow
def test_the_daemon_runs_as_the_image_user_without_capabilities(ran: dict[str, Any]) -> None:
    status = ran["probe"]["status"]
    assert status["Uid"].split() == [str(UID)] * 4
    assert status["Gid"].split() == [str(UID)] * 4
    assert int(status["CapEff"], 16) == 0
    assert ran["probe"]["cmdline"][-1] == "run"  # PID 1 is the daemon itself


@pytest.mark.slow
def test_metrics_show_the_mounted_gpu_and_the_engine_reached_with_the_secret_file(
    ran: dict[str, Any],
) -> None:
    text, labels = ran["metrics"], f'gpu_index="0",gpu_uuid="{GPU.uuid}",host="image-box"'
    assert f"gpuwatch_gpu_utilization_ratio{{{labels}}} 0.8" in text
    # target_up 1: the engine answers 401 without the token read from /run/secrets/engine-token.
    assert 'gpuwatch_target_up{host="image-box",target="llama"} 1.0' in text
    assert TOKEN not in text and TOKEN not in ran["stderr"]


@pytest.mark.slow
def test_sighup_applies_the_rewritten_configuration(ran: dict[str, Any]) -> None:
    assert 'host="image-box-reloaded"' in ran["reloaded"]
    lines = ran["stderr"].splitlines()
    assert any("configuration reloaded from /etc/gpuwatch/gpuwatch.toml" in x for x in lines), lines


@pytest.mark.slow
def test_only_the_state_volume_is_written(ran: dict[str, Any]) -> None:
    assert ran["host_config"]["ReadonlyRootfs"] is True
    probe = ran["probe"]
    for folder in ("/", "/etc/gpuwatch", "/opt/gpuwatch", "/usr/lib"):
        assert probe[folder] == "Read-only file system", probe
    assert probe["/var/lib/gpuwatch"] == "ok", probe
    database = ran["state_files"]["gpuwatch.db"]
    assert (database.st_uid, database.st_gid) == (UID, UID)
    assert database.st_mode & 0o077 == 0  # the daemon's umask: nobody else reads the database


@pytest.mark.slow
def test_logs_go_to_stderr_and_sigterm_stops_it_cleanly(ran: dict[str, Any]) -> None:
    assert ran["stdout"] == ""
    lines = ran["stderr"].splitlines()
    assert any("gpuwatch started: host image-box" in x for x in lines), lines
    assert any("received SIGTERM, stopping" in x for x in lines), lines
    assert "gpuwatch stopped" in lines[-1], lines
    state = ran["state"]
    assert state["ExitCode"] == 0 and not state["OOMKilled"], state
    assert ran["stop_seconds"] < 10  # well before podman's 30 s and its SIGKILL


@pytest.mark.slow
def test_a_report_reads_what_the_container_stored(ran: dict[str, Any]) -> None:
    report = ran["report"]
    (model,) = report["models"]
    assert model["model"] == MODEL
    assert model["requests"] == SERVED
    # Useful tokens from completed requests: exactly what the engine generated for them.
    assert model["useful_tokens_source"] == "completed_requests"
    assert model["useful_tokens"] == sum(r.generation_tokens for r in ran["served"])
    assert report["data"]["first"] is not None


@pytest.mark.slow
def test_metrics_are_published_only_when_the_configuration_binds_all_addresses(
    ran: dict[str, Any],
) -> None:
    bridge = ran["bridge"]
    assert "# TYPE gpuwatch_" in bridge["published"]
    # As built: 127.0.0.1 inside the container, so the published port reaches nothing.
    assert "serving /metrics on http://127.0.0.1:9877/metrics" in bridge["default_log"]
    assert bridge["default_metrics"] is None
