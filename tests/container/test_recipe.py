"""The image's recipe read as text (container/Containerfile, container/build-image): what the
image promises without building it. `make test-image` builds and runs it."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.cli.main import build_parser
from agent.config.settings import load_config

REPO = Path(__file__).resolve().parent.parent.parent
CONTAINERFILE = REPO / "container" / "Containerfile"
BUILD_IMAGE = REPO / "container" / "build-image"
STATE = "/var/lib/gpuwatch"


def instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) of a Containerfile: comments dropped, continuations joined."""
    found: list[tuple[str, str]] = []
    pending = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not line or (line.startswith("#") and not pending):
            continue
        if line.startswith("#"):  # a comment inside a continued instruction
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        keyword, _, args = (pending + line).partition(" ")
        found.append((keyword.upper(), args.strip()))
        pending = ""
    assert not pending, f"{CONTAINERFILE}: ends inside a continued line"
    return found


@pytest.fixture(scope="module")
def recipe() -> list[tuple[str, str]]:
    return instructions(CONTAINERFILE.read_text())


def _all(recipe: list[tuple[str, str]], keyword: str) -> list[str]:
    return [args for k, args in recipe if k == keyword]


def _env(recipe: list[tuple[str, str]]) -> dict[str, str]:
    return dict(pair.split("=", 1) for args in _all(recipe, "ENV") for pair in shlex.split(args))


def test_no_base_image_comes_from_a_registry(recipe: list[tuple[str, str]]) -> None:
    assert _all(recipe, "FROM") == ["scratch"]
    assert recipe[1] == ("ADD", "rootfs.tar /")  # the debootstrap root build-image makes


def test_the_daemon_runs_as_a_fixed_numeric_non_root_user(recipe: list[tuple[str, str]]) -> None:
    (user,) = _all(recipe, "USER")
    uid, gid = user.split(":")
    # Numeric: Kubernetes' runAsNonRoot cannot check a user name.
    assert uid.isdigit() and gid.isdigit() and int(uid) > 0 and int(gid) > 0
    keywords = [k for k, _ in recipe]
    assert keywords.index("USER") > len(keywords) - 1 - keywords[::-1].index("RUN")  # last
    account = " ".join(_all(recipe, "RUN"))
    assert f"--uid {uid} --gid {gid}" in account and f"--gid {gid} gpuwatch" in account
    assert f"install -d -m 0700 -o {uid} -g {gid} {STATE}" in account


def test_the_entrypoint_is_the_daemon_in_the_foreground(recipe: list[tuple[str, str]]) -> None:
    (entrypoint,) = _all(recipe, "ENTRYPOINT")
    (cmd,) = _all(recipe, "CMD")
    assert json.loads(entrypoint) == ["/opt/gpuwatch/bin/gpuwatch"]  # exec form: PID 1, signals
    assert json.loads(cmd) == ["run"]
    assert build_parser().parse_args(json.loads(cmd)).command == "run"
    assert _all(recipe, "STOPSIGNAL") == ["SIGTERM"]  # what the daemon stops cleanly on


def test_the_database_and_spool_land_on_the_state_volume(
    recipe: list[tuple[str, str]], tmp_path: Path
) -> None:
    assert _all(recipe, "VOLUME") == [STATE]
    env = _env(recipe)
    assert env["PYTHONDONTWRITEBYTECODE"] == "1"  # the root file system is read-only
    # What NVIDIA's toolkit reads to mount NVML and the GPUs: every GPU, NVML only.
    assert (env["NVIDIA_VISIBLE_DEVICES"], env["NVIDIA_DRIVER_CAPABILITIES"]) == ("all", "utility")
    empty = tmp_path / "gpuwatch.toml"
    empty.write_text("")
    config = load_config(str(empty), env)
    assert config.database_url == f"sqlite:///{STATE}/gpuwatch.db"
    assert config.spool.file(config.database_url, env) == Path(STATE) / "gpuwatch.spool.db"


def test_the_labels_name_version_revision_and_licence(recipe: list[tuple[str, str]]) -> None:
    labels = dict(
        pair.split("=", 1) for args in _all(recipe, "LABEL") for pair in shlex.split(args)
    )
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    assert labels["org.opencontainers.image.licenses"] == project["license"]
    assert labels["org.opencontainers.image.version"] == "$VERSION"
    assert labels["org.opencontainers.image.revision"] == "$REVISION"
    script = BUILD_IMAGE.read_text()
    assert (
        '--build-arg "VERSION=$version"' in script and "org.opencontainers.image.source" in script
    )


def test_no_package_manager_compiler_or_wheel_stays_in_the_image(
    recipe: list[tuple[str, str]],
) -> None:
    runs = " ".join(_all(recipe, "RUN"))
    assert "apt-get" not in runs and "apt " not in runs  # Debian's packages come from debootstrap
    assert "--mount=type=bind,source=wheels" in runs  # read during the build, never copied
    assert "venv --without-pip" in runs and "--no-cache-dir" in runs
    assert [args for k, args in recipe if k in ("ADD", "COPY")] == ["rootfs.tar /"]
    assert "PACKAGES=python3,ca-certificates,tzdata" in BUILD_IMAGE.read_text()


@pytest.fixture
def bare_path() -> Iterator[Path]:
    """A PATH folder that another user can read, holding only what the script needs first."""
    folder = Path(tempfile.mkdtemp(prefix="gpuwatch-path-"))
    try:
        folder.chmod(0o755)
        for tool in ("dirname", "id"):
            (folder / tool).symlink_to(_tool(tool))
        yield folder
    finally:
        shutil.rmtree(folder)


def _tool(name: str) -> str:
    found = shutil.which(name)
    assert found, f"{name} not found"
    return found


def _as_a_user(path: Path) -> subprocess.CompletedProcess[str]:
    """build-image as a non-root user with only ``path`` on PATH (run from its text: the user
    may not reach this checkout)."""
    command = [_tool("bash"), "-c", BUILD_IMAGE.read_text(), "build-image"]
    if os.geteuid() == 0:
        command = [_tool("setpriv"), "--reuid=65534", "--regid=65534", "--clear-groups", *command]
    return subprocess.run(
        command, env={"PATH": str(path)}, cwd="/", capture_output=True, text=True, check=False
    )


def test_make_image_without_buildah_says_what_to_install(bare_path: Path) -> None:
    done = _as_a_user(bare_path)
    assert done.returncode == 1
    assert "buildah debootstrap not installed" in done.stderr
    assert "apt-get install buildah debootstrap" in done.stderr
    assert "as root" in done.stderr


def test_make_image_as_a_user_says_it_needs_root(bare_path: Path) -> None:
    for tool in ("buildah", "debootstrap"):  # present, but no use without root
        (bare_path / tool).symlink_to(_tool("true"))
    done = _as_a_user(bare_path)
    assert done.returncode == 1
    assert "needs root" in done.stderr
