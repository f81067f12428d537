"""`gpuwatch export focus`: a metered month as a FOCUS 1.0 CSV that the FinOps Foundation's
validator passes, and that `gpuwatch import focus` reads back to the metered total.

The ledger is metered for real: scripted NVML and engine samples stored by the daemon's store,
priced by the daemon's rollup job at a rate card with a mid-hour price change and a GPU no rate
covers, on SQLite and PostgreSQL.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from sqlalchemy import Engine

from agent.cli import export as export_cli
from agent.cli.main import build_parser, main
from agent.config.settings import Config, load_config
from agent.cost.billing import billed, reconcile
from agent.cost.carbon import co2_of
from agent.cost.metering import LedgerMeter
from agent.cost.provisional import reading
from agent.cost.ratecard import RateCard
from agent.cost.summarize import summarize_on
from agent.reporting.focus_charges import Charge
from agent.reporting.focus_rows import COLUMNS, VERSIONS, Naming, as_csv_values, row
from agent.storage.db import open_database, upgrade_database
from agent.storage.rollup import Rollup
from collectors.base import Sample
from tests.agent.focus_validator import Verdict, find_validator
from tests.agent.rollup_helpers import Box, EngineScrape, Gpu
from tests.conftest import new_pg_database

GPU0 = "GPU-00000000-0000-0000-0000-00000000aaaa"
GPU1 = "GPU-00000000-0000-0000-0000-00000000bbbb"
GPU2 = "GPU-00000000-0000-0000-0000-00000000cccc"  # no rate covers it
T = datetime(2026, 11, 1, 12, 0, tzinfo=UTC)
NOW = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)  # --last-month: November 2026
GiB = 2.0**30
STEP = 30  # seconds between ticks


def rates_toml(change: datetime) -> str:
    return (
        f'[[rates]]\ngpu = "{GPU0}"\nusd_per_hour = 3.60\n'
        f'[[rates]]\ngpu = "{GPU1}"\nusd_per_hour = 2.72\nvalid_to = {change.isoformat()}\n'
        f'[[rates]]\ngpu = "{GPU1}"\nusd_per_hour = 3.00\nvalid_from = {change.isoformat()}\n'
    )


def write_config(path: Path, db_url: str, extra: str = "", zone: str = "UTC") -> Path:
    change = T + timedelta(hours=1, minutes=30)
    path.write_text(
        f'host = "box"\ndatabase_url = "{db_url}"\ntimezone = "{zone}"\n'
        f"[daemon]\ninterval_seconds = {STEP}\n{rates_toml(change)}{extra}"
    )
    return path


@dataclass
class NamedGpu(Gpu):
    """A scripted GPU whose info sample names its product, as NVML's does."""

    product: str = "NVIDIA H100 80GB HBM3"

    def collect(self, now: datetime) -> Iterable[Sample]:
        for s in super().collect(now):
            if s.metric == "gpuwatch_gpu_info":
                labels = {**s.labels, "gpu_name": self.product}
                s = Sample(metric=s.metric, value=s.value, labels=labels, ts=s.ts)
            yield s


def meter(db: Engine, config: Config, start: datetime, ticks: int) -> None:
    """Ticks every STEP seconds from ``start``: GPU 0 shared 3:1 by targets a and b (a serves
    llama, then mistral from 67 minutes on), GPU 1 used by c (qwen), GPU 2 by nobody and priced
    by no rate; then the rollup job prices them at the configured rates."""
    gpus = [
        NamedGpu(uuid=GPU0, index="0", name="nvml0", memory={"a": 3 * GiB, "b": 1 * GiB}),
        NamedGpu(uuid=GPU1, index="1", name="nvml1", memory={"c": 2 * GiB}, product="NVIDIA L4"),
        NamedGpu(uuid=GPU2, index="2", name="nvml2"),
    ]
    a, c = EngineScrape("a"), EngineScrape("c")
    box = Box(db, [*gpus, a, c])
    for i in range(ticks):
        a.tokens = {"llama": 10.0 * i} if i * STEP < 4020 else {"mistral": 10.0 * i}
        c.tokens = {"qwen": 5.0 * i}
        for g in gpus:
            g.utilization = 0.5
            g.energy = 1000.0 + 50.0 * i
        box.tick(start + timedelta(seconds=STEP * i))
    end = start + timedelta(seconds=STEP * ticks + 600)
    # The daemon's metering: CO2 counted where [energy] sets an intensity.
    ledger = LedgerMeter("box", RateCard(config.rates), co2_of=co2_of(config.energy))
    Rollup(db, "box", STEP, ledger).run(end)


