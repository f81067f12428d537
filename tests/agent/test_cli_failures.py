"""Expected failures of the real `gpuwatch` process say one line, once, and no traceback: a
reader that stops early, a database that is away, a port in use, a collector that fails; and
Alembic speaks only when a migration runs."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest

from agent.cli.failures import quietly
from agent.cli.main import build_parser
from tests.agent.console import SCRIPT, environment, gpuwatch, sqlite_config


@pytest.fixture(scope="module")
def upgraded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A configuration on a SQLite file at the schema's head, shared by the module's tests
    that only read it (one `db upgrade` instead of one per test)."""
    return sqlite_config(tmp_path_factory.mktemp("upgraded"))


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # closed again when the block ends: nothing listens


@pytest.mark.parametrize(
    "args",
    [["digest", "--dry-run"], ["report", "--format", "csv"], ["report", "--format", "json"]],
    ids=["digest", "report-csv", "report-json"],
)
def test_a_reader_that_stops_early_ends_the_command_quietly(
    tmp_path: Path, upgraded: Path, args: list[str]
) -> None:
    """`gpuwatch digest --dry-run | head -1`: the reader is gone before the command writes."""
    config = upgraded
    read, write = os.pipe()
    os.close(read)  # a reader that has already stopped: every write fails with EPIPE
    try:
        done = gpuwatch([*args, "--config", str(config)], environment(tmp_path), stdout=write)
    finally:
        os.close(write)
    assert done.stderr == ""  # no BrokenPipeError traceback, no "Exception ignored" at exit
    assert done.returncode == 141  # what a shell shows for `cat` in the same place


def test_a_reader_that_stops_early_in_a_shell_pipeline(tmp_path: Path, upgraded: Path) -> None:
    config = upgraded
    done = subprocess.run(
        ["bash", "-c", f'"{SCRIPT}" digest --dry-run --config "{config}" | head -1'],
        env=environment(tmp_path), capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stdout, done.stderr) == (0, "{\n", "")


@pytest.mark.parametrize(
    "args",
    [["report"], ["alerts"], ["silence", "list"], ["digest"], ["cost"], ["db", "current"], ["run"]],
)
def test_an_unreachable_database_is_one_line_naming_the_setting(
    tmp_path: Path, args: list[str]
) -> None:
    port = closed_port()
    config = tmp_path / "gpuwatch.toml"
    config.write_text(f'database_url = "postgresql+psycopg://gw:s3cret@127.0.0.1:{port}/gw"\n')
    done = gpuwatch([*args, "--config", str(config)], environment(tmp_path))
    assert done.returncode == 1
    assert done.stdout == ""
    assert done.stderr.count("\n") == 1, done.stderr  # one line, no traceback
    assert done.stderr.startswith(
        f"gpuwatch: database_url (postgresql+psycopg://gw:***@127.0.0.1:{port}/gw): "
        f"cannot reach the database at 127.0.0.1:{port}: "
    )
    assert "s3cret" not in done.stderr


def test_breakeven_reads_the_given_config_for_measured_data(tmp_path: Path) -> None:
    port = closed_port()
    config = tmp_path / "gpuwatch.toml"
    config.write_text(f'database_url = "postgresql+psycopg://gw:s3cret@127.0.0.1:{port}/gw"\n')
    prices = ["--pod-usd-per-hour", "2.72", "--serverless-usd-per-hour", "4.10"]
    done = gpuwatch(["breakeven", *prices, "--config", str(config)], environment(tmp_path))
    assert done.returncode == 1
    assert done.stderr.startswith("gpuwatch: database_url (postgresql+psycopg://gw:***@")
    assert done.stderr.count("\n") == 1
    # With the figures given, nothing is measured: the configuration is not read at all.
    figures = ["--requests-per-day", "1000", "--gpu-seconds-per-request", "2"]
    done = gpuwatch(
        ["breakeven", *prices, *figures, "--config", str(config)], environment(tmp_path)
    )
    assert (done.returncode, done.stderr) == (0, "")
    assert "(given figures)" in done.stdout


def test_a_bad_config_for_breakeven_is_a_setting_to_change(tmp_path: Path) -> None:
    config = tmp_path / "gpuwatch.toml"
    config.write_text("no_such_key = 1\n")
    prices = ["--pod-usd-per-hour", "2.72", "--serverless-usd-per-hour", "4.10"]
    done = gpuwatch(["breakeven", *prices, "--config", str(config)], environment(tmp_path))
    assert done.returncode == 2
    assert "no_such_key" in done.stderr and "Traceback" not in done.stderr


def test_a_failing_collector_is_named_once(tmp_path: Path) -> None:
    config = sqlite_config(tmp_path)
    env = environment(tmp_path, FAKE_NVML_CONFIG="/nonexistent")  # no NVML library here
    for args in (["collect", "--once"], ["collect", "--once", "--json"]):
        done = gpuwatch([*args, "--config", str(config)], env)
        assert done.returncode == 1
        both = done.stdout + done.stderr
        assert both.count("NVML library libnvidia-ml.so.1 not found") == 1, both
        assert done.stderr.startswith("gpuwatch: collector nvml failed: NVML library")
        if "--json" not in args:
            assert done.stdout.startswith("nvml: 0 samples in ")
            assert done.stdout.endswith(", FAILED\n")


def test_alembic_speaks_only_when_a_migration_runs(tmp_path: Path) -> None:
    env = environment(tmp_path)
    first = gpuwatch(["report"], env)
    assert first.returncode == 0, first.stderr
    steps = [line for line in first.stderr.splitlines() if " alembic." in line]
    assert steps and all("Running upgrade" in line for line in steps), first.stderr
    assert "-> 0001, " in steps[0]
    again = gpuwatch(["report"], env)
    assert (again.returncode, again.stderr) == (0, "")
    quiet = gpuwatch(["--log-level", "WARNING", "report"], environment(tmp_path / "other"))
    assert (quiet.returncode, quiet.stderr) == (0, "")


def test_a_database_file_that_cannot_be_created_is_one_line_naming_the_setting(
    tmp_path: Path,
) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")  # a file where the database's folder would go
    config = tmp_path / "gpuwatch.toml"
    config.write_text(f'database_url = "sqlite:///{blocked}/gw.db"\n')
    done = gpuwatch(["report", "--config", str(config)], environment(tmp_path))
    assert done.returncode == 1
    assert done.stderr == (
        f"gpuwatch: database_url (sqlite:///{blocked}/gw.db): cannot open the database file: "
        f"{blocked}: File exists\n"
    )


def test_ctrl_c_ends_a_command_without_a_traceback() -> None:
    def interrupted() -> int:
        raise KeyboardInterrupt

    assert quietly(interrupted) == 130


READING_CONFIGURATION = [
    ["run"], ["collect", "--once"], ["check-config"], ["db", "upgrade"], ["db", "current"],
    ["breakeven"], ["cost"], ["import", "focus", "x.csv"], ["alerts"],
    ["silence", "add", "--match", "a=b", "--duration", "1h", "--comment", "c"],
    ["silence", "list"], ["silence", "expire", "ID"], ["digest"], ["report"],
]  # fmt: skip


@pytest.mark.parametrize("command", READING_CONFIGURATION, ids=lambda c: " ".join(c[:2]))
def test_every_command_that_reads_configuration_takes_config(command: list[str]) -> None:
    args = build_parser().parse_args([*command, "--config", "/x.toml"])
    assert args.config == "/x.toml"
