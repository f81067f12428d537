"""The `gpuwatch` console script as users run it: the installed entry point, in a process of its
own, with an environment of the test's making (its own state directory, no GPUWATCH_* of ours)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

SCRIPT = Path(sys.executable).with_name("gpuwatch")  # installed by `pip install -e .` / `.`


def environment(tmp_path: Path, **extra: str) -> dict[str, str]:
    # PYTHONUNBUFFERED too: users' output is buffered, and flushed at exit (a broken pipe then).
    mine = ("GPUWATCH_", "LD_LIB", "PYTHONUNBUFFERED")
    base = {k: v for k, v in os.environ.items() if not k.startswith(mine)}
    return {**base, "XDG_STATE_HOME": str(tmp_path / "state"), **extra}


def gpuwatch(
    args: list[str], env: dict[str, str], **popen: Any
) -> subprocess.CompletedProcess[str]:
    assert SCRIPT.exists(), f"{SCRIPT}: the console script is not installed (make venv)"
    streams = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, **popen}
    return subprocess.run(
        [str(SCRIPT), *args], env=env, text=True, timeout=60, check=False, **streams
    )


def sqlite_config(tmp_path: Path, text: str = "") -> Path:
    """A configuration on a SQLite file of its own, already at the schema's head (so no
    migration speaks on the commands under test)."""
    path = tmp_path / "gpuwatch.toml"
    path.write_text(f'host = "box-1"\ndatabase_url = "sqlite:///{tmp_path / "gw.db"}"\n{text}')
    done = gpuwatch(["db", "upgrade", "--config", str(path)], environment(tmp_path))
    assert done.returncode == 0, done.stderr
    return path
