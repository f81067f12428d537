"""Benchmark: what does each box of a fleet cost the central PostgreSQL, per 10 s tick?

    python bench/fleet_ingest.py [--postgres-url URL] [--boxes 1,4,16,64] [--hours 0.75]
                                 [--minutes 30] [--ticks 30] [--modes local-first,direct]
                                 [--box-cache DIR]

One box (bench/box.py: 8 fake GPUs, 2 vLLM 0.33 targets of 2 models x 2 data-parallel
engines, every histogram; the real ``App.tick`` every 10 s and ``App.roll_up`` every minute
over ``--hours`` of simulated time) fills its local SQLite (``--box-cache`` keeps it for the
next run). It is cloned once per simulated box with the host renamed. For each N of
``--boxes`` and each mode, a fresh central database on the server of ``--postgres-url`` (a
superuser URL; default $GPUWATCH_TEST_DB_URL, skipped without one) takes:

- **local-first** (the fleet model): each box's real ``Forwarder`` (its own pooled
  connection, as a daemon keeps one), primed with the box's history, then run once per
  simulated minute for ``--minutes`` minutes, every box in turn, each forward sending what
  that minute's rollup made (the box's rollup watermark moved a minute at a time);
- **direct** (small fleets): every box's daemon writes its raw rounds into the central
  database: the real ``Store.write_round`` of the box's last 10 s round, host renamed,
  ``--ticks`` rounds per box (writes only: no alert queries, no rollups).

Measured: the CPU time of all PostgreSQL's processes (``/proc/PID/schedstat``: the clock-tick
``utime`` and ``stime`` miss sub-millisecond transactions; the postmaster's reaped children
included) over each phase, in ms per box per 10 s, and the boxes one core carries (10,000 ms
per 10 s over that). Baseline, in the same run: a bare COPY of the same rows into an unindexed
table of the same columns, one COPY per box and forward (or tick). Target: 1,000 boxes per
PostgreSQL core in local-first mode. The leader's fleet-wide cost signals (once a minute for
the whole fleet) are timed beside.
"""

from __future__ import annotations

import argparse
import os
import pickle
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import Engine, select, text, update  # noqa: E402

from agent.collect.runner import Round  # noqa: E402
from agent.config.settings import Config  # noqa: E402
from agent.cost.signals import fleet_samples  # noqa: E402
from agent.storage.db import open_database, upgrade_database  # noqa: E402
from agent.storage.forward.job import Forwarder, central_engine  # noqa: E402
from agent.storage.forward.streams import STREAMS, Buckets  # noqa: E402
from agent.storage.store import Store  # noqa: E402
from bench.box import HOST, load_box_nvml, run_box  # noqa: E402
from bench.common import drop_database, fresh_database, postgres_or_skip, verdict  # noqa: E402
from migrations.schema import rollup_state  # noqa: E402

TARGET_BOXES = 1000
TICK = 10.0
CORE_MS_PER_TICK = TICK * 1000  # one core's CPU time per 10 s
CLK = os.sysconf("SC_CLK_TCK")


# -- PostgreSQL's CPU -------------------------------------------------------------------------


def postmaster(engine: Engine) -> int:
    with engine.connect() as conn:
        backend = int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())
    return int(_stat(backend)[1])  # its parent


def _stat(pid: int) -> list[str]:
    raw = Path(f"/proc/{pid}/stat").read_text()
    return raw[raw.rindex(")") + 2 :].split()  # fields from the state on (the name may hold spaces)


def server_cpu_ms(master: int) -> float:
    """CPU time of the postmaster and every live child (the scheduler's exact runtime from
    /proc/PID/schedstat: utime and stime are sampled at the clock tick, which misses the
    sub-millisecond bursts of a small transaction), plus the children already reaped
    (autovacuum workers: the postmaster's cutime + cstime), in ms."""
    fields = _stat(master)
    total = (int(fields[13]) + int(fields[14])) * 1000 / CLK  # cutime cstime
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            if pid != master and int(_stat(pid)[1]) != master:
                continue
            runtime_ns = int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])
        except (OSError, ValueError):
            continue
        total += runtime_ns / 1e6
    return total


@contextmanager
def measured(master: int, into: list[float]) -> Iterator[None]:
    before = server_cpu_ms(master)
    yield
    into.append(server_cpu_ms(master) - before)


# -- the box and its clones -------------------------------------------------------------------


