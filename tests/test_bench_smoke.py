"""Every benchmark under bench/ still runs: each as a process with tiny sizes, exit code 0 and its
figure lines printed (the figures themselves are not judged: seconds of work on a busy machine).

A benchmark nobody runs rots (a changed signature, a moved module), and its figure in
BENCHMARKS.md can no longer be reproduced; `make bench` runs their short forms, this their
smallest. A script under bench/ that is neither a benchmark named here nor one of the helpers
fails the suite, so a new benchmark comes with its smoke run.

The benchmarks run a few at a time (three processes): two of them mostly wait on the wall
clock (a daemon ticking at 1 s, a PostgreSQL stopped for seconds), the rest use a core each.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.agent.own_postgres import pg_bin

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "bench"
HELPERS = {"__init__", "common", "box", "fleet"}  # imported by the benchmarks, not run
TIMEOUT_S = 180


@dataclass(frozen=True)
class Smoke:
    args: str  # the tiny sizes, split on spaces
    lines: tuple[str, ...]  # a line starting with each must be printed
    needs: str = ""  # "pg-url": $GPUWATCH_TEST_DB_URL; "pg-server": PostgreSQL's binaries
    with_pg: tuple[str, ...] = ()  # printed too where $GPUWATCH_TEST_DB_URL is set
    with_promtool: tuple[str, ...] = ()  # printed too where Debian's promtool is installed

    def expected(self) -> tuple[str, ...]:
        pg = self.with_pg if os.environ.get("GPUWATCH_TEST_DB_URL") else ()
        return self.lines + pg + (self.with_promtool if shutil.which("promtool") else ())


SMOKE: dict[str, Smoke] = {
    # Mostly waiting on the wall clock: started first.
    "outage": Smoke(
        "--outage-minutes 0.1 --before-minutes 0.05 --interval 1 --rounds 3",
        (
            "baseline: plain JSON",
            "spool: compressed JSON",
            "rounds stored during the outage",
            "baseline: before the outage",
            "target: the outage's GPU hours",
        ),
        needs="pg-server",
    ),
    "memory": Smoke(
        "--minutes 0.1 --sample-seconds 1",
        ("floor: python + pynvml initialised", "daemon peak", "target: RSS <="),
    ),
    "tick": Smoke(
        "--ticks 5 --hours 0.02",
        ("floor: bare pynvml loop", "target: NVML tick", "target: GPM", "target: box tick"),
    ),
    "scrape": Smoke(
        "--rounds 3 --extra-series 2000",
        (
            "baseline: prometheus_client parser",
            "target: tick",
            "baseline: healthy target",
            "target: hostile collect",
        ),
    ),
    "storage": Smoke(
        "--hours 0.02",
        ("bytes per raw sample at steady state", "target: steady state per box"),
        with_promtool=("baseline: Prometheus TSDB", "target: bytes per raw sample"),
    ),
    "rollup": Smoke(
        "--history-days 0.1 --hosts 2 --runs 2",
        ("baseline: 1 host, 1 hour of history", "target: steady run flat"),
    ),
    "rollup_bytes": Smoke(
        "--hours 0.05",
        (
            "baseline: SQLite: the box's rollups without the four",
            "SQLite: the four add per target",
        ),
    ),
    "pod_ledger": Smoke(
        "--gpus 2 --pods 2 --ticks 12 --rounds 2",
        (
            "A  pod_samples per tick:",
            "baseline Allocator.samples:",
            "B  meter with the pods' split:",
            "baseline meter without pods:",
        ),
    ),  # fmt: skip
    "mig_ledger": Smoke(
        "--instances 2 --ticks 12 --rounds 2",
        (
            "A  meter with the MIG instances:",
            "baseline meter without MIG:",
            "B  Allocator.samples, MIG GPU:",
            "baseline on a plain GPU:",
        ),
    ),  # fmt: skip
    "otlp": Smoke(
        "--spans 16 --exports 3 --rounds 2",
        (
            "baseline: protobuf ParseFromString",
            "A  decode, facts, inbox",
            "B  the same over HTTP",
            "target: A under 50 us per span",
            "target: the tick flat",
        ),
    ),
    "slo_burn": Smoke(
        "--targets 1,2 --history-days 0.05,0.1 --history-targets 2 --rounds 2",
        (
            "baseline: 1 targets",
            "1 targets, 0.05 days: SloBurnRate at a minute boundary",
            "target: SloBurnRate a tick",
            "target: between minutes flat in the history",
            "target: at a minute boundary flat in the history",
        ),
    ),
    "cost": Smoke(
        "--days 1 --gpus 16 --models 2 --step-seconds 300 --rounds 1 --raw-rounds 1",
        (
            "A: summarize from rollups",
            "baseline B: from raw samples",
            "check: A and B agree",
            "target: A <",
        ),
    ),
    "report": Smoke(
        "--days 2 --step-seconds 1800 --rounds 1 --hosts 1",
        ("8 GPUs, SQLite: baseline: summarize", "target: 8 GPUs, SQLite: report"),
        with_pg=("8 GPUs, PostgreSQL: baseline: summarize", "target: 8 GPUs, PostgreSQL: report"),
    ),
    "fleet_ingest": Smoke(
        "--boxes 1 --hours 0.02 --minutes 1 --ticks 2",
        ("boxes | mode", "target: local-first"),
        needs="pg-url",
    ),
    "focus_import": Smoke(
        "--rows 100 1000 --bomb-mib 4",
        ("baseline: csv.reader only", "gpuwatch import focus", "gzip bomb", "target: peak RSS"),
    ),
    "cli_start": Smoke(
        "--rounds 1",
        ("baseline: python -c pass", "gpuwatch report", "target: gpuwatch --help"),
    ),
    "demo": Smoke(
        "--days 1",
        (
            "generation (collect, store, rules, rollups)",
            "baseline (the same rounds",
            "target: 1 days generated",
        ),
    ),
}


def test_every_script_under_bench_is_smoke_tested_or_a_helper() -> None:
    scripts = {str(p.relative_to(BENCH).with_suffix("")) for p in BENCH.rglob("*.py")}
    assert scripts - HELPERS - set(SMOKE) == set(), "a benchmark without a smoke run"
    assert set(SMOKE) - scripts == set(), "a smoke run of a benchmark that is gone"


def _skip_reason(needs: str) -> str | None:
    if needs == "pg-url" and not os.environ.get("GPUWATCH_TEST_DB_URL"):
        return "PostgreSQL not available (set GPUWATCH_TEST_DB_URL, or run `make test`)"
    if needs == "pg-server" and pg_bin() is None:
        return "PostgreSQL server binaries not installed (Debian's postgresql)"
    return None


def _run(
    name: str, smoke: Smoke, env: dict[str, str], tmp: Path
) -> subprocess.CompletedProcess[str]:
    args = smoke.args.split()
    if name == "report":  # its template is cached by default under /tmp: a folder of its own
        args += ["--template", str(tmp / "report-template.db")]
    return subprocess.run(
        [sys.executable, str(BENCH / f"{name}.py"), *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
    )  # fmt: skip


@pytest.fixture(scope="module")
def runs(
    request: pytest.FixtureRequest, fake_nvml_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Future[subprocess.CompletedProcess[str]]]]:
    """Every selected, runnable benchmark started at once on three workers; their results as
    they end."""
    selected = {
        item.callspec.params["name"]
        for item in request.session.items
        if item.nodeid.startswith(request.node.nodeid) and hasattr(item, "callspec")
    }
    env = {**os.environ, "GPUWATCH_FAKE_NVML_DIR": str(fake_nvml_dir)}
    env.pop("GPUWATCH_CONFIG", None)
    tmp = tmp_path_factory.mktemp("bench")
    with ThreadPoolExecutor(max_workers=3) as pool:
        yield {
            name: pool.submit(_run, name, smoke, env, tmp)
            for name, smoke in SMOKE.items()
            if name in selected and _skip_reason(smoke.needs) is None
        }


@pytest.mark.parametrize("name", list(SMOKE))
def test_benchmark_runs_and_prints_its_figures(
    name: str, runs: dict[str, Future[subprocess.CompletedProcess[str]]]
) -> None:
    smoke = SMOKE[name]
    reason = _skip_reason(smoke.needs)
    if reason is not None:
        if os.environ.get("GPUWATCH_REQUIRE_PG") == "1":
            pytest.fail(f"GPUWATCH_REQUIRE_PG=1 but {reason}")
        pytest.skip(reason)
    done = runs[name].result()
    output = f"--- stdout\n{done.stdout}\n--- stderr\n{done.stderr[-4000:]}"
    assert done.returncode == 0, f"bench/{name}.py exited {done.returncode}\n{output}"
    printed = [line.strip() for line in done.stdout.splitlines()]
    missing = [w for w in smoke.expected() if not any(p.startswith(w) for p in printed)]
    assert not missing, f"bench/{name}.py did not print {missing}\n{output}"
