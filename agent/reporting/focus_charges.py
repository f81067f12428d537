"""What gpuwatch metered, as charges: one per GPU per hour (or day) of a period, read from the
cost ledger (``gpu_usage``, ``gpu_allocations``) for `gpuwatch export focus`.

The period is cut into pieces that no charge crosses: UTC days (the charge grid is UTC hours or
UTC days, as providers' FOCUS exports have it) and the configured zone's month starts (a
charge belongs to one billing period; in a zone such as +05:30 a month starts mid-hour). Each
piece is read with the rows :class:`agent.cost.split.Split` selects, less the day rows, so
whole hours come from hour rows and the piece's partial hours from minute rows: the same rows,
summed in Decimal, that `gpuwatch cost` and the report sum for the period, so the charges add
up to their metered total. A piece at a time, so memory follows a day of the fleet, not the
period.

Which models a GPU served in a charge: the targets its allocation rows name, and the models
those targets' generated-token counters were stored under in the same charge period.

Energy and CO2 are the ledger's too (``gpu_usage.energy_joules``, ``co2_grams``), summed as the
report sums them, with one difference: a charge whose energy is partly without CO2 (an hour the
intensity table does not cover, or metered before ``[energy]`` was set) has no CO2 at all,
since the known part would pass for the whole.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from sqlalchemy import Connection, or_, select

from agent.cost.metering import GPU_INFO
from agent.cost.split import Split, series_ranges
from agent.cost.summarize import OUTPUT
from agent.reporting.focus_shares import Shares, read_shares, token_series
from agent.reporting.model import Period
from agent.reporting.period import month_bounds
from agent.storage.buckets import DAY, HOUR
from migrations.schema import gpu_allocations, gpu_usage, rollups, series

GRANULARITY = {"hour": HOUR, "day": DAY}
_GpuKey = tuple[str, str]  # (host, gpu uuid)


@dataclass(frozen=True, slots=True)
class Charge:
    """One GPU's metered time and cost over [start, end), in the billing period it falls in.

    ``cost_usd`` is None when no rate covered any of that time (it cannot be exported as a
    cost). ``targets`` and ``models`` are what served on the GPU in the charge period, sorted.
    """

    host: str
    gpu_uuid: str
    gpu_index: str
    gpu_name: str | None
    start: datetime
    end: datetime
    billing_period: tuple[datetime, datetime]
    observed_seconds: float
    busy_seconds: float
    cost_usd: Decimal | None
    targets: tuple[str, ...]
    models: tuple[str, ...]
    energy_joules: float | None = None  # the GPU's own energy; None: no counter said
    co2_grams: float | None = None  # of that energy at the facility; None: unknown
    shares: Shares = Shares()  # who used the GPU (read for FOCUS 1.3's allocated rows only)


@dataclass
class _Sum:
    index: str = ""
    observed: float = 0.0
    busy: float = 0.0
    cost: Decimal | None = None
    energy: float | None = None
    co2: float | None = None
    co2_unknown: bool = False  # some energy has no CO2: the charge's CO2 is unknown

    def add_energy(self, joules: float | None, grams: float | None) -> None:
        if joules is None:
            return  # no energy, no CO2 to miss
        self.energy = joules if self.energy is None else self.energy + joules
        if grams is None:
            self.co2_unknown = True
        else:
            self.co2 = grams if self.co2 is None else self.co2 + grams

    @property
    def co2_grams(self) -> float | None:
        return None if self.co2_unknown else self.co2


def charges(
    conn: Connection, period: Period, granularity: str, with_shares: bool = False
) -> Iterator[Charge]:
    """The charges of ``period`` at ``granularity`` ("hour" or "day"), in time order, then by
    host and GPU; GPUs with no metered time in a charge period have no charge there. With
    ``with_shares``, each charge says which targets used the GPU (``Charge.shares``)."""
    size = GRANULARITY[granularity]
    names = _gpu_names(conn)
    outputs = _output_series(conn)
    tokens = token_series(conn) if with_shares else {}
    for piece in pieces(period, size):
        billing = month_bounds(piece[0], period.timezone)
        split = replace(Split.read(conn, *piece), day_until={})  # hour rows, never day rows
        usage = _usage(conn, split, piece[0], size)
        served = _targets(conn, split, piece[0], size)
        models = _models(conn, split, outputs, piece[0], size)
        shares = read_shares(conn, split, _Bucketing(piece[0], size), tokens) if with_shares else {}
        for (bucket, host, uuid), u in sorted(usage.items()):
            targets = tuple(sorted(served.get((bucket, host, uuid), ())))
            found = {m for t in targets for m in models.get((bucket, host, t), ())}
            yield Charge(
                host, uuid, u.index, names.get((host, uuid)), bucket,
                min(_floor(bucket, size) + timedelta(seconds=size), piece[1]), billing,
                u.observed, u.busy, u.cost, targets, tuple(sorted(found)),
                u.energy, u.co2_grams,
                _with_models(shares.get((bucket, host, uuid), Shares()), models, bucket, host),
            )  # fmt: skip


def _with_models(
    shares: Shares, models: Mapping[tuple[datetime, str, str], set[str]], at: datetime, host: str
) -> Shares:
    uses = tuple(
        replace(u, models=tuple(sorted(models.get((at, host, u.target), ())))) for u in shares.uses
    )
    return replace(shares, uses=uses)


def pieces(period: Period, size: int) -> list[tuple[datetime, datetime]]:
    """``period`` cut at UTC midnights and at the zone's month starts."""
    cuts = {period.start, period.end}
    day = _floor(period.start, DAY) + timedelta(days=1)
    while day < period.end:
        cuts.add(day)
        day += timedelta(days=1)
    month_end = month_bounds(period.start, period.timezone)[1]
    while month_end < period.end:
        cuts.add(month_end)
        month_end = month_bounds(month_end, period.timezone)[1]
    edges = sorted(cuts)
    return list(zip(edges, edges[1:], strict=False))


