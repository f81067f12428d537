"""The host side of the systemd boot test: a cached Debian root, the wheels, one boot.

The root filesystem (debootstrap, minutes) is built once per machine, outside the clone, under
``$GPUWATCH_TEST_CACHE`` (default /var/cache/gpuwatch-test), in a folder named after a hash of
everything that goes into it, so CI runs on fresh clones reuse it and a change to the recipe
builds a new one. Each boot runs on a copy, so the cached tree stays as debootstrap left it.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent.parent
SUITE = "bookworm"  # Debian 12: systemd 252, Python 3.11 (the host's, so its wheels fit)
VARIANT = "minbase"
PACKAGES = ("systemd", "systemd-sysv", "dbus", "python3", "python3-venv")
DEFAULT_MIRROR = "http://deb.debian.org/debian"
RECIPE_VERSION = 1  # bump when the way the root is built changes
SHARED_IN_CONTAINER = "/gpuwatch-test"
DRIVER_UNIT = "gpuwatch-boot-test.service"
# Not in the Debian root: kept out of the clone's tree when copying it for the wheel.
SKIP_TOP = {".git", ".venv", "build", "dist", ".mypy_cache", ".ruff_cache", ".pytest_cache"}


def cache_dir() -> Path:
    return Path(os.environ.get("GPUWATCH_TEST_CACHE", "/var/cache/gpuwatch-test"))


def mirror() -> str:
    """The host's own Debian mirror (deb822 sources first), else deb.debian.org."""
    sources = Path("/etc/apt/sources.list.d/debian.sources")
    if sources.is_file():
        for line in sources.read_text().splitlines():
            if line.startswith("URIs:") and "security" not in line:
                return line.split()[1]
    legacy = Path("/etc/apt/sources.list")
    if legacy.is_file():
        match = re.search(r"^deb\s+(\S+)\s+\S+\s+main", legacy.read_text(), re.M)
        if match and "security" not in match.group(1):
            return match.group(1)
    return DEFAULT_MIRROR


def rootfs_key() -> str:
    recipe = {
        "suite": SUITE, "variant": VARIANT, "packages": PACKAGES, "mirror": mirror(),
        "arch": os.uname().machine, "version": RECIPE_VERSION,
    }  # fmt: skip
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:16]


def cached_rootfs(log: Path) -> tuple[Path, bool]:
    """The Debian root for this recipe, built now when missing; (path, whether it was built).

    A lock keeps two runs from building it at once; a build goes to a temporary folder that is
    renamed only when complete, so an interrupted one is never taken for a root."""
    cache = cache_dir()
    cache.mkdir(parents=True, exist_ok=True)
    root = cache / f"rootfs-{SUITE}-{rootfs_key()}"
    with (cache / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if root.is_dir():
            return root, False
        partial = cache / f".building-{root.name}"
        shutil.rmtree(partial, ignore_errors=True)
        command = ["debootstrap", f"--variant={VARIANT}", f"--include={','.join(PACKAGES)}",
                   SUITE, str(partial), mirror()]  # fmt: skip
        with log.open("w") as out:
            done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"debootstrap failed ({done.returncode}), see {log}")
        partial.rename(root)
        return root, True


def copy_rootfs(source: Path, target: Path) -> Path:
    # cp keeps devices, ownership, xattrs and hard links; reflinks where the file system can.
    subprocess.run(["cp", "-a", "--reflink=auto", str(source), str(target)], check=True)
    return target


def build_wheelhouse(work: Path) -> Path:
    """gpuwatch's wheel, built from a copy of this checkout, and every dependency's wheel.

    A copy: building in place would pack whatever an earlier build left in ./build/lib."""
    source = work / "src"

    def ignore(folder: str, names: list[str]) -> set[str]:
        skip = {n for n in names if n == "__pycache__" or n.endswith((".pyc", ".egg-info"))}
        return skip | (SKIP_TOP & set(names)) if Path(folder) == REPO else skip

    shutil.copytree(REPO, source, ignore=ignore)
    wheels = work / "wheelhouse"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "-w", str(wheels),
         str(source)],  # fmt: skip
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"pip wheel failed:\n{done.stdout}\n{done.stderr}")
    shutil.rmtree(source)
    return wheels


def install_block(readme: Path) -> str:
    """The shell block of the "## Install" section of systemd/README.md, as users copy it."""
    text = readme.read_text()
    section = text.split("## Install", 1)[1]
    match = re.search(r"```sh\n(.*?)```", section, re.S)
    if match is None:
        raise ValueError(f"{readme}: no ```sh block under '## Install'")
    return match.group(1)


DRIVER = f"""[Unit]
Description=gpuwatch boot test: install and exercise gpuwatch.service, then power off
After=basic.target

[Service]
Type=oneshot
TimeoutStartSec=infinity
StandardOutput=journal+console
StandardError=journal+console
ExecStart=/usr/bin/python3 {SHARED_IN_CONTAINER}/inside.py {SHARED_IN_CONTAINER}

[Install]
WantedBy=multi-user.target
"""


def add_driver(root: Path) -> None:
    """The oneshot unit that runs inside.py at boot (enabled by hand: no systemctl here)."""
    units = root / "etc/systemd/system"
    (units / DRIVER_UNIT).write_text(DRIVER)
    wants = units / "multi-user.target.wants"
    wants.mkdir(parents=True, exist_ok=True)
    (wants / DRIVER_UNIT).symlink_to(f"/etc/systemd/system/{DRIVER_UNIT}")


@dataclass(frozen=True)
class Boot:
    returncode: int
    console: str
    seconds: float


def boot(root: Path, shared: Path, fake_nvml: Path, timeout: int) -> Boot:
    """Boot ``root`` until the driver powers it off (or ``timeout`` seconds pass)."""
    # Without it nspawn refuses: "Attempted to remove disk file system ..., we can't allow that".
    Path("/run/systemd/nspawn").mkdir(parents=True, exist_ok=True)
    command = [
        "timeout", "--kill-after=10", str(timeout),
        "systemd-nspawn", "-D", str(root), "--boot", "-q",
        # No host systemd to register with or to make a scope under (recipes.md, section 6).
        "--register=no", "--keep-unit",
        # Only a loopback: /metrics is checked on 127.0.0.1, nothing needs to reach out.
        "--private-network",
        f"--bind={shared}:{SHARED_IN_CONTAINER}",
        # pynvml dlopen()s libnvidia-ml.so.1 from the default library path.
        f"--bind-ro={fake_nvml}:/usr/lib/libnvidia-ml.so.1",
    ]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(
        command, stdin=subprocess.DEVNULL, capture_output=True, text=True, errors="replace",
        check=False,
    )  # fmt: skip
    return Boot(done.returncode, done.stdout + done.stderr, round(time.monotonic() - started, 1))
