"""The ``[kubernetes]`` section: defaults, values, and every mistake named with its key path by
`gpuwatch check-config`."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from agent.cli.main import main
from agent.config.kubernetes import KubernetesConfig
from agent.config.settings import Config, ConfigError, load_config


def load(tmp_path: Path, toml: str) -> Config:
    path = tmp_path / "gpuwatch.toml"
    path.write_text(toml)
    return load_config(str(path), {})


def test_defaults_are_auto_on_the_kubelets_own_paths(tmp_path: Path) -> None:
    settings = load(tmp_path, "").kubernetes
    assert settings == KubernetesConfig(
        enabled=None,
        pod_resources_socket="/var/lib/kubelet/pod-resources/kubelet.sock",
        pod_logs_dir="/var/log/pods",
        timeout_seconds=2.0,
    )


def test_values_are_read(tmp_path: Path) -> None:
    settings = load(tmp_path, (
        '[kubernetes]\nenabled = false\npod_resources_socket = "/run/k/kubelet.sock"\n'
        'pod_logs_dir = "/host/var/log/pods"\ntimeout = "500ms"\n'
    )).kubernetes  # fmt: skip
    assert settings == KubernetesConfig(False, "/run/k/kubelet.sock", "/host/var/log/pods", 0.5)
    assert not settings.active()


def test_auto_is_on_only_where_the_socket_is(tmp_path: Path) -> None:
    path = tmp_path / "k.sock"
    assert not KubernetesConfig(pod_resources_socket=str(path)).active()
    path.write_text("")  # a file of that name is not the kubelet
    assert not KubernetesConfig(pod_resources_socket=str(path)).active()
    path.unlink()
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(path))
        assert KubernetesConfig(pod_resources_socket=str(path)).active()
    assert KubernetesConfig(enabled=True, pod_resources_socket="/nonexistent").active()


def test_check_config_names_each_mistake_by_key_path(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    toml = (
        '[kubernetes]\nenabled = "yes"\npod_resources_socket = "kubelet.sock"\n'
        'pod_logs_dir = 7\ntimeout = "2 minutes"\nnamespace_labels = true\n'
    )
    with pytest.raises(ConfigError) as info:
        load(tmp_path, toml)
    got = info.value.problems
    assert len(got) == 5, got
    assert any(p.startswith('kubernetes.enabled: expected "auto", true or false') for p in got)
    assert any(
        p.startswith("kubernetes.pod_resources_socket: expected an absolute path") for p in got
    )
    assert any(p.startswith("kubernetes.pod_logs_dir: expected a string") for p in got)
    assert any(p.startswith("kubernetes.timeout:") for p in got)
    assert any(p.startswith("kubernetes.namespace_labels: unknown key") for p in got)

    assert main(["check-config", "--config", str(tmp_path / "gpuwatch.toml")]) == 2
    err = capsys.readouterr().err
    assert "kubernetes.enabled" in err and "kubernetes.timeout" in err


def test_a_timeout_past_thirty_seconds_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"kubernetes\.timeout: must be at most 30s"):
        load(tmp_path, '[kubernetes]\ntimeout = "1m"\n')


def test_auto_stays_off_for_a_daemon_that_may_not_look_into_the_kubelets_folder(
    tmp_path: Path,
) -> None:
    """The kubelet makes its pod-resources folder root's, 0750: a non-root daemon's look raises
    PermissionError, which "auto" takes as no kubelet rather than a crash at start."""
    import os
    import shutil
    import subprocess
    import sys

    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to look as another user")
    folder = tmp_path / "pod-resources"
    folder.mkdir(mode=0o750)
    os.chmod(tmp_path, 0o755)
    code = (
        "from agent.config.kubernetes import KubernetesConfig; "
        f"print(KubernetesConfig(pod_resources_socket={str(folder / 'kubelet.sock')!r}).active())"
    )
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(folder / "kubelet.sock"))
        result = subprocess.run(
            ["setpriv", "--reuid=65532", "--regid=65532", "--clear-groups",
             sys.executable, "-c", code],
            capture_output=True, text=True, check=False, cwd=Path(__file__).parents[2],
        )  # fmt: skip
    assert (result.returncode, result.stdout.strip()) == (0, "False"), result.stderr[-2000:]
