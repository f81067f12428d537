"""gpuwatch as users install it: the wheel built from this checkout, in a fresh virtualenv.

The editable install that development uses (and pytest's ``pythonpath``) hides packaging bugs: a
subpackage or data file left out of the wheel still imports from the checkout. So the wheel is
built, installed with its runtime dependencies (from the package index, as `pip install` does on a
GPU box) into a new virtualenv, and run from a folder outside the checkout with an environment that
does not point at it. Nothing here skips: a wheel that cannot be built or installed is a failure.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("agent", "foundation", "collectors", "alerts", "migrations")
DATA_FILES = {
    "migrations/script.py.mako",  # Alembic's template for new revisions
    "agent/sim/fakenvml/fakenvml.c",  # `gpuwatch demo` compiles it
    "collectors/kubelet/api_pb2.pyi",  # the generated pod-resources messages' types (mypy)
}
# Not copied to the build folder: environments, build output, caches, local databases.
TOP_LEVEL_SKIP = {".git", ".venv", "build", "dist", ".mypy_cache", ".ruff_cache", ".pytest_cache"}
SKIP_SUFFIXES = (".pyc", ".egg-info", ".db", ".db-wal", ".db-shm")
BAD_OUTPUT = ("Traceback", "ModuleNotFoundError", "ImportError")
# Modules that need an optional extra, which the wheel here is installed without: a core install
# must work without them (`gpuwatch mcp` then says what to install).
NEEDS_EXTRA = {"agent.cli.mcp_app": "mcp"}


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path
    work: Path  # the working directory of every command: not the checkout
    config: Path
    env: dict[str, str]

    def run(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return _run([str(self.venv / "bin" / args[0]), *args[1:]], self.work, self.env, timeout)


def _run(
    command: Sequence[str], cwd: Path, env: dict[str, str], timeout: float
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout, check=False
    )


def _ok(result: subprocess.CompletedProcess[str]) -> str:
    """stdout of a command that must have succeeded without a traceback."""
    assert result.returncode == 0, f"{result.args}\n{result.stdout}\n{result.stderr}"
    _assert_clean(result)
    return result.stdout


def _assert_clean(result: subprocess.CompletedProcess[str]) -> None:
    for marker in BAD_OUTPUT:
        assert marker not in result.stderr, f"{result.args}\n{result.stderr}"


def _outside_env() -> dict[str, str]:
    """The caller's environment (pip's settings included) minus what could lead to the checkout."""
    drop = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "LD_LIBRARY_PATH")
    return {k: v for k, v in os.environ.items() if k not in drop and not k.startswith("GPUWATCH_")}


def _copy_checkout(target: Path) -> Path:
    """The working tree without build output. Building in place would reuse ./build/lib, where
    modules moved or deleted since the last build linger and would be packed into the wheel."""

    def ignore(folder: str, names: list[str]) -> set[str]:
        skip = {n for n in names if n == "__pycache__" or n.endswith(SKIP_SUFFIXES)}
        if Path(folder) == REPO:
            skip |= TOP_LEVEL_SKIP & set(names)
        return skip

    return Path(shutil.copytree(REPO, target, ignore=ignore))


def _build_wheel(source: Path, dist: Path) -> Path:
    # No build isolation, so no network build environment: the test extra brings setuptools.
    setuptools = importlib.metadata.version("setuptools")
    assert int(setuptools.split(".")[0]) >= 77, (
        f"setuptools {setuptools} cannot build gpuwatch (pyproject needs >=77); "
        "install the test extra: pip install -e '.[test]'"
    )
    result = _run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
        + ["-w", str(dist), str(source)],
        dist.parent,
        _outside_env(),
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    wheels = sorted(dist.glob("gpuwatch-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    root = tmp_path_factory.mktemp("packaging")
    wheel = _build_wheel(_copy_checkout(root / "src"), root / "dist")
    venv = root / "venv"
    # The venv module builds on the base interpreter, not on the virtualenv running the tests.
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    install = _run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", str(wheel)],
        root,
        _outside_env(),
        timeout=600,
    )
    assert install.returncode == 0, install.stdout + install.stderr

    work = root / "work"
    work.mkdir()
    config = work / "gpuwatch.toml"
    config.write_text(
        f'host = "packaging-test"\n'
        f'database_url = "sqlite:///{work / "gpuwatch.db"}"\n'
        "[daemon]\n"
        'metrics_listen = ""\n'
    )
    # As bare as systemd's: no PYTHONPATH, no LD_LIBRARY_PATH (so no fake NVML), HOME elsewhere.
    path = os.pathsep.join([str(venv / "bin"), "/usr/local/bin", "/usr/bin", "/bin"])
    env = {"PATH": path, "HOME": str(work), "LANG": "C.UTF-8", "TZ": "UTC"}
    return Installed(wheel, venv, work, config, env)


@pytest.fixture(scope="module")
def upgraded(installed: Installed) -> str:
    """stdout of `gpuwatch db upgrade` on the empty SQLite database."""
    return _ok(installed.run("gpuwatch", "db", "upgrade", "--config", str(installed.config)))


def test_the_wheel_holds_every_module_and_data_file_and_nothing_else(
    installed: Installed,
) -> None:
    expected = {
        path.relative_to(REPO).as_posix()
        for package in PACKAGES
        for path in (REPO / package).rglob("*.py")
        if "__pycache__" not in path.parts
    } | DATA_FILES
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = {n for n in wheel.namelist() if ".dist-info/" not in n}
        info = next(n for n in wheel.namelist() if n.endswith(".dist-info/METADATA"))
        scripts = wheel.read(info.replace("METADATA", "entry_points.txt")).decode()
    assert not {n for n in names if n.startswith(("tests/", "bench/"))}
    assert names == expected
    assert "gpuwatch = agent.cli.main:main" in scripts


def test_the_installed_packages_are_the_virtualenv_s(installed: Installed) -> None:
    probe = "import importlib; print('\\n'.join(importlib.import_module(p).__file__ for p in %r))"
    out = _ok(installed.run("python", "-c", probe % (PACKAGES,)))
    for package, path in zip(PACKAGES, out.splitlines(), strict=True):
        resolved = Path(path).resolve()
        assert resolved.is_relative_to(installed.venv.resolve()), resolved
        assert resolved.parent.name == package and resolved.parent.parent.name == "site-packages"
        assert not resolved.is_relative_to(REPO), resolved


def test_every_installed_module_imports(installed: Installed) -> None:
    # Lazily imported modules (the daemon's scheduler, notifiers) would otherwise only fail in
    # production; migrations.env runs Alembic at import and is loaded by Alembic alone.
    probe = (
        "import importlib, pkgutil\n"
        f"for root in {PACKAGES!r}:\n"
        "    package = importlib.import_module(root)\n"
        "    for m in pkgutil.walk_packages(package.__path__, root + '.'):\n"
        f"        if m.name != 'migrations.env' and m.name not in {set(NEEDS_EXTRA)!r}:\n"
        "            importlib.import_module(m.name)\n"
    )
    _ok(installed.run("python", "-c", probe))


def test_mcp_without_its_extra_says_what_to_install(installed: Installed) -> None:
    assert installed.run("python", "-c", "import mcp").returncode != 0  # the extra is not here
    result = installed.run("gpuwatch", "mcp", "--config", str(installed.config))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "pip install 'gpuwatch[mcp]'" in result.stderr
    _assert_clean(result)


def test_version_is_the_wheel_s(installed: Installed) -> None:
    version = installed.wheel.name.split("-")[1]
    assert _ok(installed.run("gpuwatch", "--version")).strip() == f"gpuwatch {version}"


def test_check_config_accepts_a_valid_file(installed: Installed) -> None:
    out = _ok(installed.run("gpuwatch", "check-config", "--config", str(installed.config)))
    assert "OK" in out


def test_db_upgrade_then_current_is_at_head(installed: Installed, upgraded: str) -> None:
    assert "was empty" in upgraded
    current = _ok(installed.run("gpuwatch", "db", "current", "--config", str(installed.config)))
    assert "up to date" in current


def test_report_json_on_an_empty_database(installed: Installed, upgraded: str) -> None:
    result = installed.run(
        "gpuwatch", "report", "--month", "--format", "json", "--config", str(installed.config)
    )
    report = json.loads(_ok(result))
    assert report["schema_version"] == 1
    assert {"start", "end", "label", "timezone"} <= set(report["period"])


def test_collect_once_without_nvml_fails_cleanly(installed: Installed, upgraded: str) -> None:
    # A GPU machine has a real driver; elsewhere libnvidia-ml.so.1 is absent (the fake one is
    # reachable only through LD_LIBRARY_PATH, which this environment does not set).
    load = "import ctypes; ctypes.CDLL('libnvidia-ml.so.1')"
    has_nvml = installed.run("python", "-c", load).returncode == 0
    result = installed.run(
        "gpuwatch", "collect", "--once", "--json", "--config", str(installed.config)
    )
    _assert_clean(result)
    for line in result.stdout.splitlines():
        json.loads(line)
    if not has_nvml:
        assert result.returncode == 1, result.stdout + result.stderr
        assert "gpuwatch: collector nvml failed: NVML library" in result.stderr
    else:
        assert result.returncode in (0, 1), result.stdout + result.stderr
