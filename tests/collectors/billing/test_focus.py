"""FOCUS export reading over the reference samples (copied into tests/fixtures/focus).

Expected totals are summed by hand from the CSVs; every sample is in USD.
"""

from __future__ import annotations

import csv
import gzip
import io
import re
from collections.abc import Callable
from datetime import UTC, datetime
from decimal import Decimal
from pathlib import Path

import pytest

from collectors.billing.base import BillingError, CostKind
from collectors.billing.focus import (
    ChargeCategory,
    FocusError,
    FocusFile,
    burn_rate_per_hour,
    month_to_date_billed,
    read_focus,
    to_cost_records,
)

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "focus"
AWS = FIXTURES / "focus-sample-aws.csv"
AZURE = FIXTURES / "focus-sample-azure.csv"
OCI = FIXTURES / "focus-sample-oci.csv"
GCP_13 = FIXTURES / "focus-1.3-synthetic-gcp.csv"

SEPTEMBER_2024 = datetime(2024, 9, 1, tzinfo=UTC)
OCTOBER_2024 = datetime(2024, 10, 1, tzinfo=UTC)

# AWS, BilledCost (= ListCost on every row):
#   SQS 0.0000008 + ELB 0.0000160599 + g5 1.624 + g5 0.480884264 + g5 1.624 + g5 1.110635736
#   = 4.8395368599; + Credit -2.6137 = 2.2258368599
# AWS, EffectiveCost (anonymised, not an identity of the others): 0+0+2+0+2+1-3 = 2
# Azure, BilledCost = EffectiveCost = ListCost:
#   0.000015 + 0.000006 + 0.00000504 + 0.000001638 + 1.58088 - 0.01288992 (a negative Usage row)
#   = 1.568017758
# OCI, BilledCost: 0.012 + 0 + 0.012 + 0.24 + Adjustment 0.192 + Adjustment 0.08 + 0.00107392473
#   = 0.53707392473; EffectiveCost all 0; ListCost (Adjustments list 0) = 0.26507392473
# GCP 1.3, BilledCost = EffectiveCost:
#   0.22557664526313 * 2 + 0.15039651312819 + 101.35797040335144 + 0.44738847106248
#   + 0.11184711776562 * 2 + 0.34303175412890 = 102.97363466772851
# GCP 1.3, ListCost: 0.25064071700052 * 2 + 0.16710723683676 + 112.61980735207162
#   + 0.49709830122264 + 0.12427457530566 * 2 + 0.38114639341440 = 114.41498986815778
EXPECTED = {
    # file: (rows, version, categories, billed, effective, list)
    AWS: (7, "1.0", {"Usage": 6, "Credit": 1}, "2.2258368599", "2", "2.2258368599"),
    AZURE: (6, "1.0", {"Usage": 6}, "1.568017758", "1.568017758", "1.568017758"),
    OCI: (7, "1.0", {"Usage": 5, "Adjustment": 2}, "0.53707392473", "0", "0.26507392473"),
    GCP_13: (
        8,
        "1.3",
        {"Usage": 8},
        "102.97363466772851",
        "102.97363466772851",
        "114.41498986815778",
    ),
}


def _sum(values: list[Decimal | None]) -> Decimal:
    return sum((v for v in values if v is not None), Decimal(0))


@pytest.mark.parametrize("path", list(EXPECTED), ids=lambda p: p.name)
def test_each_sample_imports_with_exact_counts_and_totals(path: Path) -> None:
    count, version, categories, billed, effective, listed = EXPECTED[path]
    focus = read_focus(path)
    assert len(focus.rows) == count
    assert focus.version_guess == version
    assert focus.skipped == ()
    found: dict[str, int] = {}
    for row in focus.rows:
        found[row.charge_category.value] = found.get(row.charge_category.value, 0) + 1
    assert found == categories
    assert {row.billing_currency for row in focus.rows} == {"USD"}
    assert _sum([r.billed_cost for r in focus.rows]) == Decimal(billed)
    assert _sum([r.effective_cost for r in focus.rows]) == Decimal(effective)
    assert _sum([r.list_cost for r in focus.rows]) == Decimal(listed)


