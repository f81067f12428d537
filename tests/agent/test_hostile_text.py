"""Bad input, label text and URLs: a scraped model name (or host) with NUL, an ANSI escape or a
bidi override reaches every report format and Slack only as visible escapes; a credential in
the database URL never reaches the command line's output (docs/faults.md, "Bad input:
configuration, URLs and label text")."""

from __future__ import annotations

import csv
import io
import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from agent.alerting.evaluation import Alerting
from agent.cli.main import main
from agent.config.settings import load_config
from agent.daemon.app import App
from agent.reporting.digest import digest_payload
from agent.reporting.formats import FORMATS
from agent.reporting.render.dispatch import render
from agent.storage.db import open_database, upgrade_database
from alerts.model import AlertKey, Condition
from alerts.mrkdwn import escape
from alerts.rules import DEFAULT_RULES
from alerts.slack import render as slack_render
from tests.agent import report_sample
from tests.agent.digest_helpers import gpu, model
from tests.agent.digest_helpers import make_report as make_week
from tests.alerts.notifiers.conftest import alert, notification

# A NUL, an ANSI "clear screen", a right-to-left override (reads "exe.pgn" backwards), a C1
# control, a first-strong isolate and a line separator.
HOSTILE = "llama\x00-8b\x1b[2J\u202egnp.exe\x9b\u2068x\u2069\u2028y"
RAW = ("\x00", "\x1b", "\u202e", "\x9b", "\u2068", "\u2069", "\u2028")
SHOWN = "llama\\x00-8b\\x1b[2J\\u202egnp.exe\\x9b\\u2068x\\u2069\\u2028y"


@pytest.fixture
def hostile_report(monkeypatch: pytest.MonkeyPatch) -> Any:
    # The sample month's hostile model (model rows, daily series, alerts, queue incidents and
    # recommendations all name it) with control characters instead of markup.
    monkeypatch.setattr(report_sample, "EVIL", HOSTILE)
    monkeypatch.setattr(report_sample, "MODELS", (*report_sample.MODELS[:2], HOSTILE))
    return report_sample.make_report()


@pytest.mark.parametrize("fmt", [f for f in FORMATS if f != "json"])
def test_control_characters_in_a_model_name_are_escaped_in_every_human_format(
    fmt: str, hostile_report: Any
) -> None:
    out = render(hostile_report, fmt)
    assert not any(char in out for char in RAW), fmt
    # The name is still there, its odd characters visible (markdown escapes "\" and "[").
    visible = SHOWN.replace("\\", "\\\\").replace("[", "\\[") if fmt == "markdown" else SHOWN
    assert visible[:40] in out or visible[:20] in out, fmt
    if fmt == "csv":
        rows = list(csv.reader(io.StringIO(out)))
        assert any(SHOWN in cell for row in rows for cell in row)


def test_json_keeps_the_exact_name_in_json_escapes(hostile_report: Any) -> None:
    document = json.loads(render(hostile_report, "json"))
    assert HOSTILE in [m["model"] for m in document["models"]]


def test_slack_alert_text_shows_control_characters_as_escapes() -> None:
    state = alert(summary=f"model {HOSTILE} idle", host="box\u202e-1", model=HOSTILE)
    bare = alert(summary=None, host="box-1", gpu_index="1", model=HOSTILE)
    message = slack_render(notification((state, bare)))
    for text in [message.text, *(b["text"]["text"] for b in message.blocks)]:
        assert not any(char in text for char in RAW)
    assert "box\\u202e-1" in message.text and "\\x00-8b" in message.text


def test_the_slack_digest_shows_control_characters_as_escapes() -> None:
    week = make_week(models=(model(HOSTILE),), top_waste=(gpu("box\x00", 0, "1", HOSTILE),))
    payload = json.dumps(digest_payload(week, make_week()), ensure_ascii=False)
    assert not any(char in json.loads(payload) for char in RAW)
    assert not any(char in payload for char in RAW[2:])  # JSON would escape the C0 ones
    assert "\\\\u202egnp.exe" in payload  # the escape, itself escaped once more by JSON


