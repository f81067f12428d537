"""The configuration the ConfigMaps carry is one a node's daemon accepts, and it keeps its files
where the DaemonSet mounts volumes for them."""

from __future__ import annotations

import tomllib
from pathlib import Path

from agent.config.settings import load_config
from tests.agent.console import environment, gpuwatch
from tests.deploy.kube import BASE, KUBERNETES, Obj, one, render

OVERLAY = KUBERNETES / "overlays" / "central-postgres"
# What the kubelet gives the daemon on a node: the DaemonSet's variables, expanded.
NODE = {"GPUWATCH_HOST": "gpu-node-1", "GPUWATCH_METRICS_LISTEN": "10.244.1.7:9877"}
CENTRAL = "postgresql+psycopg://gpuwatch:s3cret@postgres.db.svc:5432/gpuwatch"


def mounted_file(folder: Path, tmp_path: Path) -> Path:
    """The gpuwatch.toml the pod reads: the rendered ConfigMap's, not the source file."""
    data = one(render(folder), "ConfigMap")["data"]
    assert list(data) == ["gpuwatch.toml"]
    path = tmp_path / "gpuwatch.toml"
    path.write_text(data["gpuwatch.toml"], encoding="utf-8")
    return path


def mount_paths(folder: Path) -> dict[str, str]:
    """Each volume's mount path in the daemon's container."""
    spec: Obj = one(render(folder), "DaemonSet")["spec"]["template"]["spec"]
    (daemon,) = (c for c in spec["containers"] if c["name"] == "gpuwatch")
    return {m["name"]: m["mountPath"] for m in daemon["volumeMounts"]}


def test_check_config_accepts_the_nodes_configuration(tmp_path: Path) -> None:
    path = mounted_file(BASE, tmp_path)
    done = gpuwatch(["check-config", "--config", str(path)], environment(tmp_path, **NODE))
    assert done.returncode == 0, done.stderr
    assert "OK (host gpu-node-1, every 10s, /metrics 10.244.1.7:9877" in done.stdout
    assert "database SQLite" in done.stdout


def test_the_store_and_the_kubelets_files_are_where_the_volumes_are(tmp_path: Path) -> None:
    config = load_config(str(mounted_file(BASE, tmp_path)), NODE)
    mounts = mount_paths(BASE)
    state = Path(mounts["state"])
    assert config.database_url == f"sqlite:///{state / 'gpuwatch.db'}"
    assert config.spool.file(config.database_url, NODE).parent == state
    assert Path(config.kubernetes.pod_resources_socket).parent == Path(mounts["pod-resources"])
    assert config.kubernetes.pod_logs_dir == mounts["pod-logs"]
    assert not config.fleet.forwarding  # a lone node unless an overlay says otherwise


def test_the_central_postgres_overlay_forwards_to_the_secrets_url(tmp_path: Path) -> None:
    path = mounted_file(OVERLAY, tmp_path)
    config = load_config(str(path), {**NODE, "GPUWATCH_CENTRAL_URL": CENTRAL})
    assert config.fleet.forwarding
    assert config.fleet.central_url is not None and config.fleet.central_url.reveal() == CENTRAL
    assert config.database_url.startswith("sqlite:///")  # local-first: the node keeps its own

    done = gpuwatch(["check-config", "--config", str(path)],
                    environment(tmp_path, **NODE, GPUWATCH_CENTRAL_URL=CENTRAL))  # fmt: skip
    assert done.returncode == 0, done.stderr
    # Without the Secret's variable the daemon would refuse to start, saying which.
    done = gpuwatch(["check-config", "--config", str(path)], environment(tmp_path, **NODE))
    assert done.returncode == 2
    assert "fleet.central_url_env: environment variable GPUWATCH_CENTRAL_URL" in done.stderr
    assert "s3cret" not in done.stderr


def test_the_overlays_file_is_the_bases_plus_fleet() -> None:
    base = tomllib.loads((BASE / "gpuwatch.toml").read_text(encoding="utf-8"))
    overlay = tomllib.loads((OVERLAY / "gpuwatch.toml").read_text(encoding="utf-8"))
    assert overlay.pop("fleet") == {"central_url_env": "GPUWATCH_CENTRAL_URL", "timeout": "10s"}
    assert overlay == base