def build_box(folder: Path, hours: float) -> tuple[Path, Round]:
    """One box's local SQLite after ``hours`` of ticks and rollups; its last 10 s round."""
    load_box_nvml(folder)
    path = folder / "box.db"
    url = f"sqlite:///{path}"
    upgrade_database(url)
    run = run_box(folder, url, hours, timedelta(hours=hours), lambda *_: None, 0.0)
    assert run.last_round is not None
    return path, run.last_round


def cached_box(cache: Path | None, folder: Path, hours: float) -> tuple[Path, Round]:
    """The box of ``hours``, built once into ``cache`` (its database and its last round)."""
    if cache is not None and (cache / f"box-{hours:g}h.db").exists():
        with (cache / f"round-{hours:g}h.pickle").open("rb") as fh:
            return cache / f"box-{hours:g}h.db", pickle.load(fh)  # noqa: S301 - our own file
    began = time.perf_counter()
    box, round_ = build_box(folder, hours)
    print(f"box built: {hours:g} simulated hours in {time.perf_counter() - began:.0f} s")
    if cache is None:
        return box, round_
    cache.mkdir(parents=True, exist_ok=True)
    shutil.copy(box, cache / f"box-{hours:g}h.db")
    with (cache / f"round-{hours:g}h.pickle").open("wb") as fh:
        pickle.dump(round_, fh)
    return cache / f"box-{hours:g}h.db", round_


def clone(source: Path, folder: Path, host: str) -> Engine:
    """A copy of the box's database as ``host``: every host column and label renamed."""
    path = folder / f"{host}.db"
    shutil.copy(source, path)
    engine = open_database(f"sqlite:///{path}")
    old, new = f'"host":"{HOST}"', f'"host":"{host}"'
    with engine.begin() as conn:
        conn.execute(text("UPDATE series SET host = :h, labels = replace(labels, :o, :n)"),
                     {"h": host, "o": old, "n": new})  # fmt: skip
        for table in ("gpu_usage", "gpu_allocations", "rollup_state", "collector_runs"):
            conn.execute(text(f"UPDATE {table} SET host = :h"), {"h": host})
        conn.execute(text("UPDATE alert_history SET scope = :h WHERE scope = :o"),
                     {"h": host, "o": HOST})  # fmt: skip
        conn.execute(text("DELETE FROM forward_state"))
    return engine


def set_watermarks(engine: Engine, host: str, minute: datetime) -> None:
    """The box's rollup as it stood at ``minute``: rows before it complete, none after."""
    hour = minute.replace(minute=0, second=0, microsecond=0)
    with engine.begin() as conn:
        for job, at in (("minute", minute), ("hour", hour)):
            conn.execute(
                update(rollup_state)
                .where(rollup_state.c.host == host, rollup_state.c.job == job)
                .values(watermark=at)
            )


def minute_watermark(engine: Engine) -> datetime:
    with engine.connect() as conn:
        return conn.execute(
            select(rollup_state.c.watermark).where(rollup_state.c.job == "minute")
        ).scalar_one()


# -- databases --------------------------------------------------------------------------------


def bare_copy(conn: Any, table: str, columns: list[str], rows: list[tuple[Any, ...]]) -> None:
    raw = conn.connection.dbapi_connection
    with (
        raw.cursor() as cursor,
        cursor.copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN") as c,
    ):
        for row in rows:
            c.write_row(row)


# -- the modes --------------------------------------------------------------------------------


def local_first(url: str, box: Path, n: int, folder: Path, minutes: int) -> dict[str, float]:
    center = open_database(url)
    master = postmaster(center)
    boxes = {f"box-{i:04d}": clone(box, folder, f"box-{i:04d}") for i in range(n)}
    end = minute_watermark(next(iter(boxes.values())))
    start = end - timedelta(minutes=minutes)
    forwarders = {}
    for host, engine in boxes.items():  # primed: the history up to the measured span
        set_watermarks(engine, host, start)
        forwarders[host] = Forwarder(engine, central_engine(url, 30), host, budget_seconds=3600)
        assert forwarders[host].run(start).ok
    cpu: list[float] = []
    sent = 0
    client = 0.0
    for k in range(1, minutes + 1):
        at = start + timedelta(minutes=k)
        for host, engine in boxes.items():
            set_watermarks(engine, host, at)
        with measured(master, cpu):
            began = time.process_time()
            for fwd in forwarders.values():
                result = fwd.run(at)
                assert result.ok, result.error
                sent += result.rows
            client += time.process_time() - began
    rows = [batch_rows(engine, host, start) for host, engine in list(boxes.items())[:1]][0]
    floor = bare_forward(center, master, rows, n * minutes)
    signals = leader_signals(center, end)
    for fwd in forwarders.values():
        fwd.central.dispose()
    for engine in boxes.values():
        engine.dispose()
    center.dispose()
    per_forward = sum(cpu) / (n * minutes)
    return {"ms_per_box_tick": per_forward / 6, "rows_per_forward": sent / (n * minutes),
            "floor_ms_per_box_tick": floor / 6, "leader_signals_ms": signals,
            "client_ms_per_forward": client * 1000 / (n * minutes)}  # fmt: skip


