"""`gpuwatch report`'s arguments: one period choice at a time, errors that name the argument
they cannot use, the periods the flags mean, and where the report is written."""

from __future__ import annotations

import argparse
import json
import re
from datetime import UTC, datetime
from pathlib import Path

import pytest

from agent.cli import report as report_cli
from agent.config.settings import Config
from agent.reporting.model import SCHEMA_VERSION
from agent.sim.server import EngineServer
from agent.sim.traffic import Traffic
from tests.agent.console import environment, gpuwatch, sqlite_config

# -- gpuwatch report: arguments -----------------------------------------------------------------

NOW = datetime(2026, 11, 20, 9, 30, 15, tzinfo=UTC)


def report_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="gpuwatch")
    report_cli.add_parser(parser.add_subparsers(dest="command"))
    return parser.parse_args(["report", *argv])


@pytest.mark.parametrize(
    "argv",
    [
        ("--month", "2026-11", "--week"),
        ("--last-month", "--week"),
        ("--month", "--from", "2026-11-01"),
        ("--week", "--from", "2026-11-01", "--to", "2026-11-08"),
    ],
)
def test_report_refuses_two_period_choices(
    argv: tuple[str, ...], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        report_args(*argv)
    assert exit_.value.code == 2
    assert "not allowed with argument" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--month", "2026-13"), "--month: expected YYYY-MM (e.g. 2026-11), got '2026-13'"),
        (("--month", "Nov"), "--month: expected YYYY-MM"),
        (("--month", "2027-01"), "--month: 2027-01 has not started yet"),
        (("--from", "2026-11-01"), "--from: a range needs both --from and --to (--to missing)"),
        (("--to", "2026-11-08"), "--to: a range needs both --from and --to (--from missing)"),
        (("--month", "2026-10", "--to", "2026-11-08"), "--to: a range needs both"),
        (("--from", "2026-11-31", "--to", "2026-12-08"), "--from: expected a date YYYY-MM-DD"),
        (("--from", "2026-11-08", "--to", "2026-11-01"), "--to: '2026-11-01' is not after"),
    ],
)
def test_report_names_the_argument_it_cannot_use(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(report_cli.ReportArgumentError, match=re.escape(message)):
        report_cli.choose_period(report_args(*argv), NOW, "Europe/Madrid")


def test_report_periods_from_the_flags() -> None:
    def label(*argv: str) -> str:
        return report_cli.choose_period(report_args(*argv), NOW, "Europe/Madrid").label

    assert label() == "2026-11", "default: the current month to date"
    assert label("--month") == "2026-11"
    assert label("--month", "2026-10") == "2026-10"
    assert label("--last-month") == "2026-10"
    assert label("--week") == "2026-W47"
    assert label("--from", "2026-11-03", "--to", "2026-11-10") == "2026-11-03..2026-11-10"
    current = report_cli.choose_period(report_args(), NOW, "Europe/Madrid")
    assert current.end == datetime(2026, 11, 20, 9, 30, tzinfo=UTC), "to date, to the minute"


def test_report_defaults_and_filters_parse() -> None:
    args = report_args("--host", "a", "--host", "b", "--model", "m", "--format", "csv")
    assert (args.host, args.model, args.format, args.output) == (["a", "b"], ["m"], "csv", None)
    assert report_args().format == "table"
    with pytest.raises(SystemExit):
        report_args("--format", "xml")


def test_report_writes_the_file_it_is_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = Config(host="box", database_url=f"sqlite:///{tmp_path / 'gpuwatch.db'}")
    target = tmp_path / "report.json"
    args = report_args("--month", "2026-10", "--format", "json", "--output", str(target))
    assert report_cli.run(args, config, NOW) == 0
    out, err = capsys.readouterr()
    assert out == "" and err == f"gpuwatch: json report for 2026-10 written to {target}\n"
    document = json.loads(target.read_text(encoding="utf-8"))
    assert document["schema_version"] == SCHEMA_VERSION
    assert document["period"]["label"] == "2026-10"
    assert document["totals"]["spend_usd"] == "0.00"


def test_report_prints_to_stdout_and_explains_an_unwritable_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = Config(host="box", database_url=f"sqlite:///{tmp_path / 'gpuwatch.db'}")
    assert report_cli.run(report_args("--week"), config, NOW) == 0
    out = capsys.readouterr().out
    assert out.startswith("gpuwatch report 2026-W47: ")
    assert max(len(line) for line in out.splitlines()) <= 100
    missing = tmp_path / "no-such-folder" / "r.html"
    args = report_args("--format", "html", "--output", str(missing))
    with pytest.raises(report_cli.ReportArgumentError, match="--output: cannot write"):
        report_cli.run(args, config, NOW)


# -- gpuwatch report --host ---------------------------------------------------------------------


def test_report_on_a_host_or_model_that_stored_nothing_names_those_there_are(
    tmp_path: Path,
) -> None:
    traffic = Traffic(models=("llama-8b", "qwen-7b"))
    traffic.serve(3, model="llama-8b", engine="0")
    with EngineServer("vllm-0.10", traffic) as server:
        target = f'[[targets]]\nname = "t1"\nurl = "{server.url}"\n'
        config = sqlite_config(tmp_path, f"[collectors.nvml]\nenabled = false\n{target}")
        done = gpuwatch(["collect", "--once", "--config", str(config)], environment(tmp_path))
        assert done.returncode == 0, done.stderr  # box-1 has stored llama-8b's and qwen-7b's
    asked = ["report", "--config", str(config), "--host", "box-1", "--model", "qwen-7b"]
    done = gpuwatch([*asked, "--host", "nosuch"], environment(tmp_path))
    assert (done.returncode, done.stdout) == (1, "")
    assert done.stderr == "gpuwatch: --host: no host 'nosuch' in the database (hosts: box-1)\n"
    done = gpuwatch([*asked, "--model", "gpt-5"], environment(tmp_path))
    assert done.returncode == 1
    assert done.stderr == (
        "gpuwatch: --model: no model 'gpt-5' in the database (models: llama-8b, qwen-7b)\n"
    )
    done = gpuwatch(asked, environment(tmp_path))
    assert done.returncode == 0 and "hosts: box-1; models: qwen-7b" in done.stdout


def test_report_filters_on_an_empty_database_say_nothing_is_stored(tmp_path: Path) -> None:
    config = sqlite_config(tmp_path)
    done = gpuwatch(["report", "--config", str(config), "--host", "a", "--host", "b"],
                    environment(tmp_path))  # fmt: skip
    assert done.returncode == 1
    assert done.stderr == (
        "gpuwatch: --host: no hosts 'a', 'b' in the database (no host has stored anything yet)\n"
    )
    done = gpuwatch(["report", "--config", str(config), "--model", "m"], environment(tmp_path))
    assert done.stderr.endswith("(no model has stored anything yet)\n")