@pytest.mark.parametrize("path", list(EXPECTED), ids=lambda p: p.name)
def test_cost_records_carry_billed_and_effective_with_distinct_ids(path: Path) -> None:
    focus = read_focus(path)
    records = to_cost_records(focus, f"focus:{path.name}")
    billed = [r for r in records if r.kind is CostKind.BILLED]
    effective = [r for r in records if r.kind is CostKind.EFFECTIVE]
    # Every sample row has an EffectiveCost, so each row gives one record of each kind.
    assert len(billed) == len(effective) == len(focus.rows)
    assert len({r.record_id for r in records}) == len(records)
    _, _, _, billed_total, effective_total, _ = EXPECTED[path]
    assert sum((r.amount for r in billed), Decimal(0)) == Decimal(billed_total)
    assert sum((r.amount for r in effective), Decimal(0)) == Decimal(effective_total)


def test_cost_record_fields_of_a_credit_row() -> None:
    focus = read_focus(AWS)
    credit = focus.rows[6]
    records = [
        r for r in to_cost_records(focus, "focus:aws") if r.record_id.startswith(credit.row_key)
    ]
    assert [r.record_id for r in records] == [
        f"{credit.row_key}:billed",
        f"{credit.row_key}:effective",
    ]
    billed = records[0]
    assert billed.source == "focus:aws"
    assert billed.resource == ""  # the credit has no ResourceId
    assert billed.amount == Decimal("-2.6137")
    assert records[1].amount == Decimal("-3")
    assert billed.currency == "USD"
    assert billed.period_start == datetime(2024, 9, 24, 3, tzinfo=UTC)
    assert billed.period_end == datetime(2024, 9, 24, 4, tzinfo=UTC)
    assert billed.description.startswith("Credit: AWS Open Source Promotional Credits")


def test_month_to_date_billed_includes_credits() -> None:
    rows = read_focus(AWS).rows
    assert month_to_date_billed(rows, SEPTEMBER_2024, OCTOBER_2024) == {
        "USD": Decimal("2.2258368599")
    }
    # Rows starting before 2024-09-24 03:00 (the credit's start, excluded by the half-open
    # window): SQS 0.0000008 + g5 0.480884264 + g5 1.624 + g5 1.110635736 = 3.2155208
    before_credit = datetime(2024, 9, 24, 3, tzinfo=UTC)
    assert month_to_date_billed(rows, SEPTEMBER_2024, before_credit) == {
        "USD": Decimal("3.2155208")
    }
    # One hour later the credit (-2.6137) is in: 3.2155208 - 2.6137 = 0.6018208
    after_credit = datetime(2024, 9, 24, 4, tzinfo=UTC)
    assert month_to_date_billed(rows, SEPTEMBER_2024, after_credit) == {"USD": Decimal("0.6018208")}


def test_month_to_date_places_rows_by_charge_period_not_billing_period() -> None:
    # OCI line 5 is billed in October's period but ran 2024-09-30 22:00: it counts in September.
    rows = read_focus(OCI).rows
    assert rows[3].billing_period_start == OCTOBER_2024
    assert month_to_date_billed(rows, SEPTEMBER_2024, OCTOBER_2024) == {
        "USD": Decimal("0.53707392473")
    }
    assert month_to_date_billed(rows, OCTOBER_2024, datetime(2024, 11, 1, tzinfo=UTC)) == {}


def test_month_to_date_rejects_naive_bounds() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        month_to_date_billed([], datetime(2024, 9, 1), OCTOBER_2024)