def batch_rows(engine: Engine, host: str, start: datetime) -> dict[str, list[tuple[Any, ...]]]:
    """One minute's forwarded rows of the box (the minute after ``start``), per table."""
    out: dict[str, list[tuple[Any, ...]]] = {}
    with engine.connect() as conn:
        for stream in STREAMS:
            if not isinstance(stream.cursor, Buckets):
                continue
            t = stream.table
            query = select(*stream.columns).where(
                t.c.resolution == 60, t.c.start >= start, t.c.start < start + timedelta(minutes=1)
            )
            out[t.name] = [tuple(r) for r in conn.execute(query)]
    return out


def bare_forward(center: Engine, master: int, rows: dict[str, list[Any]], times: int) -> float:
    """CPU ms per COPY of one forward's rows into unindexed tables of the same columns."""
    with center.begin() as conn:
        for table in rows:
            conn.execute(text(f"CREATE UNLOGGED TABLE bare_{table} AS SELECT * FROM {table} "
                              "WITH NO DATA"))  # fmt: skip
    cpu: list[float] = []
    columns = {s.table.name: [c.name for c in s.columns] for s in STREAMS}
    with measured(master, cpu), center.connect() as conn:
        for _ in range(times):
            for table, found in rows.items():
                quoted = [f'"{c}"' for c in columns[table]]
                bare_copy(conn, f"bare_{table}", quoted, found)
            conn.commit()
    return cpu[0] / times


def leader_signals(center: Engine, end: datetime) -> float:
    """Wall ms of the leader's fleet-wide cost signals over the whole central database."""
    config = Config(host="leader", database_url="")
    began = time.perf_counter()
    fleet_samples(center, config, end)
    return (time.perf_counter() - began) * 1000


def direct(url: str, round_: Round, n: int, ticks: int) -> dict[str, float]:
    center = open_database(url)
    master = postmaster(center)
    stores = {f"box-{i:04d}": Store(center, f"box-{i:04d}") for i in range(n)}
    rounds = {host: renamed(round_, host) for host in stores}
    for host, store in stores.items():  # series created: the steady state writes samples only
        store.write_round(shifted(rounds[host], -1))
    cpu: list[float] = []
    with measured(master, cpu):
        for k in range(ticks):
            for host, store in stores.items():
                store.write_round(shifted(rounds[host], k))
    rows = sum(len(r.samples) for r in round_.runs) + len(round_.derived)
    floor = bare_direct(center, master, rows, n * ticks)
    center.dispose()
    return {"ms_per_box_tick": cpu[0] / (n * ticks), "rows_per_tick": rows,
            "floor_ms_per_box_tick": floor}  # fmt: skip


def renamed(round_: Round, host: str) -> Round:
    def fix(s: Any) -> Any:
        return replace(s, labels={**s.labels, "host": host}) if "host" in s.labels else s

    runs = tuple(replace(r, samples=tuple(fix(s) for s in r.samples)) for r in round_.runs)
    return replace(round_, runs=runs, derived=tuple(fix(s) for s in round_.derived))


def shifted(round_: Round, k: int) -> Round:
    delta = timedelta(seconds=TICK * (k + 1))

    def move(s: Any) -> Any:
        return replace(s, ts=s.ts + delta)

    runs = tuple(
        replace(r, ts=r.ts + delta, samples=tuple(move(s) for s in r.samples)) for r in round_.runs
    )
    return replace(round_, ts=round_.ts + delta, runs=runs,
                   derived=tuple(move(s) for s in round_.derived))  # fmt: skip


