"""Shared fixtures: a fresh database on SQLite and on a real PostgreSQL for every test that asks.

`make test` starts a throwaway PostgreSQL and exports GPUWATCH_TEST_DB_URL (a superuser URL);
each PostgreSQL test gets a database of its own, dropped afterwards. Outside `make test` the
PostgreSQL variants skip, unless GPUWATCH_REQUIRE_PG=1 (set by `make test`) makes that a failure.
The fake NVML library (tests/fakenvml) is shared by the collector, CLI and daemon tests.
"""

from __future__ import annotations

import ctypes
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pynvml
import pytest
from sqlalchemy import Engine, create_engine, text
from sqlalchemy.engine import make_url

from agent.storage.db import open_database, upgrade_database
from tests.fakenvml.build import (
    LIB_NAME,
    OLD_DRIVER_DIR,
    SOURCE,
    FakeNvmlConfig,
    build,
    write_config,
)


def _admin_url() -> str | None:
    url = os.environ.get("GPUWATCH_TEST_DB_URL")
    if not url:
        if os.environ.get("GPUWATCH_REQUIRE_PG") == "1":
            pytest.fail("GPUWATCH_REQUIRE_PG=1 but GPUWATCH_TEST_DB_URL is not set")
        pytest.skip("PostgreSQL not available (set GPUWATCH_TEST_DB_URL, or run `make test`)")
    return url


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database for this test."""
    admin_url = _admin_url()
    assert admin_url is not None
    yield from new_pg_database(admin_url)


def new_pg_database(admin_url: str, template: str | None = None) -> Iterator[str]:
    """A fresh PostgreSQL database on the server of ``admin_url`` (a copy of ``template`` when
    given), dropped afterwards."""
    name = f"gw_{uuid.uuid4().hex[:12]}"
    copy = f' TEMPLATE "{template}"' if template else ""
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"{copy}'))
    try:
        yield make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh database URL, once on SQLite and once on PostgreSQL."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'state' / 'gpuwatch.db'}"
    url: str = request.getfixturevalue("pg_url")
    return url


@pytest.fixture(scope="module", params=["sqlite", "postgresql"])
def module_db_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A fresh database URL shared by one module's tests, once per backend: for a fixture that
    fills it once (seconds of simulated time) and tests that only read it."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('db') / 'gpuwatch.db'}"
        return
    admin_url = _admin_url()
    assert admin_url is not None
    yield from new_pg_database(admin_url)


@pytest.fixture
def db(db_url: str) -> Iterator[Engine]:
    """An engine on a fresh database at the newest schema, once per backend."""
    upgrade_database(db_url)
    engine = open_database(db_url)
    yield engine
    engine.dispose()


def _fresh(library: Path) -> bool:
    return library.is_file() and library.stat().st_mtime >= SOURCE.stat().st_mtime


@pytest.fixture(scope="session")
def fake_nvml_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder with the fake libnvidia-ml.so.1, and the old-driver variant in ``old-driver/``.

    Prebuilt by `make test` into $GPUWATCH_FAKE_NVML_DIR; built here when that is missing or stale.
    """
    prebuilt = os.environ.get("GPUWATCH_FAKE_NVML_DIR")
    if prebuilt:
        folder = Path(prebuilt).resolve()
        if _fresh(folder / LIB_NAME) and _fresh(folder / OLD_DRIVER_DIR / LIB_NAME):
            return folder
    folder = tmp_path_factory.mktemp("fakenvml")
    build(folder)
    build(folder / OLD_DRIVER_DIR, old_driver=True)
    return folder


@pytest.fixture(scope="session")
def fake_nvml_library(fake_nvml_dir: Path) -> Path:
    """The fake, loaded into this process so that pynvml uses it."""
    library = fake_nvml_dir / LIB_NAME
    ctypes.CDLL(str(library))
    loaded = pynvml.nvmlLib if pynvml.nvmlLib is not None else ctypes.CDLL(LIB_NAME)
    if not hasattr(loaded, "gpuwatch_fake_nvml"):
        pytest.fail("another libnvidia-ml.so.1 was loaded before the fake; cannot test over it")
    return library


@dataclass
class FakeNvml:
    """The fake's config file for one test; ``write`` changes the "hardware" at once."""

    path: Path

    def write(self, config: FakeNvmlConfig) -> None:
        write_config(self.path, config)

    def remove(self) -> None:
        """Driver unloaded: the fake answers NVML_ERROR_DRIVER_NOT_LOADED."""
        self.path.unlink()


@pytest.fixture(scope="module")
def module_fake_nvml(
    fake_nvml_library: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[FakeNvml]:
    """``fake_nvml`` for a module-scoped fixture; a test's own ``fake_nvml`` takes over while
    that test runs."""
    path = tmp_path_factory.mktemp("nvml") / "fake-nvml.txt"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("FAKE_NVML_CONFIG", str(path))
        yield FakeNvml(path)


@pytest.fixture
def fake_nvml(fake_nvml_library: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    """No config written yet (= driver not loaded) until the test calls ``write``."""
    path = tmp_path / "fake-nvml.txt"
    monkeypatch.setenv("FAKE_NVML_CONFIG", str(path))
    return FakeNvml(path)
