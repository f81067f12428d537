"""The daemon started as the DaemonSet starts it: the rendered ConfigMap's file, the container's
environment as the kubelet expands it, the node's folders where the volumes mount them, over
the fake NVML library. What a pod cannot give here is replaced, and only that: each mount's
node folder is a temporary one, the pod IP is 127.0.0.1 and the port a free one (another
daemon on this machine may hold 9877)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.agent.daemon_harness import RunningDaemon, free_port, start_daemon
from tests.deploy.kube import BASE, Obj, one, render
from tests.fakenvml.build import FakeGpu, FakeNvmlConfig, FakeProcess, GiB
from tests.fakenvml.build import write_config as write_hardware

NODE = "gpu-node-1"
FIELDS = {"spec.nodeName": NODE, "status.podIP": "127.0.0.1"}
UUID = "GPU-aaaaaaaa-0000-0000-0000-000000000000"


def daemon_container() -> Obj:
    spec = one(render(BASE), "DaemonSet")["spec"]["template"]["spec"]
    found: Obj = next(c for c in spec["containers"] if c["name"] == "gpuwatch")
    return found


def expanded_env(container: Obj, port: int) -> dict[str, str]:
    """The container's variables as the kubelet sets them: fieldRefs resolved, $(NAME) replaced
    by variables listed before it (an unknown one stays as written)."""
    out: dict[str, str] = {}
    for var in container["env"]:
        if "valueFrom" in var:
            value = FIELDS[var["valueFrom"]["fieldRef"]["fieldPath"]]
        else:
            value = re.sub(r"\$\((\w+)\)", lambda m: out.get(m[1], m[0]), var["value"])
        out[var["name"]] = value
    listen = out["GPUWATCH_METRICS_LISTEN"]
    assert listen == "127.0.0.1:9877", listen
    out["GPUWATCH_METRICS_LISTEN"] = f"127.0.0.1:{port}"
    return out


@pytest.fixture
def pod_daemon(tmp_path: Path, fake_nvml_dir: Path) -> Iterator[tuple[RunningDaemon, Path]]:
    container = daemon_container()
    node = tmp_path / "node"
    text = one(render(BASE), "ConfigMap")["data"]["gpuwatch.toml"]
    folders: dict[str, Path] = {}
    for mount in container["volumeMounts"]:
        if not mount["mountPath"].startswith("/etc/gpuwatch"):  # the file, and the Secret
            folders[mount["mountPath"]] = node / mount["name"]
            folders[mount["mountPath"]].mkdir(parents=True)
    # In one pass, longest first, so that a replaced path is never replaced again.
    mounts = re.compile("|".join(re.escape(m) for m in sorted(folders, key=len, reverse=True)))
    text = mounts.sub(lambda m: str(folders[m[0]]), text)
    assert "/var/" not in text, "a path of the file is on no volume"
    config = tmp_path / "gpuwatch.toml"
    config.write_text(text, encoding="utf-8")
    hardware = write_hardware(
        tmp_path / "hardware.txt",
        FakeNvmlConfig(
            gpus=(FakeGpu(uuid=UUID, util=42),),
            processes=(FakeProcess(gpu=0, pid=777, mem=2 * GiB),),
        ),
    )
    port = free_port()
    env = expanded_env(container, port) | {
        "LD_LIBRARY_PATH": str(fake_nvml_dir),
        "FAKE_NVML_CONFIG": str(hardware),
    }
    daemon = start_daemon(config, tmp_path, port, env=env)
    yield daemon, node
    daemon.kill()


def test_the_pods_daemon_serves_its_node_under_the_nodes_name(
    pod_daemon: tuple[RunningDaemon, Path],
) -> None:
    daemon, node = pod_daemon
    # The probes' path, on the address the DaemonSet gives.
    text = daemon.wait_for_metric("gpuwatch_gpu_utilization_ratio")
    assert (
        f'gpuwatch_gpu_utilization_ratio{{gpu_index="0",gpu_uuid="{UUID}",host="{NODE}"}} 0.42'
        in text
    )
    # The store is on the state volume (the node's /var/lib/gpuwatch), and nothing is written
    # on the node but there and in /tmp's emptyDir.
    written = [p.relative_to(node) for p in node.rglob("*") if p.is_file()]
    assert Path("state/gpuwatch.db") in written
    assert {p.parts[0] for p in written} <= {"state", "tmp"}, written
    code, seconds = daemon.stop()
    assert code == 0 and seconds < 30  # within terminationGracePeriodSeconds