def test_sample_quirks_null_tokens_extra_columns_and_space_separated_times() -> None:
    focus = read_focus(AWS)
    assert "Id" in focus.columns  # the sample data's extra non-FOCUS column, ignored
    sqs, elb = focus.rows[0], focus.rows[1]
    assert sqs.line == 2
    assert sqs.charge_period_start == datetime(2024, 9, 18, 22, tzinfo=UTC)  # "… 22:00:00"
    assert sqs.charge_period_start.tzinfo is UTC
    assert sqs.billing_period_start == SEPTEMBER_2024
    assert sqs.resource_name is None and sqs.tags is None and sqs.charge_class is None  # NULL
    assert sqs.provider == "AWS"
    assert sqs.host_provider is None
    assert sqs.sku_id == "G95FST5FTYV3JSRX"
    assert sqs.sku_price_id == "G95FST5FTYV3JSRX.JRTCKXETXF.VXGXCWQKTY"
    assert sqs.consumed_quantity == Decimal(2) and sqs.consumed_unit == "Requests"
    assert elb.tags == (
        '{"application": "BrightLensMatrix", "environment": "dev", "business_unit": "ViennaAI"}'
    )
    credit = focus.rows[6]
    assert credit.charge_category is ChargeCategory.CREDIT
    assert credit.consumed_quantity is None and credit.resource_id is None


def test_partial_hour_rows_keep_their_quantities() -> None:
    g5 = read_focus(AWS).rows[3]
    assert g5.billed_cost == Decimal("0.480884264")
    assert g5.pricing_quantity == Decimal("0.296111")
    assert g5.pricing_unit == "Hours"
    assert g5.region == "us-east-1"
    assert g5.service_name == "Amazon Elastic Compute Cloud"


def test_azure_tags_with_null_text_inside_stay_raw() -> None:
    rows = read_focus(AZURE).rows
    assert rows[4].tags is not None and '"test": ",NULL,NULL,"' in rows[4].tags
    assert rows[5].billed_cost == Decimal("-0.01288992")  # negative Usage row, kept as is
    assert rows[0].provider == "Microsoft"


def test_oci_empty_strings_are_null_and_region_falls_back_to_its_name() -> None:
    row = read_focus(OCI).rows[0]
    assert row.sku_price_id is None and row.resource_name is None  # "" in the file
    assert row.region == "us-sanjose-1"  # RegionId is NULL, RegionName is set
    assert row.provider == "Oracle"


def test_focus_1_3_columns() -> None:
    focus = read_focus(GCP_13)
    row = focus.rows[0]
    assert row.charge_period_start == datetime(2026, 5, 1, tzinfo=UTC)  # "…T00:00:00Z"
    assert row.charge_period_end == datetime(2026, 5, 1, 1, tzinfo=UTC)
    assert row.provider == "Google Cloud" and row.host_provider == "Google Cloud"
    assert row.charge_class is None  # empty field
    assert row.consumed_quantity == Decimal("1.8669") and row.consumed_unit == "Hours"
    assert row.sku_id == "72D1-371C-1714" and row.sku_price_id == "9D43-9536-B321"
    assert row.tags == '{"environment":"prod","cost-center":"cc-3110","owner":"team-platform"}'
    assert {r.billing_account_id for r in focus.rows} == {
        "11C2D3-E4F506-A7B8C9",
        "01A2B3-C4D5E6-F70819",
    }
    # Rows 1/2 and 6/7 are one host's cost split over workloads: equal but for the Allocated*
    # columns, which are in the key, so no ordinal is needed.
    keys = [r.row_key for r in focus.rows]
    assert len(set(keys)) == 8 and not any("#" in k for k in keys)


def test_provider_without_the_deprecated_column(tmp_path: Path) -> None:
    # FOCUS 1.4 drops ProviderName and PublisherName; ServiceProviderName carries on.
    path = _rewrite(GCP_13, tmp_path / "gcp-1.4-like.csv", _drop("ProviderName", "PublisherName"))
    focus = read_focus(path)
    assert {r.provider for r in focus.rows} == {"Google Cloud"}
    assert [r.row_key for r in focus.rows] == [r.row_key for r in read_focus(GCP_13).rows]