@dataclass
class Metered:
    config: Config
    config_path: Path
    engine: Engine


@pytest.fixture
def metered(db_url: str, tmp_path: Path) -> Iterator[Metered]:
    """Two hours and 13 minutes of November 2026 (12:00 to 14:13 UTC on the 1st), metered."""
    upgrade_database(db_url)
    path = write_config(tmp_path / "gpuwatch.toml", db_url)
    config = load_config(str(path), {})
    engine = open_database(db_url)
    meter(engine, config, T, 267)  # to 14:13:00
    yield Metered(config, path, engine)
    engine.dispose()


@pytest.fixture
def other_db_url(db_url: str, tmp_path: Path) -> Iterator[str]:
    """A second, empty database on the same kind of server."""
    if db_url.startswith("sqlite"):
        yield f"sqlite:///{tmp_path / 'elsewhere' / 'gpuwatch.db'}"
        return
    yield from new_pg_database(os.environ["GPUWATCH_TEST_DB_URL"])


def export(
    m: Metered, out: Path, *flags: str, now: datetime = NOW, config: Config | None = None
) -> list[dict[str, str]]:
    args = build_parser().parse_args(["export", "focus", *flags, "--output", str(out)])
    assert export_cli.run(args, config or m.config, now) == 0
    with out.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def metered_total(m: Metered, start: datetime, end: datetime) -> Decimal:
    """What `gpuwatch cost` says was metered: the unsettled last minute included."""
    with reading(m.engine, m.config, (), (start, end)) as (conn, coverage):
        return summarize_on(conn, *coverage.window).fleet.cost_usd


def total(rows: Iterable[dict[str, str]], column: str = "BilledCost") -> Decimal:
    return sum((Decimal(r[column]) for r in rows), Decimal(0))


NOVEMBER = (datetime(2026, 11, 1, tzinfo=UTC), datetime(2026, 12, 1, tzinfo=UTC))


