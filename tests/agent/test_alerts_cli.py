"""`gpuwatch alerts` and `gpuwatch silence` through the real command line over a database that
the alerting wrote, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from agent.alerting.evaluation import Alerting
from agent.alerting.store import add_silence
from agent.cli.main import main
from agent.config.settings import load_config
from agent.storage.db import open_database, upgrade_database
from alerts.model import AlertKey, Condition
from alerts.rules import DEFAULT_RULES
from alerts.silence import Silence, parse_matcher
from tests.agent.column_checks import assert_aligned

GPU = {"host": "box", "gpu_index": "0", "gpu_uuid": "GPU-a"}


@pytest.fixture
def config_path(tmp_path: Path, db_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    upgrade_database(db_url)
    path = tmp_path / "gpuwatch.toml"
    path.write_text('host = "box"\n', encoding="utf-8")
    monkeypatch.setenv("GPUWATCH_DATABASE_URL", db_url)
    return str(path)


def evaluate_now(config_path: str, conditions: list[Condition]) -> None:
    """One evaluation at the real present (the CLI reads the real clock)."""
    config = load_config(config_path)
    engine = open_database(config.database_url)
    try:
        alerting = Alerting.for_scope(engine, "box", config.alerts, (), DEFAULT_RULES)
        now = datetime.now(UTC)
        alerting.evaluate(conditions, set(DEFAULT_RULES), now - timedelta(minutes=3))
        alerting.evaluate(conditions, set(DEFAULT_RULES), now)
    finally:
        engine.dispose()


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_alerts_lists_firing_then_pending_with_their_summaries(
    config_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    evaluate_now(
        config_path,
        [
            Condition(AlertKey.of("GpuIdle", GPU), 0.01, {"usd_per_hour": "3.6"}),
            Condition(AlertKey.of("CollectorDown", {"host": "box", "collector": "nvml"}), 3.0),
        ],
    )
    code, out, _ = run(capsys, "alerts", "--config", config_path)
    assert code == 0
    firing, pending = out.splitlines()[1:3]
    assert firing.startswith("firing   critical") and "CollectorDown" in firing
    assert pending.startswith("pending  warning") and "$0.18 burnt at $3.60/h" in pending
    assert pending.endswith("[muted: inhibited by CollectorDown]")  # blind NVML hides it
    assert "muted" not in firing

    code, out, _ = run(capsys, "alerts", "--json", "--config", config_path)
    body = json.loads(out)
    assert [(a["rule"], a["state"]) for a in body["alerts"]] == [
        ("CollectorDown", "firing"),
        ("GpuIdle", "pending"),
    ]
    assert body["alerts"][1]["labels"] == GPU and body["undelivered_notifications"] == 0
    assert [a["muted_by"] for a in body["alerts"]] == [None, "inhibited by CollectorDown"]

    code, out, _ = run(
        capsys,
        "silence",
        "add",
        "--match",
        "alertname=CollectorDown",
        "--duration",
        "1h",
        "--comment",
        "driver upgrade",
        "--config",
        config_path,
    )
    assert code == 0
    silence = out.strip()  # `silence add` prints the new silence's id
    body = json.loads(run(capsys, "alerts", "--json", "--config", config_path)[1])
    assert body["alerts"][0]["muted_by"] == f"silence {silence}"


def test_alerts_for_reads_at_a_glance_in_aligned_columns(
    config_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """FOR in its two largest units ("30d 06h", not "4w2d6h27m3s"), and every column in line
    whatever the widths of the cells."""
    config = load_config(config_path)
    engine = open_database(config.database_url)
    now = datetime.now(UTC)
    idle = Condition(AlertKey.of("GpuIdle", GPU), 0.0, {"usd_per_hour": "3.6"})
    hot = Condition(AlertKey.of("GpuHot", {**GPU, "gpu_index": "1", "gpu_uuid": "GPU-b"}), 91.0)
    try:
        alerting = Alerting.for_scope(engine, "box", config.alerts, (), DEFAULT_RULES)
        fired = now - timedelta(days=30, hours=6, minutes=27)  # after GpuIdle's 30m
        alerting.evaluate([idle], {"GpuIdle"}, fired - timedelta(minutes=31))
        alerting.evaluate([idle], {"GpuIdle"}, fired)
        alerting.evaluate([idle, hot], set(DEFAULT_RULES), now - timedelta(seconds=45))
    finally:
        engine.dispose()
    header, *rows = run(capsys, "alerts", "--config", config_path)[1].splitlines()[:3]
    assert_aligned(header, rows, left=["STATE", "SEVERITY", "RULE", "SUMMARY"], right=["FOR"])
    at, end = header.index("SEVERITY") + len("SEVERITY"), header.index("RULE")
    firing, pending = (row[at:end].strip() for row in rows)
    assert firing == "30d 06h", rows[0]
    assert pending in {f"{n}s" for n in range(45, 60)}, rows[1]
    assert rows[0].split()[:2] == ["firing", "warning"] and "GpuIdle" in rows[0]
    assert rows[1].split()[:2] == ["pending", "critical"] and "GpuHot" in rows[1]

    body = json.loads(run(capsys, "alerts", "--json", "--config", config_path)[1])
    seconds = [a["for_seconds"] for a in body["alerts"]]  # --json keeps the seconds
    assert 30 * 86400 + 6 * 3600 + 27 * 60 <= seconds[0] < 30 * 86400 + 6 * 3600 + 28 * 60
    assert 45 <= seconds[1] < 60


def test_no_alerts_says_so(config_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "alerts", "--config", config_path)[1] == "No alerts firing or pending.\n"


def test_silence_add_list_expire(config_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys, "silence", "add", "--match", "alertname=GpuIdle", "--match", 'host=~"box-.*"',
        "--duration", "2h", "--comment", "maintenance", "--author", "ana", "--config", config_path,
    )  # fmt: skip
    assert code == 0
    silence_id = out.strip()
    listed = json.loads(run(capsys, "silence", "list", "--json", "--config", config_path)[1])
    (shown,) = listed["silences"]
    assert shown["id"] == silence_id and shown["state"] == "active"
    assert shown["matchers"] == ['alertname="GpuIdle"', 'host=~"box-.*"']
    assert shown["created_by"] == "ana" and shown["comment"] == "maintenance"
    ends = datetime.fromisoformat(shown["ends_at"]) - datetime.fromisoformat(shown["starts_at"])
    assert ends == timedelta(hours=2)

    assert run(capsys, "silence", "expire", silence_id, "--config", config_path)[0] == 0
    out = run(capsys, "silence", "list", "--config", config_path)[1]
    assert out == "No active or pending silences.\n"
    out = run(capsys, "silence", "list", "--all", "--config", config_path)[1]
    assert silence_id in out and "expired" in out

    # Again: Alertmanager's Expire is idempotent, so is this (exit 0, nothing written).
    code, out, _ = run(capsys, "silence", "expire", silence_id, "--config", config_path)
    assert code == 0 and out.startswith(f"silence {silence_id} had already expired at ")
    assert out.endswith("; nothing changed\n")


AM_SILENCES = json.loads(
    (Path(__file__).parents[1] / "alerts" / "data" / "alertmanager_silences.json").read_text(
        encoding="utf-8"
    )
)


def test_silence_expire_as_alertmanagers_own_test_expires(
    config_path: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """silence_test.go TestSilenceExpire through the command line, its clock injected: a
    pending, an active and an expired silence are each expired at now, without an error."""
    case = AM_SILENCES["TestSilenceExpire"]
    now = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)

    def moment(seconds: float) -> datetime:
        return now + timedelta(seconds=seconds)

    engine = open_database(load_config(config_path).database_url)
    with engine.begin() as conn:
        for given in case["silences"]:
            matchers = tuple(parse_matcher(m) for m in given["matchers"])
            start, end = moment(given["starts_at"]), moment(given["ends_at"])
            add_silence(
                conn, Silence(given["id"], matchers, start, end, "ana", "case"), moment(-7200)
            )
    engine.dispose()

    monkeypatch.setattr("agent.cli.main.utc_now", lambda: moment(case["expire_at"]))
    outs = {}
    for given in case["silences"]:
        code, outs[given["id"]], _ = run(
            capsys, "silence", "expire", given["id"], "--config", config_path
        )
        assert code == 0, given["id"]
    assert outs["pending"] == "silence pending expired\n"
    assert outs["active"] == "silence active expired\n"
    assert outs["expired"] == (
        "silence expired had already expired at 2026-12-01 11:59:00 UTC; nothing changed\n"
    )

    monkeypatch.setattr("agent.cli.main.utc_now", lambda: moment(case["checked_at"]))
    listed = json.loads(
        run(capsys, "silence", "list", "--all", "--json", "--config", config_path)[1]
    )
    found = {s["id"]: s for s in listed["silences"]}
    for given in case["silences"]:
        shown, after = found[given["id"]], given["upstream_after"]
        assert shown["state"] == "expired"
        assert datetime.fromisoformat(shown["starts_at"]) == moment(after["starts_at"])
        assert datetime.fromisoformat(shown["ends_at"]) == moment(after["ends_at"])


def test_silence_list_shows_local_times_in_aligned_columns(
    config_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    Path(config_path).write_text('host = "box"\ntimezone = "Asia/Kolkata"\n', encoding="utf-8")
    for author, duration in (("ana", "2h"), ("a-much-longer-author", "30m")):
        code, _, _ = run(
            capsys, "silence", "add", "--match", "alertname=GpuIdle", "--duration", duration,
            "--comment", "maintenance", "--author", author, "--config", config_path,
        )  # fmt: skip
        assert code == 0
    listed = json.loads(run(capsys, "silence", "list", "--json", "--config", config_path)[1])
    ends = {s["created_by"]: datetime.fromisoformat(s["ends_at"]) for s in listed["silences"]}
    header, *rows = run(capsys, "silence", "list", "--config", config_path)[1].splitlines()
    assert len(rows) == 2
    starts = [header.index(name) for name in ("STATE", "STARTS", "ENDS", "BY", "MATCHERS")]
    for row in rows:
        # Every column starts where its heading does, one space or more after the cell before.
        assert all(row[at - 1] == " " and row[at] != " " for at in starts), (header, row)
        author = row[starts[3] :].split()[0]
        shown = row[starts[2] : starts[3]].strip()
        # Wall time of the configured zone, to the second, named; no microseconds.
        local = ends[author].astimezone(ZoneInfo("Asia/Kolkata"))
        assert shown == local.strftime("%Y-%m-%d %H:%M:%S IST")


def test_silence_errors_name_the_argument(
    config_path: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(
        capsys, "silence", "add", "--match", "no operator", "--duration", "2h",
        "--comment", "x", "--config", config_path,
    )  # fmt: skip
    assert code == 1 and "--match: bad matcher format: no operator (expected NAME=VALUE" in err
    code, _, err = run(
        capsys, "silence", "add", "--match", "a=b", "--duration", "2 hours",
        "--comment", "x", "--config", config_path,
    )  # fmt: skip
    assert code == 1 and "--duration:" in err
    code, _, err = run(
        capsys, "silence", "add", "--match", "host=~.*", "--duration", "2h",
        "--comment", "x", "--config", config_path,
    )  # fmt: skip
    assert code == 1 and "must not match the empty string" in err
    code, _, err = run(capsys, "silence", "expire", "nope", "--config", config_path)
    assert code == 1 and "no silence with id 'nope'" in err