@pytest.mark.parametrize(
    ("column", "version"),
    [
        ("x_Custom", "1.0"),
        ("SkuMeter", "1.1"),
        ("InvoiceId", "1.2"),
        ("ContractApplied", "1.3"),
        ("InvoiceDetailId", "1.4"),
    ],
)
def test_version_guess_from_columns(tmp_path: Path, column: str, version: str) -> None:
    def add(table: list[list[str]]) -> None:
        table[0].append(column)
        for values in table[1:]:
            values.append("NULL")

    assert read_focus(_rewrite(AWS, tmp_path / "v.csv", add)).version_guess == version


@pytest.mark.parametrize("name", ["focus.csv.gz", "renamed-but-gzipped.csv"])
def test_gzip_is_detected_by_its_magic_bytes(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    with gzip.open(path, "wb") as out:
        out.write(AWS.read_bytes())
    focus = read_focus(path)
    plain = read_focus(AWS)
    assert focus.rows == plain.rows
    assert focus.path == path


def test_a_byte_order_mark_is_not_part_of_the_first_column(tmp_path: Path) -> None:
    path = tmp_path / "bom.csv"
    path.write_bytes(b"\xef\xbb\xbf" + AZURE.read_bytes())
    focus = read_focus(path)
    assert focus.columns[0] == "AvailabilityZone"
    assert focus.rows == read_focus(AZURE).rows


def test_missing_required_columns_are_named(tmp_path: Path) -> None:
    path = _rewrite(
        AWS, tmp_path / "focus-sample-aws.csv", _drop("EffectiveCost", "BillingCurrency")
    )
    with pytest.raises(FocusError) as caught:
        read_focus(path)
    message = str(caught.value)
    assert "focus-sample-aws.csv" in message
    assert "EffectiveCost" in message and "BillingCurrency" in message
    assert isinstance(caught.value, BillingError)
    assert caught.value.retryable is False


def test_a_bad_number_names_file_line_and_column(tmp_path: Path) -> None:
    path = _rewrite(AWS, tmp_path / "focus-sample-aws.csv", _set(5, "BilledCost", "abc"))
    with pytest.raises(FocusError) as caught:
        read_focus(path)
    assert str(caught.value) == "focus-sample-aws.csv line 5: BilledCost 'abc' is not a number"


@pytest.mark.parametrize(
    ("column", "value", "expected"),
    [
        (
            "ChargePeriodStart",
            "yesterday",
            "line 3: ChargePeriodStart 'yesterday' is not a date-time",
        ),
        ("ChargeCategory", "Refund", "line 3: ChargeCategory 'Refund' is not one of Usage,"),
        ("BilledCost", "NULL", "line 3: BilledCost is NULL"),
        ("BilledCost", "1,000", "line 3: BilledCost '1,000' is not a number"),
        ("ListCost", "NaN", "line 3: ListCost 'NaN' is not a number"),
        ("ConsumedQuantity", "$2", "line 3: ConsumedQuantity '$2' is not a number"),
        (
            "ChargePeriodEnd",
            "2024-09-30 21:00:00",
            "line 3: ChargePeriodEnd '2024-09-30 21:00:00' is before",
        ),
    ],
)
def test_bad_values_fail_the_whole_file(
    tmp_path: Path, column: str, value: str, expected: str
) -> None:
    path = _rewrite(AWS, tmp_path / "x.csv", _set(3, column, value))
    with pytest.raises(FocusError, match="^x.csv " + re.escape(expected)):
        read_focus(path)


def test_a_short_row_fails_with_its_line(tmp_path: Path) -> None:
    lines = AWS.read_text().splitlines()
    lines[1] = lines[1].removesuffix(",NULL")  # drop the (NULL) Tags field of line 2
    path = tmp_path / "short.csv"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(FocusError, match="^short.csv line 2: 43 fields, the header has 44$"):
        read_focus(path)


def test_unreadable_and_broken_files(tmp_path: Path) -> None:
    with pytest.raises(FocusError, match="cannot read") as caught:
        read_focus(tmp_path / "absent.csv")
    assert caught.value.retryable is True
    truncated = tmp_path / "truncated.csv.gz"
    truncated.write_bytes(gzip.compress(AWS.read_bytes())[:200])
    with pytest.raises(FocusError, match="broken gzip"):
        read_focus(truncated)
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(FocusError, match="no header"):
        read_focus(empty)


def test_blank_lines_are_skipped_and_noted(tmp_path: Path) -> None:
    path = tmp_path / "blank.csv"
    lines = AWS.read_text().splitlines()
    path.write_text("\n".join([*lines[:3], "", *lines[3:], ""]) + "\n")
    focus = read_focus(path)
    assert len(focus.rows) == 7
    assert focus.skipped == ("line 4: blank", "line 10: blank")
    assert focus.rows[2].line == 5


def test_category_and_class_are_normalised_to_the_spec_spelling(tmp_path: Path) -> None:
    edit = _chain(_set(2, "ChargeCategory", "usage"), _set(2, "ChargeClass", "CORRECTION"))
    row = read_focus(_rewrite(AWS, tmp_path / "case.csv", edit)).rows[0]
    assert row.charge_category is ChargeCategory.USAGE
    assert row.charge_class == "Correction"


def test_times_with_fractions_and_offsets_become_utc(tmp_path: Path) -> None:
    edit = _chain(
        _set(2, "ChargePeriodStart", "2024-09-19T00:00:00.5+02:00"),
        _set(2, "ChargePeriodEnd", "2024-09-18T23:00:00.000Z"),
    )
    row = read_focus(_rewrite(AWS, tmp_path / "tz.csv", edit)).rows[0]
    assert row.charge_period_start == datetime(2024, 9, 18, 22, 0, 0, 500000, tzinfo=UTC)
    assert row.charge_period_end == datetime(2024, 9, 18, 23, tzinfo=UTC)


def test_row_keys_are_stable_across_reads_and_formats(tmp_path: Path) -> None:
    first = [r.row_key for r in read_focus(AWS).rows]
    assert first == [r.row_key for r in read_focus(AWS).rows]
    assert len(set(first)) == 7

    # The same charges written with spec-style times and another column order hash alike.
    def iso_and_reordered(table: list[list[str]]) -> None:
        for values in table[1:]:
            for i, column in enumerate(table[0]):
                if column.endswith(("PeriodStart", "PeriodEnd")):
                    values[i] = values[i].replace(" ", "T") + "Z"
        table[:] = [list(reversed(values)) for values in table]

    rewritten = read_focus(_rewrite(AWS, tmp_path / "iso.csv", iso_and_reordered))
    assert [r.row_key for r in rewritten.rows] == first


def test_identical_rows_both_count_with_distinct_stable_keys(tmp_path: Path) -> None:
    lines = AWS.read_text().splitlines()
    path = tmp_path / "dup.csv"
    path.write_text("\n".join([*lines, lines[3], lines[3]]) + "\n")  # line 4 three times
    focus = read_focus(path)
    keys = [r.row_key for r in focus.rows]
    base = keys[2]
    assert keys[7:] == [f"{base}#2", f"{base}#3"]
    assert len(set(keys)) == 9
    assert [r.row_key for r in read_focus(path).rows] == keys
    # 2.2258368599 + 2 * 1.624 = 5.4738368599
    assert month_to_date_billed(focus.rows, SEPTEMBER_2024, OCTOBER_2024) == {
        "USD": Decimal("5.4738368599")
    }
    record_ids = [r.record_id for r in to_cost_records(focus, "focus:dup")]
    assert len(set(record_ids)) == 18


def test_burn_rate_pro_rates_a_partial_hour_row() -> None:
    rows = read_focus(AWS).rows
    # Line 7: 2024-09-13 20:00-21:00, EffectiveCost 1 (0.683889 h of use). Over 20:30-21:30 half
    # of its period is inside: 0.5 over a one-hour window = 0.5 per hour.
    start = datetime(2024, 9, 13, 20, 30, tzinfo=UTC)
    assert burn_rate_per_hour(rows, start, datetime(2024, 9, 13, 21, 30, tzinfo=UTC)) == {
        "USD": Decimal("0.5")
    }
    # Over 20:30-20:45 a quarter is inside: 0.25 over 0.25 h = 1 per hour.
    assert burn_rate_per_hour(rows, start, datetime(2024, 9, 13, 20, 45, tzinfo=UTC)) == {
        "USD": Decimal("1")
    }
    # The credit at 2024-09-24 03:00-04:00 is not Usage: no burn.
    credit_hour = datetime(2024, 9, 24, 3, tzinfo=UTC)
    assert burn_rate_per_hour(rows, credit_hour, datetime(2024, 9, 24, 4, tzinfo=UTC)) == {}


def test_burn_rate_sums_rows_per_currency(tmp_path: Path) -> None:
    rows = read_focus(GCP_13).rows
    # 2026-05-01 04:00-05:00: 0.44738847106248 + 2 * 0.11184711776562 = 0.67108270659372 / h
    four = datetime(2026, 5, 1, 4, tzinfo=UTC)
    assert burn_rate_per_hour(rows, four, datetime(2026, 5, 1, 5, tzinfo=UTC)) == {
        "USD": Decimal("0.67108270659372")
    }
    # A EUR copy of line 2 (00:00-01:00, 0.22557664526313) stays apart from USD.
    euro = read_focus(_rewrite(GCP_13, tmp_path / "eur.csv", _set(2, "BillingCurrency", "EUR")))
    # Over 00:00-02:00 the USD rows of 00:00-01:00 are lines 3 and 4:
    # (0.22557664526313 + 0.15039651312819) / 2 h = 0.18798657919566 per hour
    midnight = datetime(2026, 5, 1, tzinfo=UTC)
    assert burn_rate_per_hour(euro.rows, midnight, datetime(2026, 5, 1, 2, tzinfo=UTC)) == {
        "EUR": Decimal("0.112788322631565"),
        "USD": Decimal("0.18798657919566"),
    }
    assert month_to_date_billed(euro.rows, midnight, datetime(2026, 6, 1, tzinfo=UTC)) == {
        "EUR": Decimal("0.22557664526313"),
        "USD": Decimal("102.74805802246538"),  # 102.97363466772851 - 0.22557664526313
    }


def test_burn_rate_rejects_an_empty_window() -> None:
    with pytest.raises(ValueError, match="not after"):
        burn_rate_per_hour([], SEPTEMBER_2024, SEPTEMBER_2024)


def test_file_carries_path_columns_and_line_numbers() -> None:
    focus = read_focus(OCI)
    assert isinstance(focus, FocusFile)
    assert focus.path == OCI
    assert len(focus.columns) == 44
    assert [r.line for r in focus.rows] == [2, 3, 4, 5, 6, 7, 8]


# ---------------------------------------------------------------------------------------------
# Helpers: rewrite a fixture through the csv module, so edits hit exactly one field.

Edit = Callable[[list[list[str]]], None]


def _rewrite(source: Path, target: Path, edit: Edit) -> Path:
    table = list(csv.reader(io.StringIO(source.read_text(), newline="")))
    edit(table)
    with target.open("w", newline="") as out:
        csv.writer(out).writerows(table)
    return target


def _set(line: int, column: str, value: str) -> Edit:
    def edit(table: list[list[str]]) -> None:
        table[line - 1][table[0].index(column)] = value  # line 1 is the header

    return edit


def _drop(*columns: str) -> Edit:
    def edit(table: list[list[str]]) -> None:
        keep = [i for i, name in enumerate(table[0]) if name not in columns]
        table[:] = [[values[i] for i in keep] for values in table]

    return edit


def _chain(*edits: Edit) -> Edit:
    def edit(table: list[list[str]]) -> None:
        for each in edits:
            each(table)

    return edit
