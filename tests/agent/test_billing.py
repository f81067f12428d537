"""Billing into the database: provider APIs through the hourly job, FOCUS files through the CLI.

Loopback servers answer with the providers' sample responses (tests/fixtures/billing) and with
each failure; whatever fails stores nothing, and nothing is ever counted twice.
"""

from __future__ import annotations

import csv
import logging
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from agent.cli.main import main
from agent.config.settings import load_config
from agent.cost.billing import BillingJob, billed
from agent.storage.db import open_database, upgrade_database
from collectors.billing.registry import RateSource, make_source
from migrations.schema import billing_resources, cost_records
from tests.collectors.billing.conftest import TOKEN, FakeApi, Reply, sample

NOW = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
INSTANCES, CHARGES = "/api/v1/instances/", "/api/v0/charges/"
FOCUS = Path(__file__).resolve().parents[1] / "fixtures" / "focus"


def final_page(name: str) -> dict[str, Any]:
    body = sample(name)
    body["next_token"] = None
    return body


@pytest.fixture
def api() -> Iterator[FakeApi]:
    server = FakeApi().start()
    yield server
    server.stop()


def vast_job(db_url: str, api: FakeApi, tmp_path: Path) -> BillingJob:
    upgrade_database(db_url)
    config_file = tmp_path / "gpuwatch.toml"
    config_file.write_text(f'[billing.vast]\nbase_url = "{api.url}"\n')
    config = load_config(str(config_file), {"VAST_API_KEY": TOKEN})

    def quick(provider: str, key: str, base_url: str | None) -> RateSource:
        # Real source and HTTP client; only the pacing between requests is not waited out.
        return make_source(provider, key, base_url, sleep=lambda _: None, min_interval_seconds=0)

    return BillingJob(open_database(db_url), config.billing, factory=quick)


def counts(job: BillingJob) -> tuple[int, int]:
    with job.engine.connect() as conn:
        records = conn.execute(select(func.count()).select_from(cost_records)).scalar()
        resources = conn.execute(select(func.count()).select_from(billing_resources)).scalar()
    return int(records or 0), int(resources or 0)


def test_vast_spend_and_rates_are_stored_once_however_often_fetched(
    db_url: str, api: FakeApi, tmp_path: Path
) -> None:
    api.answer(INSTANCES, Reply(200, final_page("vast-instances-v1.json")))
    api.answer(CHARGES, Reply(200, final_page("vast-charges.json")))
    job = vast_job(db_url, api, tmp_path)
    assert job.run(NOW) == {"vast": None}
    first = counts(job)
    assert first[0] >= 1 and first[1] == 1
    assert job.run(NOW + timedelta(hours=1)) == {"vast": None}
    assert counts(job) == first  # the same charges again: replaced, not added
    with job.engine.connect() as conn:
        row = conn.execute(select(billing_resources)).mappings().one()
    instance = sample("vast-instances-v1.json")["instances"][0]
    assert row["usd_per_hour"] == Decimal(str(instance["dph_total"]))
    assert row["metered_usd"] >= row["usd_per_hour"]  # an hour of running, metered
    job.close()
    job.engine.dispose()


@pytest.mark.parametrize(
    ("reply", "problem"),
    [
        (Reply(401, {"error": "bad key"}), "check VAST_API_KEY"),
        (Reply(500, {"error": "boom"}), "500"),
        (Reply(200, {"success": True, "results": [{"id": 1}], "next_token": None}), "missing"),
    ],
)
def test_a_failing_fetch_stores_nothing_and_says_why_once(
    reply: Reply,
    problem: str,
    db_url: str,
    api: FakeApi,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    api.answer(INSTANCES, Reply(200, final_page("vast-instances-v1.json")))
    api.answer(CHARGES, reply)
    job = vast_job(db_url, api, tmp_path)
    with caplog.at_level(logging.ERROR, logger="agent.cost.billing"):
        error = job.run(NOW)["vast"]
        job.run(NOW + timedelta(hours=1))
    assert error is not None and problem in error
    assert counts(job) == (0, 0)  # not even the rates that were fetched fine
    (line,) = [r.getMessage() for r in caplog.records]
    assert line.startswith("billing source vast failed, nothing stored: vast")
    assert TOKEN not in line
    job.close()
    job.engine.dispose()


def test_focus_files_import_idempotently_with_their_month_to_date(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUWATCH_DATABASE_URL", db_url)
    monkeypatch.delenv("GPUWATCH_CONFIG", raising=False)
    upgrade_database(db_url)
    files = [str(FOCUS / name) for name in ("focus-sample-aws.csv", "focus-sample-oci.csv")]
    assert main(["import", "focus", *files]) == 0
    out = capsys.readouterr().out
    # The counts agree: the files' rows, and the records they made (a row's BilledCost and
    # its EffectiveCost).
    rows = [int(line.split(": ")[1].split()[0]) for line in out.splitlines() if "(FOCUS" in line]
    stored = next(line for line in out.splitlines() if line.startswith("stored "))
    assert stored.startswith(f"stored 28 cost records from {sum(rows)} rows (")
    assert f"{sum(rows)} billed, {28 - sum(rows)} effective" in stored
    assert "month-to-date billed 2024-09: USD 2.7629" in out  # AWS 2.2258... + OCI 0.5370...
    assert main(["import", "focus", files[0]]) == 0  # again: replaces, never adds
    capsys.readouterr()
    engine = open_database(db_url)
    september = billed(engine, datetime(2024, 9, 1, tzinfo=UTC), datetime(2024, 10, 1, tzinfo=UTC))
    engine.dispose()
    assert september == {("focus", "USD"): Decimal("2.2258368599") + Decimal("0.53707392473")}


def test_a_bad_focus_file_stores_nothing_from_any_file(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GPUWATCH_DATABASE_URL", db_url)
    upgrade_database(db_url)
    broken = tmp_path / "broken.csv"
    with (FOCUS / "focus-sample-aws.csv").open(newline="", encoding="utf-8-sig") as fh:
        header, row = list(csv.reader(fh))[:2]
    row[header.index("BilledCost")] = "abc"
    with broken.open("w", newline="") as fh:
        csv.writer(fh).writerows([header, row])
    assert main(["import", "focus", str(FOCUS / "focus-sample-oci.csv"), str(broken)]) == 1
    assert "broken.csv line 2: BilledCost 'abc' is not a number" in capsys.readouterr().err
    engine = open_database(db_url)
    assert billed(engine, datetime(2000, 1, 1, tzinfo=UTC), datetime(2100, 1, 1, tzinfo=UTC)) == {}
    engine.dispose()
