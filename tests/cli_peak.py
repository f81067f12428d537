"""`gpuwatch ARGS...` in a fresh process that reports its own peak resident memory.

The kernel's ru_maxrss for a child also counts the pages of the parent it was forked from (a
test worker's or a benchmark's whole heap), so the child reads its own VmHWM as it exits and
says it on stderr; the caller takes it from there.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

PEAK_OF_CLI = (
    "import atexit, runpy, sys\n"
    "def peak():\n"
    "    line = [x for x in open('/proc/self/status') if x.startswith('VmHWM')][0]\n"
    "    print(line.strip(), file=sys.stderr)\n"
    "atexit.register(peak)\n"
    "sys.argv = ['gpuwatch', *sys.argv[1:]]\n"
    "runpy.run_module('agent.cli.main', run_name='__main__')\n"
)


def run_with_peak(
    args: Sequence[str], env: Mapping[str, str] | None = None
) -> tuple[subprocess.CompletedProcess[str], float]:
    """The finished process and its peak RSS in MB."""
    done = subprocess.run(
        [sys.executable, "-c", PEAK_OF_CLI, *args],
        env=None if env is None else dict(env), capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    return done, int(done.stderr.rsplit("VmHWM:", 1)[1].split()[0]) / 1024
