"""The CLI as users run it: a real `gpuwatch` process over the fake NVML library."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.cli.main import main
from migrations.runner import head_revision
from tests.fakenvml.build import FakeGpu, FakeNvmlConfig, FakeProcess, GiB, write_config

REPO = Path(__file__).resolve().parents[2]
UUID0 = "GPU-00000000-1111-2222-3333-444444444444"
UUID1 = "GPU-55555555-6666-7777-8888-999999999999"
TWO_GPUS = FakeNvmlConfig(
    gpus=(
        FakeGpu(uuid=UUID0, util=3, memutil=1, used=1 * GiB, power_mw=65_000, temp_c=34),
        FakeGpu(
            uuid=UUID1,
            util=97,
            memutil=80,
            used=70 * GiB,
            power_mw=690_500,
            temp_c=78,
            sm_mhz=1_755,
            energy_mj=9_876_543_210,
            ecc_uncorrected=1,
            throttle=0x4,
        ),
    ),
    processes=(FakeProcess(gpu=1, pid=4242, mem=68 * GiB),),
)


def gpuwatch(
    args: list[str], tmp_path: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("GPUWATCH_", "LD_LIB"))}
    base.update({"XDG_STATE_HOME": str(tmp_path / "state"), **env})
    return subprocess.run(
        [sys.executable, "-m", "agent.cli.main", *args],
        env=base,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def fake_env(fake_nvml_dir: Path, tmp_path: Path, config: FakeNvmlConfig) -> dict[str, str]:
    hardware = write_config(tmp_path / "hardware.txt", config)
    return {"LD_LIBRARY_PATH": str(fake_nvml_dir), "FAKE_NVML_CONFIG": str(hardware)}


def test_collect_once_json_prints_the_scripted_values_in_base_units(
    fake_nvml_dir: Path, tmp_path: Path
) -> None:
    config = tmp_path / "gpuwatch.toml"
    config.write_text('host = "box-1"\n')
    result = gpuwatch(
        ["collect", "--once", "--json", "--config", str(config)],
        tmp_path,
        fake_env(fake_nvml_dir, tmp_path, TWO_GPUS),
    )
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert {tuple(sorted(obj)) for obj in lines} == {
        ("collector", "labels", "metric", "ts", "value")
    }
    got = {
        (o["metric"], o["labels"].get("gpu_index"), o["labels"].get("type")): o["value"]
        for o in lines
        if o["collector"] == "nvml"
    }
    assert got[("gpuwatch_gpu_utilization_ratio", "0", None)] == 0.03
    assert got[("gpuwatch_gpu_utilization_ratio", "1", None)] == 0.97
    assert got[("gpuwatch_gpu_memory_utilization_ratio", "1", None)] == 0.8
    assert got[("gpuwatch_gpu_memory_used_bytes", "1", None)] == 70 * GiB
    assert got[("gpuwatch_gpu_memory_total_bytes", "0", None)] == 80 * GiB
    assert got[("gpuwatch_gpu_power_watts", "0", None)] == 65.0
    assert got[("gpuwatch_gpu_power_watts", "1", None)] == 690.5
    assert got[("gpuwatch_gpu_temperature_celsius", "1", None)] == 78.0
    assert got[("gpuwatch_gpu_sm_clock_hertz", "1", None)] == 1_755_000_000.0
    assert got[("gpuwatch_gpu_energy_joules_total", "1", None)] == 9_876_543.21
    assert got[("gpuwatch_gpu_ecc_errors_total", "1", "uncorrected")] == 1.0
    assert got[("gpuwatch_gpu_throttle_reasons", "1", None)] == 4.0
    assert got[("gpuwatch_gpu_process_memory_bytes", "1", None)] == 68 * GiB
    process = next(o for o in lines if o["metric"] == "gpuwatch_gpu_process_memory_bytes")
    assert process["labels"] == {
        "gpu_index": "1",
        "gpu_uuid": UUID1,
        "host": "box-1",
        "pid": "4242",
        "unit": "",
    }
    health = next(o for o in lines if o["metric"] == "gpuwatch_collector_success")
    assert (health["collector"], health["labels"]["collector"], health["value"]) == (
        "gpuwatch",
        "nvml",
        1.0,
    )
    assert (tmp_path / "state" / "gpuwatch" / "gpuwatch.db").exists()  # stored, under the state dir


def test_collect_once_without_a_driver_fails_visibly(tmp_path: Path) -> None:
    result = gpuwatch(["collect", "--once"], tmp_path, {"FAKE_NVML_CONFIG": "/nonexistent"})
    assert result.returncode == 1
    assert "nvml: 0 samples" in result.stdout and "FAILED" in result.stdout
    assert "collector nvml failed: NVML" in result.stderr


def test_db_upgrade_and_current_on_postgresql(
    pg_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUWATCH_DATABASE_URL", pg_url)
    monkeypatch.delenv("GPUWATCH_CONFIG", raising=False)
    assert main(["db", "current"]) == 0
    assert "none (empty database)" in capsys.readouterr().out
    assert main(["collect", "--once"]) == 1  # the daemon's path refuses an outdated schema
    assert "run `gpuwatch db upgrade`" in capsys.readouterr().err
    assert main(["db", "upgrade"]) == 0
    head = head_revision()
    assert f"database at {head} (was empty)" in capsys.readouterr().out
    assert main(["db", "current"]) == 0
    assert f"current {head}, head {head} (up to date)" in capsys.readouterr().out


def test_db_current_does_not_create_a_sqlite_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "never" / "gw.db"
    monkeypatch.setenv("GPUWATCH_DATABASE_URL", f"sqlite:///{db}")
    assert main(["db", "current"]) == 0
    assert f"no database yet at {db}" in capsys.readouterr().out
    assert not db.exists()


@pytest.mark.parametrize(
    "command",
    [["run"], ["collect"], ["check-config"], ["db"], ["db", "upgrade"], ["db", "current"]],
)
def test_every_command_has_help(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main([*command, "--help"])
    assert exit_.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: gpuwatch {' '.join(command)}")
    assert "--config" in out or "ACTION" in out


@pytest.mark.parametrize("from_env", [True, False])
def test_an_unreachable_database_at_start_is_one_line_without_the_password(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    from_env: bool,
) -> None:
    url = "postgresql+psycopg://gw:s3cret@127.0.0.1:1/gw"  # nothing listens on port 1
    config = tmp_path / "gpuwatch.toml"
    if from_env:
        monkeypatch.setenv("GPUWATCH_DATABASE_URL", url)
        config.write_text("")
    else:
        monkeypatch.delenv("GPUWATCH_DATABASE_URL", raising=False)
        config.write_text(f'database_url_file = "{tmp_path / "url"}"\n')
        (tmp_path / "url").write_text(url)

    code = main(["run", "--config", str(config)])

    err = capsys.readouterr().err
    assert code == 1
    assert err.count("\n") == 1 and "Traceback" not in err and "s3cret" not in err
    key = "GPUWATCH_DATABASE_URL" if from_env else "database_url"
    assert err.startswith(f"gpuwatch: {key} (postgresql+psycopg://gw:***@127.0.0.1:1/gw): ")
    assert "cannot reach the database at 127.0.0.1:1: " in err