@dataclass(frozen=True, slots=True)
class _Bucketing:
    """A row's start -> the start of its charge, in one piece."""

    piece_start: datetime
    size: int

    def __call__(self, at: datetime) -> datetime:
        return _bucket(at, self.piece_start, self.size)


def _floor(at: datetime, size: int) -> datetime:
    if size == DAY:
        return at.replace(hour=0, minute=0, second=0, microsecond=0)
    return at.replace(minute=0, second=0, microsecond=0)


def _bucket(row_start: datetime, piece_start: datetime, size: int) -> datetime:
    return max(_floor(row_start, size), piece_start)


def _usage(
    conn: Connection, split: Split, piece_start: datetime, size: int
) -> dict[tuple[datetime, str, str], _Sum]:
    c = gpu_usage.c
    columns = (c.host, c.gpu_uuid, c.gpu_index, c.start, c.observed_seconds, c.busy_seconds,
               c.cost_usd, c.energy_joules, c.co2_grams)  # fmt: skip
    query = select(*columns).where(split.rows(gpu_usage, c.host)).order_by(c.start)
    out: dict[tuple[datetime, str, str], _Sum] = {}
    for host, uuid, index, start, observed, busy, cost, joules, grams in conn.execute(query):
        s = out.setdefault((_bucket(start, piece_start, size), host, uuid), _Sum())
        s.index = index  # the latest: a GPU renumbered by a reboot keeps one charge
        s.observed += observed
        s.busy += busy
        if cost is not None:
            s.cost = Decimal(cost) if s.cost is None else s.cost + Decimal(cost)
        s.add_energy(joules, grams)
    return out


def _targets(
    conn: Connection, split: Split, piece_start: datetime, size: int
) -> dict[tuple[datetime, str, str], set[str]]:
    c = gpu_allocations.c
    query = select(c.host, c.gpu_uuid, c.target, c.start).where(
        split.rows(gpu_allocations, c.host), c.seconds > 0
    )
    out: dict[tuple[datetime, str, str], set[str]] = defaultdict(set)
    for host, uuid, target, start in conn.execute(query):
        out[(_bucket(start, piece_start, size), host, uuid)].add(target)
    return out


def _models(
    conn: Connection,
    split: Split,
    outputs: Mapping[int, tuple[str, str, str]],
    piece_start: datetime,
    size: int,
) -> dict[tuple[datetime, str, str], set[str]]:
    """(bucket, host, target) -> the models its token counters were stored under then."""
    out: dict[tuple[datetime, str, str], set[str]] = defaultdict(set)
    conditions = series_ranges(split, {sid: meta[0] for sid, meta in outputs.items()})
    if not conditions:
        return out
    r = rollups.c
    for sid, start in conn.execute(select(r.series_id, r.start).where(or_(*conditions))):
        host, target, model = outputs[sid]
        out[(_bucket(start, piece_start, size), host, target)].add(model)
    return out


def _output_series(conn: Connection) -> dict[int, tuple[str, str, str]]:
    """Generated-token series id -> (host, target, model), for those naming both."""
    query = select(series.c.id, series.c.host, series.c.labels).where(series.c.metric == OUTPUT)
    out: dict[int, tuple[str, str, str]] = {}
    for sid, host, labels in conn.execute(query):
        parsed: dict[str, Any] = json.loads(labels)
        target, model = parsed.get("target"), parsed.get("model")
        if target and model:
            out[sid] = (host, str(target), str(model))
    return out


def _gpu_names(conn: Connection) -> dict[_GpuKey, str]:
    """(host, GPU uuid) -> the GPU's product name as NVML gave it (the last one stored)."""
    query = select(series.c.host, series.c.labels).where(series.c.metric == GPU_INFO)
    out: dict[_GpuKey, str] = {}
    for host, labels in conn.execute(query.order_by(series.c.id)):
        parsed: dict[str, Any] = json.loads(labels)
        if parsed.get("gpu_uuid") and parsed.get("gpu_name") and "mig_instance" not in parsed:
            out[(host, str(parsed["gpu_uuid"]))] = str(parsed["gpu_name"])
    return out
