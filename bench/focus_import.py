"""Benchmark: `gpuwatch import focus` on large FOCUS exports and a gzip bomb (issue 13).

    python bench/focus_import.py [--rows 20000 200000] [--keep DIR]

Writes FOCUS 1.0 exports shaped like the official AWS sample (tests/fixtures/focus), every
row a distinct hourly charge (a resource per row, an hour per 100 rows), about 740 bytes a
row as in the issue's 148 MB file of 200,000 rows. Each is imported by the real command
(`gpuwatch import focus`, a subprocess on a fresh, migrated SQLite database), and its wall
time and peak RSS (the child's ru_maxrss) are printed next to the baseline measured in the
same run: a subprocess that only reads and splits the same file with the csv module, which is
the least any import must spend. Then a gzip bomb (1 GiB of one repeated valid row compressed to
about 1 MB) is imported the same way: it must be refused quickly, with little memory.

Targets (issue 13): peak RSS under 100 MB whatever the file's size; time growing linearly
with the rows (the 200k file about ten times the 20k one).
"""

from __future__ import annotations

import argparse
import csv
import gzip
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SAMPLE = REPO / "tests" / "fixtures" / "focus" / "focus-sample-aws.csv"
PYTHON = sys.executable
BOMB_BYTES = 1 << 30  # what the bomb would decompress to

BASELINE = """
import csv, gzip, sys
path = sys.argv[1]
opener = gzip.open if open(path, "rb").read(2) == b"\\x1f\\x8b" else open
n = 0
with opener(path, "rt", encoding="utf-8-sig", newline="") as fh:
    for _ in csv.reader(fh):
        n += 1
print(n)
"""


@dataclass(frozen=True)
class Run:
    seconds: float
    peak_mb: float
    rc: int
    output: str


def write_export(path: Path, rows: int) -> None:
    """``rows`` distinct charges in the AWS sample's columns, plain CSV."""
    with SAMPLE.open(newline="", encoding="utf-8-sig") as fh:
        header, *samples = list(csv.reader(fh))
    col = {name: i for i, name in enumerate(header)}
    start = datetime(2026, 11, 1, tzinfo=UTC)
    with path.open("w", newline="", encoding="utf-8") as out:
        writer = csv.writer(out, quoting=csv.QUOTE_MINIMAL)
        writer.writerow(header)
        for i in range(rows):
            row = list(samples[i % len(samples)])
            hour = start + timedelta(hours=i // 100)
            row[col["ChargePeriodStart"]] = f"{hour:%Y-%m-%d %H:%M:%S}"
            row[col["ChargePeriodEnd"]] = f"{hour + timedelta(hours=1):%Y-%m-%d %H:%M:%S}"
            row[col["BillingPeriodStart"]] = "2026-11-01 00:00:00"
            row[col["BillingPeriodEnd"]] = "2026-12-01 00:00:00"
            row[col["ChargeCategory"]] = "Usage"
            row[col["ResourceId"]] = f"arn:aws:ec2:us-east-1:123456789012:instance/i-{i:017x}"
            row[col["BilledCost"]] = f"{(i % 997) / 100:.10f}"
            row[col["EffectiveCost"]] = f"{(i % 997) / 100:.10f}"
            writer.writerow(row)


def write_bomb(path: Path, plain: Path) -> None:
    """The first row of ``plain`` repeated up to BOMB_BYTES, gzip-compressed as it goes, as a
    bomb is made: one short pattern compresses near deflate's limit (about 1000:1). Valid rows
    all; only the ratio tells it from a real export."""
    with plain.open("rb") as fh:
        header = fh.readline()
        row = fh.readline()
    block = row * ((1 << 20) // len(row))
    with gzip.open(path, "wb", compresslevel=9) as out:
        out.write(header)
        for _ in range(BOMB_BYTES // len(block)):
            out.write(block)


def measure(args: list[str], env: dict[str, str]) -> Run:
    started = time.perf_counter()
    proc = subprocess.Popen(args, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert proc.stdout is not None
    output = proc.stdout.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    seconds = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    return Run(seconds, usage.ru_maxrss / 1024, proc.returncode, output.strip())


def import_file(path: Path, workdir: Path) -> Run:
    db = workdir / f"{path.name}.db"
    db.unlink(missing_ok=True)
    env = {**os.environ, "GPUWATCH_DATABASE_URL": f"sqlite:///{db}"}
    env.pop("GPUWATCH_CONFIG", None)
    gpuwatch = [PYTHON, "-m", "agent.cli.main"]
    upgrade = subprocess.run([*gpuwatch, "db", "upgrade"], env=env, capture_output=True)
    if upgrade.returncode:
        sys.exit(f"db upgrade failed: {upgrade.stderr.decode()}")
    return measure([*gpuwatch, "import", "focus", str(path)], env)


def baseline(path: Path) -> Run:
    return measure([PYTHON, "-c", BASELINE, str(path)], dict(os.environ))


def report(what: str, run: Run) -> None:
    tail = run.output.splitlines()[-1] if run.output else ""
    print(f"  {what:<34} {run.seconds:8.1f} s  {run.peak_mb:7.1f} MB peak  rc {run.rc}  {tail}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, nargs="+", default=[20_000, 200_000])
    parser.add_argument("--keep", type=Path, help="write the files here and keep them")
    parser.add_argument("--no-bomb", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        workdir = args.keep or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        timings: dict[int, float] = {}
        plain = workdir / "focus-0.csv"
        for rows in args.rows:
            plain = workdir / f"focus-{rows}.csv"
            write_export(plain, rows)
            size_mb = plain.stat().st_size / 1e6
            print(f"{rows:,} rows, {size_mb:.0f} MB ({plain.name})")
            report("baseline: csv.reader only", baseline(plain))
            run = import_file(plain, workdir)
            report("gpuwatch import focus", run)
            timings[rows] = run.seconds
        if len(timings) > 1:
            (small, t_small), (big, t_big) = min(timings.items()), max(timings.items())
            print(f"time ratio {big // small}x rows: {t_big / t_small:.1f}x seconds")
        if not args.no_bomb:
            bomb = workdir / "bomb.csv.gz"
            write_bomb(bomb, plain)
            mb = bomb.stat().st_size / 1e6
            print(f"gzip bomb: {mb:.1f} MB compressed, {BOMB_BYTES / 2**30:.0f} GiB inside")
            report("baseline: csv.reader only", baseline(bomb))
            report("gpuwatch import focus", import_file(bomb, workdir))


if __name__ == "__main__":
    main()