def bare_direct(center: Engine, master: int, rows: int, times: int) -> float:
    with center.begin() as conn:
        conn.execute(text("CREATE UNLOGGED TABLE bare_samples (series_id integer, "
                          "ts timestamptz, value double precision)"))  # fmt: skip
    now = datetime.now().astimezone()
    batch = [(i, now, float(i)) for i in range(rows)]
    cpu: list[float] = []
    with measured(master, cpu), center.connect() as conn:
        for _ in range(times):
            bare_copy(conn, "bare_samples", ["series_id", "ts", "value"], batch)
            conn.commit()
    return cpu[0] / times


# -- main -------------------------------------------------------------------------------------


def per_core(ms: float) -> str:
    return f"{CORE_MS_PER_TICK / ms:8.0f}" if ms > 0 else "     inf"


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--postgres-url", help="a superuser URL (default $GPUWATCH_TEST_DB_URL)")
    parser.add_argument("--boxes", default="1,4,16,64")
    parser.add_argument("--hours", type=float, default=0.75, help="simulated history of the box")
    parser.add_argument("--minutes", type=int, default=30, help="forwards measured per box")
    parser.add_argument("--ticks", type=int, default=30, help="direct-mode rounds per box")
    parser.add_argument("--modes", default="local-first,direct")
    parser.add_argument(
        "--box-cache", type=Path, help="keep the built box here, reuse it next time"
    )
    args = parser.parse_args()
    args.postgres_url = postgres_or_skip(args.postgres_url, "the central database's CPU per box")
    folder = Path(tempfile.mkdtemp(prefix="gpuwatch-bench-fleet-"))
    try:
        box, round_ = cached_box(args.box_cache, folder, args.hours)
        print(f"{'boxes':>5} | {'mode':<11} | {'PG CPU ms/box/10s':>17} | {'boxes/core':>10} | "
              f"{'bare COPY ms':>12} | {'its boxes/core':>14} | notes")  # fmt: skip
        costs = [report_n(args, folder, box, round_, int(n)) for n in args.boxes.split(",")]
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    local = [ms for ms in costs if ms is not None]
    if local:
        worst = CORE_MS_PER_TICK / max(local)
        print(f"target: local-first >= {TARGET_BOXES:,} boxes per PostgreSQL core at 10 s ticks "
              f"-> {worst:,.0f} at the dearest N, {verdict(worst >= TARGET_BOXES)}")  # fmt: skip
    return 0


def report_n(
    args: argparse.Namespace, folder: Path, box: Path, round_: Round, n: int
) -> float | None:
    """The rows of ``n`` boxes; local-first's PostgreSQL CPU ms per box and tick, if run."""
    work = folder / f"n{n}"
    work.mkdir()
    local = None
    if "local-first" in args.modes.split(","):
        local = local_first_row(args, work, box, n)
    if "direct" in args.modes.split(","):
        direct_row(args, round_, n)
    sys.stdout.flush()
    return local


def local_first_row(args: argparse.Namespace, work: Path, box: Path, n: int) -> float:
    name = f"gw_bench_fleet_lf_{n}"
    try:
        lf = local_first(fresh_database(args.postgres_url, name), box, n, work, args.minutes)
    finally:
        drop_database(args.postgres_url, name)
    row(n, "local-first", lf["ms_per_box_tick"], lf["floor_ms_per_box_tick"],
        f"{lf['rows_per_forward']:.0f} rows/forward, leader signals {lf['leader_signals_ms']:.0f}"
        f" ms/min, client {lf['client_ms_per_forward']:.1f} ms/forward")  # fmt: skip
    return lf["ms_per_box_tick"]


def direct_row(args: argparse.Namespace, round_: Round, n: int) -> None:
    name = f"gw_bench_fleet_direct_{n}"
    try:
        dr = direct(fresh_database(args.postgres_url, name), round_, n, args.ticks)
    finally:
        drop_database(args.postgres_url, name)
    row(
        n,
        "direct",
        dr["ms_per_box_tick"],
        dr["floor_ms_per_box_tick"],
        f"{dr['rows_per_tick']:.0f} rows/tick, writes only (no alert queries, no rollups)",
    )
    sys.stdout.flush()


def row(n: int, mode: str, ms: float, floor: float, notes: str) -> None:
    print(f"{n:>5} | {mode:<11} | {ms:17.3f} | {per_core(ms):>10} | {floor:12.3f} | "
          f"{per_core(floor):>14} | {notes}")  # fmt: skip


if __name__ == "__main__":
    raise SystemExit(main())