def test_mrkdwn_escape_keeps_newlines_and_escapes_the_rest() -> None:
    assert escape("a\nb\x00<c>\u202e") == "a\nb\\x00&lt;c&gt;\\u202e"


@pytest.mark.parametrize("from_env", [True, False])
def test_an_unreachable_database_never_shows_a_password_in_its_query(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    from_env: bool,
) -> None:
    # libpq takes the password (and sslpassword) as query parameters too.
    url = "postgresql+psycopg://gw:s3cret@127.0.0.1:1/gw?password=s3cret&sslpassword=s3cret"
    config = tmp_path / "gpuwatch.toml"
    if from_env:
        monkeypatch.setenv("GPUWATCH_DATABASE_URL", url)
        config.write_text("")
    else:
        monkeypatch.delenv("GPUWATCH_DATABASE_URL", raising=False)
        config.write_text(f'database_url = "{url}"\n')

    assert main(["run", "--config", str(config)]) == 1

    err = capsys.readouterr().err
    assert "s3cret" not in err and err.count("\n") == 1
    assert "(postgresql+psycopg://gw:***@127.0.0.1:1/gw?password=***&sslpassword=***)" in err


def failing_target_config(tmp_path: Path) -> Path:
    config = tmp_path / "gpuwatch.toml"
    config.write_text(
        f'database_url = "sqlite:///{tmp_path / "gw.db"}"\n[collectors.nvml]\nenabled = false\n'
        '[[targets]]\nname = "t"\n'  # nothing listens on port 1
        'url = "http://user:s3cret@127.0.0.1:1/metrics?token=s3cret"\n'
    )
    return config


def test_a_failed_scrape_is_printed_without_the_target_s_credentials(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["collect", "--once", "--config", str(failing_target_config(tmp_path))]) == 1
    out, err = capsys.readouterr()
    mine = [line for line in err.splitlines() if line.startswith("gpuwatch: ")]
    assert "s3cret" not in out and mine and not any("s3cret" in line for line in mine)
    assert "(http://user:***@127.0.0.1:1/metrics?token=***): " in mine[0]


def test_a_failed_scrape_is_logged_and_stored_without_the_target_s_credentials(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The daemon's tick, which logs the failure (`collect --once` says it itself, once).
    app = App.open(load_config(str(failing_target_config(tmp_path))))
    try:
        app.tick(datetime.now(UTC))
    finally:
        app.close()
    with sqlite3.connect(tmp_path / "gw.db") as conn:
        stored = [error for (error,) in conn.execute("SELECT error FROM collector_runs")]
    assert stored and not any("s3cret" in (error or "") for error in stored)
    assert "collector target/t failed: " in caplog.text and "s3cret" not in caplog.text


def test_the_alerts_command_shows_control_characters_in_labels_as_escapes(
    tmp_path: Path, db_url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    upgrade_database(db_url)
    monkeypatch.setenv("GPUWATCH_DATABASE_URL", db_url)
    config = tmp_path / "gpuwatch.toml"
    config.write_text('host = "box"\n')
    labels = {"host": "box", "target": "t", "model": HOSTILE}
    condition = Condition(AlertKey.of("KvCacheSaturated", labels), 0.99)
    engine = open_database(db_url)
    try:
        alerting = Alerting.for_scope(
            engine, "box", load_config(str(config)).alerts, (), DEFAULT_RULES
        )
        alerting.evaluate([condition], set(DEFAULT_RULES), datetime.now(UTC))
    finally:
        engine.dispose()

    assert main(["alerts", "--config", str(config)]) == 0
    out = capsys.readouterr().out
    assert "KvCacheSaturated" in out and "\\u202egnp.exe" in out
    assert not any(char in out for char in RAW)
