"""The ``[energy]`` section and ``cost.mfu_target``: values, defaults, and every mistake named
with its key path (a CSV of hourly intensity by file and line) by `check-config`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

import pytest

from agent.cli.main import main
from agent.config.energy import MAX_ROW_PROBLEMS, EnergyConfig, Intensity
from agent.config.settings import Config, ConfigError, load_config

H0 = datetime(2026, 11, 1, tzinfo=UTC)


def load(tmp_path: Path, toml: str, csv: str | bytes | None = None) -> Config:
    if csv is not None:
        data = csv.encode() if isinstance(csv, str) else csv
        (tmp_path / "intensity.csv").write_bytes(data)
    path = tmp_path / "gpuwatch.toml"
    path.write_text(toml)
    return load_config(str(path), {})


def problems(tmp_path: Path, toml: str, csv: str | bytes | None = None) -> list[str]:
    with pytest.raises(ConfigError) as info:
        load(tmp_path, toml, csv)
    return info.value.problems


TABLE = '[energy]\ngrams_co2_per_kwh = "intensity.csv"\n'


def test_without_the_section_energy_is_the_gpus_alone_and_co2_unknown(tmp_path: Path) -> None:
    config = load(tmp_path, "")
    assert config.energy == EnergyConfig(pue=1.0, intensity=None, usd_per_kwh=None)
    assert config.cost.mfu_target is None


def test_constant_intensity_pue_price_and_mfu_target(tmp_path: Path) -> None:
    config = load(
        tmp_path,
        "[energy]\npue = 1.3\ngrams_co2_per_kwh = 390\nusd_per_kwh = 0.12\n"
        "[cost]\nmfu_target = 0.4\n",
    )
    assert config.energy.pue == 1.3
    assert config.energy.usd_per_kwh == Decimal("0.12")  # exact, not 0.11999...
    assert config.energy.intensity == Intensity(constant=390.0)
    assert config.energy.intensity.grams_per_kwh(H0) == 390.0
    assert config.cost.mfu_target == 0.4
    assert config.cost.target_utilization == 0.7  # untouched by the shared ratio reader


def test_zero_grams_is_allowed_for_a_contracted_carbon_free_supply(tmp_path: Path) -> None:
    config = load(tmp_path, "[energy]\ngrams_co2_per_kwh = 0\n")
    assert config.energy.intensity is not None
    assert config.energy.intensity.grams_per_kwh(H0) == 0.0


def test_an_hourly_csv_beside_the_file_with_offsets_extra_columns_and_gaps(
    tmp_path: Path,
) -> None:
    csv = (
        "\ufeffZone,Hour,Grams_CO2_per_kWh,Source\r\n"  # a spreadsheet's BOM, CRLF, any case
        "DE,2026-11-01T00:00:00Z,412.5,x\r\n"
        "DE,2026-11-01T02:00:00+01:00,398,x\r\n"  # 01:00 UTC
        "DE,2026-11-01T02:00:00Z,,x\r\n"  # the source left the hour empty: unknown
        "DE,2026-11-01 08:30:00+05:30,300,x\r\n"  # 03:00 UTC, a space for the T
        "\r\n"
    )
    intensity = load(tmp_path, TABLE, csv).energy.intensity
    assert intensity is not None
    assert intensity.source == str(tmp_path / "intensity.csv")
    at = {h: intensity.grams_per_kwh(H0 + timedelta(hours=h, minutes=59)) for h in range(5)}
    assert at == {0: 412.5, 1: 398.0, 2: None, 3: 300.0, 4: None}
    assert intensity.grams_per_kwh(H0 - timedelta(microseconds=1)) is None  # before the table
    assert intensity.grams_per_kwh(H0 + timedelta(hours=1)) == 398.0  # an hour's start is its own
    with pytest.raises(ValueError, match="naive"):
        intensity.grams_per_kwh(datetime(2026, 11, 1))


def test_rows_in_any_order_are_sorted(tmp_path: Path) -> None:
    csv = "hour,grams_co2_per_kwh\n2026-11-01T05:00:00Z,5\n2026-11-01T01:00:00Z,1\n"
    intensity = load(tmp_path, TABLE, csv).energy.intensity
    assert intensity is not None
    assert intensity.grams_per_kwh(H0 + timedelta(hours=1)) == 1.0
    assert intensity.grams_per_kwh(H0 + timedelta(hours=5)) == 5.0
    assert intensity.grams_per_kwh(H0 + timedelta(hours=3)) is None


def test_a_relative_config_path_resolves_the_csv_beside_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc" / "grid.csv").write_text("hour,grams_co2_per_kwh\n2026-11-01T00:00Z,7\n")
    (tmp_path / "etc" / "gpuwatch.toml").write_text('[energy]\ngrams_co2_per_kwh = "grid.csv"\n')
    monkeypatch.chdir(tmp_path)
    intensity = load_config("etc/gpuwatch.toml", {}).energy.intensity
    assert intensity is not None and intensity.grams_per_kwh(H0) == 7.0


def test_every_bad_row_is_named_by_file_and_line(tmp_path: Path) -> None:
    csv = (
        "hour,grams_co2_per_kwh\n"
        "2026-11-01T00:00:00Z,400\n"  # 2: fine
        "2026-11-01T01:00:00,400\n"  # 3: no offset
        "yesterday,400\n"  # 4: no time
        "2026-11-01T02:00:00Z,lots\n"  # 5: no number
        "2026-11-01T03:00:00Z,-1\n"  # 6: negative
        "2026-11-01T04:00:00Z,0.39\n"  # 7: kilograms
        "2026-11-01T05:00:00Z,nan\n"  # 8: not finite
        "2026-11-01T00:30:00Z,100\n"  # 9: overlaps line 2
        "2026-11-01T06:00:00Z\n"  # 10: a field short
    )
    found = problems(tmp_path, TABLE, csv)
    where = tmp_path / "intensity.csv"
    assert all(p.startswith(f"energy.grams_co2_per_kwh: {where}:") for p in found), found
    said = {int(p.split(f"{where}:")[1].split(":")[0]): p for p in found}
    assert sorted(said) == [3, 4, 5, 6, 7, 8, 9, 10], found
    assert "has no UTC offset" in said[3] and "2026-11-01T01:00:00Z" in said[3]
    assert "'yesterday' is not an ISO 8601 time" in said[4]
    assert "'lots' is not a number" in said[5]
    assert "must be from 0 to 2000 g, got '-1'" in said[6]
    assert "did you mean 390 (grams, not kilograms)?" in said[7]
    assert "got 'nan'" in said[8]
    assert "overlaps the hour of line 2" in said[9]
    assert "expected 2 fields, got 1" in said[10]


def test_a_file_of_bad_rows_is_summed_up_not_listed_whole(tmp_path: Path) -> None:
    rows = "".join(f"2026-11-01T{h:02d}:00:00Z,0.4\n" for h in range(24))
    found = problems(tmp_path, TABLE, "hour,grams_co2_per_kwh\n" + rows)
    assert len(found) == MAX_ROW_PROBLEMS + 1
    assert found[-1].endswith(f"and {24 - MAX_ROW_PROBLEMS} more bad row(s)")


@pytest.mark.parametrize(
    ("csv", "says"),
    [
        ("when,grams\n2026-11-01T00:00:00Z,1\n", "1: expected a header naming the columns"),
        ("", "1: expected a header naming the columns"),
        ("hour,grams_co2_per_kwh\n", "has no hour with a value"),
        ("hour,grams_co2_per_kwh\n2026-11-01T00:00:00Z,\n", "has no hour with a value"),
        (b"hour,grams\xff\n", "is not UTF-8 text"),
        (b"hour\0,grams\n", "is a binary file (a NUL byte at byte 4)"),
        ('hour,grams_co2_per_kwh\n"2026-11-01\0,1\n', "is a binary file"),
    ],
    ids=["no header", "empty", "header only", "only empty values", "latin-1", "binary", "nul"],
)
def test_a_csv_that_is_no_table_is_one_problem(tmp_path: Path, csv: str | bytes, says: str) -> None:
    found = problems(tmp_path, TABLE, csv)
    assert len(found) == 1 and found[0].startswith("energy.grams_co2_per_kwh: ")
    assert says in found[0], found


def test_a_missing_file_names_its_path_and_a_quoted_number_gets_a_hint(tmp_path: Path) -> None:
    found = problems(tmp_path, '[energy]\ngrams_co2_per_kwh = "nowhere.csv"\n')
    assert found == [
        f"energy.grams_co2_per_kwh: cannot read {tmp_path / 'nowhere.csv'}: "
        "No such file or directory"
    ]
    (hint,) = problems(tmp_path, '[energy]\ngrams_co2_per_kwh = "390"\n')
    assert hint.endswith("(a number is written without quotes: grams_co2_per_kwh = 390)")


def test_a_csv_past_the_size_bound_is_refused_unread(tmp_path: Path) -> None:
    big = tmp_path / "intensity.csv"
    with big.open("wb") as fh:
        fh.truncate(32 * 1024 * 1024 + 1)  # sparse: no 32 MiB written
    (found,) = problems(tmp_path, TABLE)
    assert "larger than 32 MiB" in found


@pytest.mark.parametrize(
    ("toml", "key", "says"),
    [
        ("[energy]\npue = 0.9\n", "energy.pue", "from 1 to 10, got 0.9"),
        ("[energy]\npue = 13\n", "energy.pue", "from 1 to 10, got 13"),
        ("[energy]\npue = nan\n", "energy.pue", "expected a finite number"),
        ('[energy]\npue = "1.3"\n', "energy.pue", "expected a number"),
        ("[energy]\ngrams_co2_per_kwh = -5\n", "energy.grams_co2_per_kwh", "from 0 g to 2000 g"),
        ("[energy]\ngrams_co2_per_kwh = 390000\n", "energy.grams_co2_per_kwh", "2000 g"),
        ("[energy]\ngrams_co2_per_kwh = 0.39\n", "energy.grams_co2_per_kwh", "did you mean 390"),
        ("[energy]\ngrams_co2_per_kwh = true\n", "energy.grams_co2_per_kwh", "expected a number"),
        ('[energy]\ngrams_co2_per_kwh = ""\n', "energy.grams_co2_per_kwh", "path of a CSV"),
        ("[energy]\nusd_per_kwh = -0.1\n", "energy.usd_per_kwh", "at least 0"),
        ("[energy]\nusd_per_kwh = 5000\n", "energy.usd_per_kwh", "at most 1,000 USD"),
        ("[energy]\npeu = 1.3\n", "energy.peu", "unknown key (allowed here: grams_co2_per_kwh"),
        ("energy = 1\n", "energy", "expected a table"),
        ("[cost]\nmfu_target = 40\n", "cost.mfu_target", "did you mean 0.4?"),
        ("[cost]\nmfu_target = 0\n", "cost.mfu_target", "must be greater than 0"),
        ("[cost]\nmfu_target = 1.5\n", "cost.mfu_target", "at most 1"),
        ("[cost]\nmfu_target = true\n", "cost.mfu_target", "expected a number"),
        ("[cost]\ntarget_utilization = 70\n", "cost.target_utilization", "did you mean 0.7?"),
    ],
)
def test_a_wrong_value_is_named_with_its_key(
    tmp_path: Path, toml: str, key: str, says: str
) -> None:
    (found,) = problems(tmp_path, toml)
    assert found.startswith(f"{key}: ") and says in found, found


def test_check_config_lists_csv_rows_beside_other_problems_and_exits_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "intensity.csv").write_text("hour,grams_co2_per_kwh\n2026-11-01T00:00,1\n")
    path = tmp_path / "gpuwatch.toml"
    path.write_text(TABLE + "pue = 0.5\n[cost]\nmfu_target = 40\n")
    assert main(["check-config", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"gpuwatch: 3 problem(s) in {path}:\n")
    assert f"energy.grams_co2_per_kwh: {tmp_path / 'intensity.csv'}:2: hour" in err
    assert "energy.pue: must be from 1 to 10" in err
    assert "cost.mfu_target: must be greater than 0 and at most 1, got 40" in err
