"""Benchmark: how long does `gpuwatch` take to start, next to the interpreter's own start?

    python bench/cli_start.py [--rounds 15] [--checkout PATH]

Wall and CPU time of whole processes, median over ``--rounds``, each round running every command
once in turn (so a swing of the machine's load falls on all of them alike):

- baselines: `python -c pass` (the interpreter, site, the editable install's finder) and
  `python -c "import sqlalchemy"` (what reading any database costs before gpuwatch's code);
- `gpuwatch --help`, and `gpuwatch breakeven` with every figure given (no database): target
  under 0.3 s each;
- commands that read a SQLite file already at the schema's head: `gpuwatch alerts` and
  `gpuwatch report` (an empty database).

Bytecode is cached as for an installed gpuwatch (pip compiles it): a warm-up run writes it
under a temporary PYTHONPYCACHEPREFIX, whatever PYTHONDONTWRITEBYTECODE says. The commands run
the console script beside this interpreter; ``--checkout PATH`` measures another checkout's CLI
instead (a `git worktree` of another commit), through the two lines the console script runs.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

TARGET_SECONDS = 0.3
BREAKEVEN = [
    "breakeven",
    "--requests-per-day", "20000",
    "--gpu-seconds-per-request", "0.6",
    "--pod-usd-per-hour", "2.72",
    "--serverless-usd-per-hour", "4.10",
]  # fmt: skip
SHIM = "import sys; sys.path.insert(0, {path!r}); from agent.cli.main import main; sys.exit(main())"


def gpuwatch_command(checkout: Path | None) -> list[str]:
    if checkout is None:
        return [str(Path(sys.executable).with_name("gpuwatch"))]
    return [sys.executable, "-c", SHIM.format(path=str(checkout.resolve()))]


def commands(gpuwatch: list[str], config: Path) -> dict[str, list[str]]:
    db = ["--config", str(config)]
    return {
        "baseline: python -c pass": [sys.executable, "-c", "pass"],
        'baseline: python -c "import sqlalchemy"': [sys.executable, "-c", "import sqlalchemy"],
        "gpuwatch --help": [*gpuwatch, "--help"],
        "gpuwatch breakeven (given figures)": [*gpuwatch, *BREAKEVEN],
        "gpuwatch alerts (SQLite)": [*gpuwatch, "alerts", *db],
        "gpuwatch report (SQLite, empty)": [*gpuwatch, "report", *db],
    }


def run(command: Sequence[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds, and CPU seconds (user + system) of the process: on a shared machine the
    CPU time moves less with the load than the wall time does."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, check=False, env=env)
    took = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(command)}: exit {done.returncode}: {done.stderr.decode()}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return took, cpu


def measure(
    named: dict[str, list[str]], rounds: int, env: dict[str, str]
) -> dict[str, list[tuple[float, float]]]:
    times: dict[str, list[tuple[float, float]]] = {name: [] for name in named}
    for command in named.values():  # warm-up: page cache, bytecode
        run(command, env)
    for _ in range(rounds):
        for name, command in named.items():
            times[name].append(run(command, env))
    return times


def environment(folder: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GPUWATCH_", "PYTHON"))}
    return {**env, "PYTHONPYCACHEPREFIX": str(folder / "pycache")}


def report(times: dict[str, list[tuple[float, float]]]) -> None:
    def ms(values: list[float]) -> str:
        return f"{statistics.median(values) * 1e3:>8.0f}ms"

    floor = statistics.median(wall for wall, _ in times["baseline: python -c pass"])
    print(f"{'median of':<42}{'wall':>10}{'CPU':>10}{'wall over python -c pass':>27}")
    for name, values in times.items():
        wall = statistics.median(w for w, _ in values)
        print(
            f"{name:<42}{ms([w for w, _ in values])}{ms([c for _, c in values])}"
            f"{(wall - floor) * 1e3:>25.0f}ms"
        )
    for name in ("gpuwatch --help", "gpuwatch breakeven (given figures)"):
        wall = statistics.median(w for w, _ in times[name])
        ok = "OK" if wall < TARGET_SECONDS else "OVER TARGET"
        print(f"target: {name} < {TARGET_SECONDS:g} s -> {wall:.3f} s, {ok}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--checkout", type=Path, help="another checkout's CLI (see above)")
    args = parser.parse_args()
    gpuwatch = gpuwatch_command(args.checkout)
    with tempfile.TemporaryDirectory(prefix="gpuwatch-bench-") as folder:
        config = Path(folder) / "gpuwatch.toml"
        config.write_text(f'database_url = "sqlite:///{Path(folder) / "gw.db"}"\n')
        env = environment(Path(folder))
        run([*gpuwatch, "db", "upgrade", "--config", str(config)], env)
        named = commands(gpuwatch, config)
        print(f"{args.rounds} rounds; {sys.version.split()[0]}; {' '.join(gpuwatch)[:80]}")
        report(measure(named, args.rounds, env))


if __name__ == "__main__":
    main()