def test_last_month_passes_the_focus_validator(
    metered: Metered, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    validator = find_validator(tmp_path / "validator")
    for granularity in ("hour", "day"):
        out = tmp_path / f"focus-{granularity}.csv"
        export(metered, out, "--last-month", "--granularity", granularity)
        verdict = validator.check(out, tmp_path / f"report-{granularity}.xml")
        assert verdict == Verdict(checks=133, failed={}, errors=0, skipped=0), granularity
    err = capsys.readouterr().err
    assert "gpuwatch: FOCUS 1.0 export of 2026-11: 6 rows (one per GPU per hour)" in err
    assert "ProviderName is 'self-hosted': set [export.focus] provider" in err
    assert "2.22 GPU-hours left out: no [[rates]] line prices them" in err  # GPU 2


def test_rows_are_gpu_hours_at_the_rate_card_with_the_models_served_in_each_hour(
    metered: Metered, tmp_path: Path
) -> None:
    rows = export(metered, tmp_path / "focus.csv", "--last-month")
    assert list(rows[0]) == list(COLUMNS)  # FOCUS 1.0's, then x_EnergyConsumedKwh, x_Co2Grams
    got = [(r["ResourceId"], r["ChargePeriodStart"], r["ChargePeriodEnd"]) for r in rows]
    hours = [("2026-11-01T12:00:00Z", "2026-11-01T13:00:00Z"),
             ("2026-11-01T13:00:00Z", "2026-11-01T14:00:00Z"),
             ("2026-11-01T14:00:00Z", "2026-11-01T15:00:00Z")]  # fmt: skip
    assert got == [(gpu, *h) for h in hours for gpu in (GPU0, GPU1)]
    by = {(r["ResourceId"], r["ChargePeriodStart"][11:13]): r for r in rows}
    first, second, last = by[(GPU0, "12")], by[(GPU0, "13")], by[(GPU0, "14")]
    # Ticks from 12:00:00 to 14:13:00: the last hour is 780 s.
    assert [r["ConsumedQuantity"] for r in (first, second, last)] == [
        "1.000000000", "1.000000000", "0.216666667"]  # fmt: skip
    assert last["BilledCost"] == "0.780000000000"  # 780 s at $3.60/h, to the digit
    assert last["ListUnitPrice"] == last["ContractedUnitPrice"] == "3.600000"
    assert {last[c] for c in ("ListCost", "EffectiveCost", "ContractedCost")} == {"0.780000000000"}
    # GPU 1's price went from $2.72 to $3.00 at 13:30: that hour's unit price is the average.
    assert by[(GPU1, "13")]["ListUnitPrice"] == "2.860000"
    assert json.loads(first["Tags"]) == {
        "gpuwatch/host": "box",
        "gpuwatch/gpu_index": "0",
        "gpuwatch/target": "a,b",
        "gpuwatch/model": "llama",
    }
    assert json.loads(second["Tags"])["gpuwatch/model"] == "llama,mistral"  # switched at 13:07
    assert json.loads(last["Tags"])["gpuwatch/model"] == "mistral"
    assert json.loads(by[(GPU1, "14")]["Tags"])["gpuwatch/model"] == "qwen"
    assert (first["SkuId"], by[(GPU1, "12")]["SkuId"]) == ("NVIDIA H100 80GB HBM3", "NVIDIA L4")
    assert (first["ResourceName"], first["SubAccountId"], first["BillingAccountId"]) == (
        "box GPU 0", "box", "box")  # fmt: skip
    assert (first["BillingPeriodStart"], first["BillingPeriodEnd"]) == (
        "2026-11-01T00:00:00Z", "2026-12-01T00:00:00Z")  # fmt: skip
    assert (first["ChargeCategory"], first["ChargeClass"], first["ServiceCategory"]) == (
        "Usage", "", "Compute")  # fmt: skip
    assert total(rows) == metered_total(metered, *NOVEMBER)


def test_a_day_granularity_sums_the_hours(metered: Metered, tmp_path: Path) -> None:
    hourly = export(metered, tmp_path / "hours.csv", "--last-month")
    daily = export(metered, tmp_path / "days.csv", "--last-month", "--granularity", "day")
    assert [(r["ResourceId"], r["ChargePeriodStart"], r["ChargePeriodEnd"]) for r in daily] == [
        (gpu, "2026-11-01T00:00:00Z", "2026-11-02T00:00:00Z") for gpu in (GPU0, GPU1)
    ]
    for gpu in (GPU0, GPU1):
        hours = [r for r in hourly if r["ResourceId"] == gpu]
        (day,) = [r for r in daily if r["ResourceId"] == gpu]
        assert Decimal(day["BilledCost"]) == total(hours)
        assert Decimal(day["ConsumedQuantity"]) == total(hours, "ConsumedQuantity")
        assert set(json.loads(day["Tags"]).items()) >= {("gpuwatch/host", "box")}
    assert json.loads(daily[0]["Tags"])["gpuwatch/model"] == "llama,mistral"


def test_the_default_period_is_this_month_to_the_minute(metered: Metered, tmp_path: Path) -> None:
    rows = export(metered, tmp_path / "mtd.csv", now=T + timedelta(hours=1, minutes=30, seconds=5))
    gpu0 = [r for r in rows if r["ResourceId"] == GPU0]
    assert [(r["ChargePeriodStart"][11:16], r["ChargePeriodEnd"][11:16]) for r in gpu0] == [
        ("12:00", "13:00"), ("13:00", "13:30")]  # fmt: skip
    assert gpu0[1]["ConsumedQuantity"] == "0.500000000"
    assert gpu0[1]["BilledCost"] == "1.800000000000"


def test_reimporting_the_export_elsewhere_reproduces_the_metered_total(
    metered: Metered,
    other_db_url: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = tmp_path / "focus.csv"
    rows = export(metered, out, "--last-month")
    elsewhere = write_config(tmp_path / "elsewhere.toml", other_db_url)
    monkeypatch.delenv("GPUWATCH_DATABASE_URL", raising=False)
    upgrade_database(other_db_url)
    assert main(["import", "focus", str(out), "--config", str(elsewhere)]) == 0
    assert f"focus.csv: {len(rows)} rows (FOCUS 1.0)" in capsys.readouterr().out
    engine = open_database(other_db_url)
    try:
        imported = billed(engine, *NOVEMBER)
    finally:
        engine.dispose()
    metered_usd = metered_total(metered, *NOVEMBER)
    assert metered_usd > Decimal("10")  # 2 GPUs x 2.2 h; GPU 2 has no rate and no cost
    assert imported == {("focus", "USD"): total(rows)}
    assert round(imported[("focus", "USD")], 2) == round(metered_usd, 2)
    assert abs(imported[("focus", "USD")] - metered_usd) < Decimal("1e-9")


def test_importing_the_export_into_its_own_database_leaves_the_metered_figures_alone(
    metered: Metered, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "focus.csv"
    export(metered, out, "--last-month")
    before = metered_total(metered, *NOVEMBER)
    monkeypatch.delenv("GPUWATCH_DATABASE_URL", raising=False)
    for _ in range(2):  # twice: a re-import replaces its records, never adds
        assert main(["import", "focus", str(out), "--config", str(metered.config_path)]) == 0
    assert metered_total(metered, *NOVEMBER) == before  # the ledger is not the billing records
    # What it does show: the export as billed, beside the metered figure it came from.
    recon = reconcile(metered.engine, before, *NOVEMBER)
    assert recon.by_source == {"focus": recon.billed_usd}
    assert abs(recon.billed_usd - before) < Decimal("1e-9")


def test_a_month_in_a_zone_off_the_hour_cuts_charges_at_its_start(
    db_url: str, tmp_path: Path
) -> None:
    """Asia/Kolkata (+05:30): December starts at 18:30 UTC on 30 November. The hour 18:00 UTC
    is two charges, one per billing period, and they still add up to the metered total."""
    upgrade_database(db_url)
    path = write_config(tmp_path / "gpuwatch.toml", db_url, zone="Asia/Kolkata")
    config = load_config(str(path), {})
    engine = open_database(db_url)
    start = datetime(2026, 11, 30, 17, 50, tzinfo=UTC)
    meter(engine, config, start, 160)  # to 19:09:30
    m = Metered(config, path, engine)
    flags = ("--from", "2026-11-30", "--to", "2026-12-02")
    try:
        rows = [r for r in export(m, tmp_path / "f.csv", *flags) if r["ResourceId"] == GPU0]
        daily = export(m, tmp_path / "d.csv", *flags, "--granularity", "day")
        period = (datetime(2026, 11, 29, 18, 30, tzinfo=UTC), datetime(2026, 12, 1, 18, 30,
                                                                       tzinfo=UTC))  # fmt: skip
        metered_usd = metered_total(m, *period)
    finally:
        engine.dispose()
    november = ("2026-10-31T18:30:00Z", "2026-11-30T18:30:00Z")
    december = ("2026-11-30T18:30:00Z", "2026-12-31T18:30:00Z")
    assert [(r["ChargePeriodStart"][11:16], r["ChargePeriodEnd"][11:16],
             (r["BillingPeriodStart"], r["BillingPeriodEnd"])) for r in rows] == [
        ("17:00", "18:00", november), ("18:00", "18:30", november),
        ("18:30", "19:00", december), ("19:00", "20:00", december),
    ]  # fmt: skip
    seconds = [round(Decimal(r["ConsumedQuantity"]) * 3600, 3) for r in rows]
    assert seconds == [600, 1800, 1800, 570]  # ticks from 17:50:00 to 19:09:30
    assert [r["ChargePeriodStart"][11:16] for r in daily if r["ResourceId"] == GPU0] == [
        "00:00", "18:30"]  # fmt: skip
    assert total(daily) == metered_usd
    assert round(total(daily), 2) == round(metered_usd, 2) > 0


def test_provider_and_region_come_from_the_configuration(metered: Metered, tmp_path: Path) -> None:
    extra = ('[export.focus]\nprovider = "CoreWeave"\ninvoice_issuer = "CoreWeave, Inc."\n'
             'billing_account_id = "acme-gpu"\nregion_id = "us-east-04"\n'
             'region_name = "US East 04"\n')  # fmt: skip
    path = write_config(tmp_path / "named.toml", metered.config.database_url, extra)
    config = load_config(str(path), {})
    (first, *_) = export(metered, tmp_path / "f.csv", "--last-month", config=config)
    assert {c: first[c] for c in ("ProviderName", "PublisherName", "InvoiceIssuerName",
                                  "BillingAccountId", "BillingAccountName", "RegionId",
                                  "RegionName", "AvailabilityZone")} == {
        "ProviderName": "CoreWeave", "PublisherName": "CoreWeave",
        "InvoiceIssuerName": "CoreWeave, Inc.", "BillingAccountId": "acme-gpu",
        "BillingAccountName": "acme-gpu", "RegionId": "us-east-04", "RegionName": "US East 04",
        "AvailabilityZone": "",
    }  # fmt: skip


def test_bad_flags_and_settings_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GPUWATCH_DATABASE_URL", raising=False)
    db_url = f"sqlite:///{tmp_path / 'g.db'}"
    good = write_config(tmp_path / "good.toml", db_url)
    assert main(["export", "focus", "--from", "2026-11-01", "--config", str(good)]) == 1
    assert "gpuwatch: --from: a range needs both --from and --to" in capsys.readouterr().err
    out = tmp_path / "missing" / "focus.csv"
    assert main(["export", "focus", "--output", str(out), "--config", str(good)]) == 1
    assert f"gpuwatch: --output: cannot write {out}" in capsys.readouterr().err
    assert not out.parent.exists()
    bad = write_config(tmp_path / "bad.toml", db_url, '[export.focus]\nprovider = ""\nregion = 1\n')
    assert main(["export", "focus", "--config", str(bad)]) == 2
    err = capsys.readouterr().err
    assert "export.focus.provider: expected a name of 1 to 200 printable characters" in err
    assert "export.focus.region: unknown key" in err
    with pytest.raises(SystemExit):
        build_parser().parse_args(["export", "focus", "--focus-version", "1.2"])


def charge(**changes: object) -> Charge:
    base = dict(
        host="box", gpu_uuid=GPU0, gpu_index="0", gpu_name="NVIDIA H100 80GB HBM3",
        start=T, end=T + timedelta(hours=1),
        billing_period=NOVEMBER, observed_seconds=3600.0, busy_seconds=1800.0,
        cost_usd=Decimal("2.720000000000"), targets=("a",), models=("llama",),
    )  # fmt: skip
    return Charge(**{**base, **changes})  # type: ignore[arg-type]


def write_rows(path: Path, rows: list[dict[str, str | None]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(COLUMNS)
        writer.writerows(as_csv_values(r) for r in rows)
    return path


def test_the_validator_catches_what_a_broken_export_would_get_wrong(tmp_path: Path) -> None:
    """The check is real: the same rows pass, and each mistake fails the rule that covers it
    (ProviderName's only after the rename in tests/agent/focus_validator.py)."""
    validator = find_validator(tmp_path / "validator")
    naming = Naming.of(load_config(None, {}).export.focus, "box")
    good = [row(charge(), naming), row(charge(gpu_name=None, targets=(), models=()), naming)]
    assert validator.check(write_rows(tmp_path / "good.csv", good), tmp_path / "g.xml").passed
    broken = [dict(r) for r in good]
    broken[0]["ServiceCategory"] = "GPU"  # not a FOCUS category
    broken[0]["ChargePeriodStart"] = "2026-11-01 12:00:00"  # no zone: not a FOCUS date-time
    broken[1]["ProviderName"] = None  # mandatory, not nullable
    broken[1]["Tags"] = '["box"]'  # a JSON array, not an object
    broken[1]["BillingCurrency"] = "DOLLARS"
    verdict = validator.check(write_rows(tmp_path / "broken.csv", broken), tmp_path / "b.xml")
    assert set(verdict.failed) == {
        "ServiceCategory_Enum", "ChargePeriodStart_IsDateTime", "Provider_NotNull",
        "Tags_IsJSONObject", "BillingCurrency_IsCurrencyCode",
    }  # fmt: skip


def test_the_command_line_takes_the_period_flags_of_report() -> None:
    assert (*VERSIONS, "1.3") == export_cli.VERSIONS  # the parser's choices, apart: a fast start
    args = build_parser().parse_args(["export", "focus", "--month", "2026-10"])
    assert isinstance(args, argparse.Namespace)
    assert (args.month, args.granularity, args.focus_version, args.output) == (
        "2026-10", "hour", "1.0", None)  # fmt: skip
    with pytest.raises(SystemExit):
        build_parser().parse_args(["export", "focus", "--week", "--last-month"])
