"""The host side of the image test: build (or name) the image, and run it with podman.

How the image is run here is docs/container.md's recipe, kept in one place (``RUNTIME``):
- ``--runtime runc``: Debian 12's crun (1.8) refuses this machine's hybrid cgroup layout (v1
  controllers beside a cgroup2 at /sys/fs/cgroup/unified): "cgroups in hybrid mode not
  supported"; runc (Debian's ``runc`` package) handles it.
- ``--ulimit nofile=N:N --ulimit nproc=N:N``: podman's defaults (nofile 1048576, nproc 4194304)
  lie above this machine's hard limits, and root here lacks CAP_SYS_RESOURCE, so no runtime may
  raise them ("setrlimit RLIMIT_NPROC: Operation not permitted"); limits at or under the hard
  ones are allowed.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent.parent
IMAGE_ENV = "GPUWATCH_IMAGE"  # `make test-image` names the image it just built
NPROC = 4096  # threads of the image's user (65532) across the host: plenty for the daemon


def runtime_flags() -> list[str]:
    nofile = min(resource.getrlimit(resource.RLIMIT_NOFILE)[1], 65536)
    return ["--runtime", "runc", "--ulimit", f"nofile={nofile}:{nofile}",
            "--ulimit", f"nproc={NPROC}:{NPROC}"]  # fmt: skip


def skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root (buildah and podman run rootful here); run `make test-image` as root"
    missing = [t for t in ("buildah", "debootstrap", "podman", "runc") if shutil.which(t) is None]
    if missing:
        tools = " ".join(missing)
        return f"{tools} not installed (as root, `make test-image` installs them: apt-get install)"
    return None


def image() -> str:
    """The image under test: $GPUWATCH_IMAGE, else built now as `make image` does."""
    if os.environ.get(IMAGE_ENV):
        return os.environ[IMAGE_ENV]
    done = subprocess.run(
        [str(REPO / "container" / "build-image")], env={**os.environ, "PYTHON": sys.executable},
        capture_output=True, text=True, check=False, timeout=900,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"container/build-image failed:\n{done.stdout}\n{done.stderr}")
    # "built localhost/gpuwatch:VERSION (SIZE) in N s"
    line = next(x for x in done.stdout.splitlines() if x.startswith("built "))
    return line.split()[1]


def podman(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["podman", *args], capture_output=True, text=True, check=False, timeout=timeout
    )


def ok(done: subprocess.CompletedProcess[str]) -> str:
    if done.returncode != 0:
        raise AssertionError(f"{done.args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")
    return done.stdout


@dataclass(frozen=True)
class Mount:
    host: Path
    inside: str
    read_only: bool = True

    def flag(self) -> str:
        return f"{self.host}:{self.inside}" + (":ro" if self.read_only else "")


@dataclass
class Container:
    """A detached `podman run` of the image; remove() when done (it is not --rm: its exit code
    and logs are read after it stopped)."""

    name: str

    @classmethod
    def start(
        cls, image: str, *, mounts: list[Mount], env: dict[str, str], network: list[str],
        args: tuple[str, ...] = (),
    ) -> Container:  # fmt: skip
        name = f"gpuwatch-test-{uuid.uuid4().hex[:8]}"
        flags = [f"--volume={m.flag()}" for m in mounts]
        flags += [f"--env={k}={v}" for k, v in env.items()]
        ok(podman("run", "--detach", f"--name={name}", "--read-only", *runtime_flags(), *network,
                  *flags, image, *args))  # fmt: skip
        return cls(name)

    def exec_python(self, code: str) -> str:
        return ok(podman("exec", self.name, "/opt/gpuwatch/bin/python", "-c", code))

    def logs(self) -> tuple[str, str]:
        """(stdout, stderr): podman keeps the container's two streams apart."""
        done = podman("logs", self.name)
        return done.stdout, done.stderr

    def inspect(self) -> dict[str, Any]:
        found: list[dict[str, Any]] = json.loads(ok(podman("inspect", self.name)))
        return found[0]

    def signal(self, name: str) -> None:
        ok(podman("kill", f"--signal={name}", self.name))

    def stop(self, timeout: int) -> None:
        ok(podman("stop", f"--time={timeout}", self.name, timeout=timeout + 30))

    def remove(self) -> None:
        podman("rm", "--force", "--volumes", self.name)  # its anonymous state volume too


def run_once(image: str, *, mounts: list[Mount], args: tuple[str, ...]) -> str:
    """A one-off command of the image (--rm), its stdout; fails on a non-zero exit."""
    flags = [f"--volume={m.flag()}" for m in mounts]
    return ok(podman("run", "--rm", "--read-only", "--network=none", *runtime_flags(), *flags,
                     image, *args))  # fmt: skip


def image_config(image: str) -> dict[str, Any]:
    found: list[dict[str, Any]] = json.loads(ok(podman("image", "inspect", image)))
    return found[0]
