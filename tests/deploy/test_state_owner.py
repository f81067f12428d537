"""The init container that gives the hostPath state directory to the daemon's user works as the
kubelet runs it: as root with only the capabilities the manifest adds, on a fresh node (the
kubelet made the folder root:root 0755), on every restart, and after the kubelet-root overlay
gave the files to root (and back). Its command and capabilities are read from the rendered
manifests and run by the host's /bin/sh under setpriv; root is needed to change owners."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.deploy.kube import BASE, KUBERNETES, Obj, one, render

ROOT_OVERLAY = KUBERNETES / "overlays" / "kubelet-root"
STATE = "/var/lib/gpuwatch"

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("setpriv") is None,
    reason="needs root and util-linux's setpriv to run the init container's command",
)


def pod(folder: Path) -> Obj:
    spec: Obj = one(render(folder), "DaemonSet")["spec"]["template"]["spec"]
    return spec


def init_command(folder: Path, state: Path) -> list[str]:
    """The init container's command, on ``state`` instead of the node's folder, confined to
    its capabilities as the container runtime would (nothing else in the bounding set)."""
    (init,) = pod(folder)["initContainers"]
    context = init["securityContext"]
    assert context["runAsUser"] == 0 and context["capabilities"]["drop"] == ["ALL"]
    caps = ",".join(f"+{c.lower()}" for c in context["capabilities"].get("add", []))
    command = [part.replace(STATE, str(state)) for part in init["command"]]
    return ["setpriv", "--bounding-set", f"-all,{caps}", "--inh-caps", "-all", *command]


def as_daemon(folder: Path, *command: str) -> subprocess.CompletedProcess[str]:
    """``command`` as the daemon's container runs: its user and group, no capability."""
    (daemon,) = (c for c in pod(folder)["containers"] if c["name"] == "gpuwatch")
    user, group = daemon["securityContext"]["runAsUser"], daemon["securityContext"]["runAsGroup"]
    assert daemon["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    confine = ["setpriv", f"--reuid={user}", f"--regid={group}", "--clear-groups",
               "--bounding-set", "-all", "--inh-caps", "-all"]  # fmt: skip
    return subprocess.run([*confine, *command], capture_output=True, text=True, timeout=30,
                          check=False)  # fmt: skip


def run_init(folder: Path, state: Path) -> None:
    done = subprocess.run(init_command(folder, state), capture_output=True, text=True,
                          timeout=30, check=False)  # fmt: skip
    assert done.returncode == 0, f"{folder.name}'s init container failed: {done.stderr}"


def daemon_writes(folder: Path, state: Path) -> None:
    done = as_daemon(folder, "/bin/sh", "-c", f"echo tick >> {state}/gpuwatch.db")
    assert done.returncode == 0, f"{folder.name}'s daemon cannot write its store: {done.stderr}"


@pytest.fixture
def state() -> Iterator[Path]:
    """A folder as the kubelet makes a missing hostPath: root:root 0755, under a parent that
    any user may cross (pytest's own temporary folders are root's alone)."""
    with tempfile.TemporaryDirectory(dir="/tmp") as parent:
        os.chmod(parent, 0o755)
        folder = Path(parent) / "gpuwatch"
        folder.mkdir(mode=0o755)
        yield folder


def test_the_state_directory_is_the_daemons_alone_on_a_fresh_node(state: Path) -> None:
    run_init(BASE, state)
    daemon_writes(BASE, state)
    info = state.stat()
    assert (info.st_uid, info.st_gid, info.st_mode & 0o777) == (65532, 65532, 0o700)


def test_a_restart_finds_it_as_it_left_it(state: Path) -> None:
    run_init(BASE, state)
    daemon_writes(BASE, state)
    run_init(BASE, state)  # the second start: the folder is the daemon's already
    daemon_writes(BASE, state)
    assert (state / "gpuwatch.db").read_text() == "tick\ntick\n"


def test_switching_to_root_and_back_keeps_the_store_writable(state: Path) -> None:
    run_init(BASE, state)
    daemon_writes(BASE, state)
    run_init(ROOT_OVERLAY, state)
    daemon_writes(ROOT_OVERLAY, state)  # root without CAP_DAC_OVERRIDE: as the owner only
    assert (state / "gpuwatch.db").stat().st_uid == 0
    run_init(BASE, state)
    daemon_writes(BASE, state)
    assert (state / "gpuwatch.db").stat().st_uid == 65532
    assert (state / "gpuwatch.db").read_text() == "tick\ntick\ntick\n"
