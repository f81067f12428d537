"""What several benchmarks share: timing, throwaway PostgreSQL databases, the fake NVML library.

Not a benchmark: the scripts beside it import it (after putting the checkout on ``sys.path``).

- Timing: :func:`timed` calls a function a number of rounds after one warm-up call;
  :func:`ms` prints the median and the 95th percentile.
- PostgreSQL: a benchmark that needs one takes ``--postgres-url`` (a superuser URL; by default
  ``$GPUWATCH_TEST_DB_URL``, which ``scripts/with-postgres`` exports) and creates and drops its
  own databases there; without one it says so and exits 0 (:func:`postgres_or_skip`).
- The fake ``libnvidia-ml.so.1`` (agent/sim/fakenvml): prebuilt by ``make test`` under
  build/fakenvml (or ``$GPUWATCH_FAKE_NVML_DIR``), built into a temporary folder otherwise, so
  the figures measure gpuwatch's own cost, not a driver's.
"""

from __future__ import annotations

import ctypes
import os
import socket
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import create_engine, make_url, text

from agent.sim.fakenvml.build import LIB_NAME, SOURCE, build
from agent.sim.fakenvml.hardware import (
    FakeGpm,
    FakeGpu,
    FakeNvmlConfig,
    FakeProcess,
    GiB,
    write_config,
)

REPO = Path(__file__).resolve().parent.parent
PG_ENV = "GPUWATCH_TEST_DB_URL"

# -- timing -----------------------------------------------------------------------------------


def timed(fn: Callable[[int], object], rounds: int) -> list[float]:
    """Seconds per call of ``fn(i)`` for i in range(rounds), after one warm-up call ``fn(-1)``
    (first-call costs: symbol lookups, caches, statement compilation stay out)."""
    fn(-1)
    out = []
    for i in range(rounds):
        start = time.perf_counter()
        fn(i)
        out.append(time.perf_counter() - start)
    return out


def ms(values: list[float]) -> str:
    """Median and 95th percentile in milliseconds, aligned for side-by-side reading."""
    p95 = statistics.quantiles(values, n=20)[18] if len(values) > 1 else values[0]
    return f"median {statistics.median(values) * 1e3:8.2f} ms   p95 {p95 * 1e3:8.2f} ms"


def verdict(ok: bool) -> str:
    return "OK" if ok else "OVER TARGET"


# -- PostgreSQL -------------------------------------------------------------------------------


def postgres_or_skip(url: str | None, what: str) -> str:
    """The superuser URL to use (the option's, else $GPUWATCH_TEST_DB_URL); without one, a
    visible message and exit 0, so `make bench` goes on without PostgreSQL."""
    url = url or os.environ.get(PG_ENV)
    if not url:
        print(f"skipped: {what} needs PostgreSQL: --postgres-url URL or ${PG_ENV} "
              "(`scripts/with-postgres` starts a throwaway one and exports it)")  # fmt: skip
        sys.exit(0)
    return url


def database_url(admin_url: str, name: str) -> str:
    return make_url(admin_url).set(database=name).render_as_string(hide_password=False)


def fresh_database(admin_url: str, name: str) -> str:
    """Database ``name`` made anew (dropped first if there) at the schema's head; its URL."""
    from agent.storage.db import upgrade_database

    drop_database(admin_url, name)
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    url = database_url(admin_url, name)
    upgrade_database(url)
    return url


def drop_database(admin_url: str, name: str) -> None:
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


# -- the fake NVML ----------------------------------------------------------------------------

GPUS = 8


def busy_gpus(gpm: bool = False) -> FakeNvmlConfig:
    """8 busy H100s, two serving processes each (vLLM-like: most of the memory); ``gpm``: with
    GPM's SM activity, occupancy, tensor and DRAM gauges, as a real H100 has."""
    profile = FakeGpm(sm_active=31, sm_occupancy=14, tensor=19, dram=38) if gpm else None
    gpus = tuple(
        FakeGpu(uuid=f"GPU-{i:08x}-0000-0000-0000-000000000000", util=90 + i, used=70 * GiB,
                gpm=profile)
        for i in range(GPUS)
    )  # fmt: skip
    procs = tuple(
        FakeProcess(gpu=i, pid=1000 + 2 * i + k, mem=(34 + k) * GiB)
        for i in range(GPUS)
        for k in range(2)
    )
    return FakeNvmlConfig(gpus=gpus, processes=procs)


def _fresh(library: Path) -> bool:
    return library.is_file() and library.stat().st_mtime >= SOURCE.stat().st_mtime


def fake_library(work: Path) -> Path:
    """A folder holding a current fake libnvidia-ml.so.1."""
    for prebuilt in (os.environ.get("GPUWATCH_FAKE_NVML_DIR"), str(REPO / "build" / "fakenvml")):
        if prebuilt and _fresh(Path(prebuilt) / LIB_NAME):
            return Path(prebuilt).resolve()
    build(work / "fakenvml")
    return work / "fakenvml"


def load_fake_nvml(work: Path, hardware: FakeNvmlConfig) -> Path:
    """The fake loaded into this process (pynvml's dlopen by soname then finds it), reading
    its hardware file; returns the file, which may be rewritten between ticks."""
    config = write_config(work / "hardware.txt", hardware)
    os.environ["FAKE_NVML_CONFIG"] = str(config)
    ctypes.CDLL(str(fake_library(work) / LIB_NAME))
    return config


def nvml_env(work: Path, hardware: FakeNvmlConfig) -> dict[str, str]:
    """What a subprocess (a daemon, the CLI) needs to load the fake over ``hardware``."""
    return {
        "LD_LIBRARY_PATH": str(fake_library(work)),
        "FAKE_NVML_CONFIG": str(write_config(work / "hardware.txt", hardware)),
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
