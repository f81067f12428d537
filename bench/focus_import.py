"""Benchmark: what do `gpuwatch import focus` of a large FOCUS export and of a gzip bomb cost,
in time and memory?

    python bench/focus_import.py [--rows 20000 200000] [--bomb-mib 1024] [--no-bomb] [--keep DIR]

FOCUS 1.0 exports shaped like the official AWS sample (tests/fixtures/focus), every row a
distinct hourly charge (a resource per row, an hour per 100 rows), about 740 bytes a row (the
200,000-row file is ~148 MB), for each size of ``--rows``; then a gzip bomb: the first row
repeated to ``--bomb-mib`` MiB, compressed to about a thousandth of that (valid rows all; only
the ratio tells it from a real export). Each file is imported by the real command (a fresh
process on a fresh, migrated SQLite database): its wall time and its own peak RSS (VmHWM as it
exits), next to the baseline measured in the same run: a process that only reads and splits the
same file with the csv module, the least any import must spend.

Targets: peak RSS under 100 MB whatever the file's size; time linear in the rows (10 x the rows,
about 10 x the time); the bomb refused quickly, with little memory.
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
sys.path.insert(0, str(REPO))

from bench.common import verdict  # noqa: E402
from tests.cli_peak import PEAK_OF_CLI  # noqa: E402

SAMPLE = REPO / "tests" / "fixtures" / "focus" / "focus-sample-aws.csv"
PYTHON = sys.executable
PEAK_TARGET_MB = 100.0

BASELINE = """
import csv, gzip, sys
path = sys.argv[1]
opener = gzip.open if open(path, "rb").read(2) == b"\\x1f\\x8b" else open
n = 0
with opener(path, "rt", encoding="utf-8-sig", newline="") as fh:
    for _ in csv.reader(fh):
        n += 1
print(n)
print([x for x in open("/proc/self/status") if x.startswith("VmHWM")][0].strip(), file=sys.stderr)
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


def write_bomb(path: Path, plain: Path, size: int) -> None:
    """The first row of ``plain`` repeated up to ``size`` bytes, gzip-compressed as it goes, as
    a bomb is made: one short pattern compresses near deflate's limit (about 1000:1)."""
    with plain.open("rb") as fh:
        header = fh.readline()
        row = fh.readline()
    block = row * ((1 << 20) // len(row))
    with gzip.open(path, "wb", compresslevel=9) as out:
        out.write(header)
        for _ in range(max(1, size // len(block))):
            out.write(block)


def measure(args: list[str], env: dict[str, str]) -> Run:
    """A process's wall time and its own peak RSS, which it says on stderr as it exits (a
    child's ru_maxrss would also count the pages of this process it was forked from)."""
    started = time.perf_counter()
    done = subprocess.run(args, env=env, capture_output=True, text=True, check=False, cwd=REPO)
    seconds = time.perf_counter() - started
    peak = int(done.stderr.rsplit("VmHWM:", 1)[1].split()[0]) / 1024
    output = (done.stdout + done.stderr.rsplit("VmHWM:", 1)[0]).strip()
    return Run(seconds, peak, done.returncode, output)


def import_file(path: Path, workdir: Path) -> Run:
    db = workdir / f"{path.name}.db"
    db.unlink(missing_ok=True)
    env = {**os.environ, "GPUWATCH_DATABASE_URL": f"sqlite:///{db}"}
    env.pop("GPUWATCH_CONFIG", None)
    upgrade = [PYTHON, "-m", "agent.cli.main", "db", "upgrade"]
    done = subprocess.run(upgrade, env=env, capture_output=True, text=True, check=False)
    if done.returncode:
        sys.exit(f"db upgrade failed: {done.stderr}")
    return measure([PYTHON, "-c", PEAK_OF_CLI, "import", "focus", str(path)], env)


def baseline(path: Path) -> Run:
    return measure([PYTHON, "-c", BASELINE, str(path)], dict(os.environ))


def report(what: str, run: Run) -> None:
    tail = run.output.splitlines()[-1][:90] if run.output else ""
    print(f"  {what:<28} {run.seconds:7.2f} s  {run.peak_mb:6.1f} MB peak  rc {run.rc}  {tail}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rows", type=int, nargs="+", default=[20_000, 200_000])
    parser.add_argument("--bomb-mib", type=int, default=1024, help="the bomb, decompressed")
    parser.add_argument("--no-bomb", action="store_true")
    parser.add_argument("--keep", type=Path, help="write the files here and keep them")
    args = parser.parse_args()
    peaks: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        workdir = args.keep or Path(tmp)
        workdir.mkdir(parents=True, exist_ok=True)
        timings: dict[int, float] = {}
        plain = workdir / "focus-0.csv"
        for rows in args.rows:
            plain = workdir / f"focus-{rows}.csv"
            write_export(plain, rows)
            print(f"{rows:,} rows, {plain.stat().st_size / 1e6:.0f} MB")
            report("baseline: csv.reader only", baseline(plain))
            run = import_file(plain, workdir)
            report("gpuwatch import focus", run)
            timings[rows], peaks = run.seconds, [*peaks, run.peak_mb]
        if len(timings) > 1:
            (small, t_small), (big, t_big) = min(timings.items()), max(timings.items())
            print(f"linear: {big / small:g} x the rows took {t_big / t_small:.1f} x the time")
        if not args.no_bomb:
            bomb = workdir / "bomb.csv.gz"
            write_bomb(bomb, plain, args.bomb_mib << 20)
            print(f"gzip bomb: {bomb.stat().st_size / 1e6:.1f} MB compressed, "
                  f"{args.bomb_mib:,} MiB inside")  # fmt: skip
            report("baseline: csv.reader only", baseline(bomb))
            run = import_file(bomb, workdir)
            report("gpuwatch import focus", run)
            peaks.append(run.peak_mb)
    print(f"target: peak RSS < {PEAK_TARGET_MB:g} MB -> {max(peaks):.1f} MB, "
          f"{verdict(max(peaks) < PEAK_TARGET_MB)}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
