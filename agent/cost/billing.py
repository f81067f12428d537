"""Billing records in the database, the hourly billing job, and reconciliation.

A fetch from a provider is all or nothing: the job stores a provider's rates and records only
when every call of that fetch succeeded, in one transaction, so a failing API never leaves half
a month behind. Records are keyed (source, record_id): fetching the same period again, or
re-importing the same FOCUS file, replaces rows instead of counting them twice.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from sqlalchemy import (
    BigInteger,
    Column,
    Connection,
    Engine,
    MetaData,
    Table,
    delete,
    func,
    insert,
    select,
)
from sqlalchemy.exc import SQLAlchemyError

from agent.config.settings import BillingProviderConfig
from collectors.base import Sample
from collectors.billing.base import (
    BillingError,
    CostKind,
    CostRecord,
    HourlyRate,
    check_rate,
    check_record,
)
from collectors.billing.registry import CostSource, RateSource, make_source
from migrations.schema import billing_resources, cost_records

log = logging.getLogger(__name__)

# A resource seen again within this long was running in between: meter it.
MAX_UNSEEN = timedelta(hours=2)


def save_records(conn: Connection, records: Sequence[CostRecord], now: datetime) -> int:
    """Insert or replace ``records`` (same source and record_id); returns how many."""
    if not records:
        return 0
    latest = {(r.source, r.record_id): r for r in records}  # a repeated id: the last one wins
    by_source: dict[str, list[str]] = defaultdict(list)
    for source, record_id in latest:
        by_source[source].append(record_id)
    # Per source, plain IN on the key's second column: one index probe per id on SQLite and
    # PostgreSQL alike (a row-value IN is not always planned as probes).
    for source, ids in by_source.items():
        for chunk in _chunks(ids, 500):
            conn.execute(
                delete(cost_records).where(
                    cost_records.c.source == source, cost_records.c.record_id.in_(chunk)
                )
            )
    conn.execute(insert(cost_records), [_row(r, now) for r in latest.values()])
    return len(latest)


class StagedRecords:
    """Many records replacing their stored namesakes at once, in time that grows linearly.

    ``save_records`` deletes and inserts each record by its key, and record ids (FOCUS row
    hashes) are random: past the page cache every insert lands on another page of the key's
    index, and on SQLite the WAL fills with copies of the same pages, so a large import slows
    as it goes (200,000 FOCUS rows took 155 s). Here records are appended in arrival order to
    a temporary table without any index, then moved in one statement sorted by key: each index
    page is visited once. Within ``conn``'s transaction; a repeated id: the last one wins.
    """

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._seq = 0
        columns = [Column(c.name, c.type) for c in cost_records.columns]
        self._stage = Table("cost_records_stage", MetaData(), Column("seq", BigInteger),
                            *columns, prefixes=["TEMPORARY"])  # fmt: skip
        self._stage.create(conn)

    def add(self, records: Sequence[CostRecord], now: datetime) -> None:
        rows = [{**_row(r, now), "seq": self._seq + i} for i, r in enumerate(records)]
        self._seq += len(rows)
        if rows:
            self._conn.execute(insert(self._stage), rows)

    def store(self) -> int:
        """Move the staged records into cost_records; returns how many (distinct ids)."""
        stage, conn = self._stage, self._conn
        for source in conn.execute(select(stage.c.source).distinct()).scalars().all():
            ids = select(stage.c.record_id).where(stage.c.source == source)
            conn.execute(delete(cost_records).where(
                cost_records.c.source == source, cost_records.c.record_id.in_(ids)))  # fmt: skip
        latest = select(func.max(stage.c.seq)).group_by(stage.c.source, stage.c.record_id)
        count = conn.execute(select(func.count()).select_from(latest.subquery())).scalar_one()
        names = [c.name for c in cost_records.columns]
        conn.execute(insert(cost_records).from_select(
            names,
            select(*(stage.c[n] for n in names))
            .where(stage.c.seq.in_(latest))
            .order_by(stage.c.source, stage.c.record_id),
        ))  # fmt: skip
        stage.drop(conn)
        return int(count)  # rowcount of INSERT ... SELECT is -1 on psycopg


def _row(r: CostRecord, now: datetime) -> dict[str, object]:
    return {
        "source": r.source, "record_id": r.record_id, "kind": r.kind.value,
        "resource": r.resource, "period_start": r.period_start, "period_end": r.period_end,
        "amount": r.amount, "currency": r.currency, "description": r.description,
        "imported_at": now,
    }  # fmt: skip


def _chunks(items: Sequence[str], size: int) -> Iterable[list[str]]:
    for i in range(0, len(items), size):
        yield list(items[i : i + size])


def billed(
    engine: Engine, start: datetime, end: datetime, kind: CostKind = CostKind.BILLED
) -> dict[tuple[str, str], Decimal]:
    """(source, currency) -> amount of records whose period starts in [start, end)."""
    query = select(cost_records.c.source, cost_records.c.currency, cost_records.c.amount).where(
        cost_records.c.kind == kind.value,
        cost_records.c.period_start >= start,
        cost_records.c.period_start < end,
    )
    out: dict[tuple[str, str], Decimal] = defaultdict(Decimal)
    with engine.connect() as conn:
        for source, currency, amount in conn.execute(query):
            out[(source, currency)] += amount
    return dict(out)


def track_resources(conn: Connection, rates: Sequence[HourlyRate], now: datetime) -> None:
    """Remember each billed resource: first and last seen, and what it cost since first seen.

    Lambda keeps no billing history, so this metered figure (rate x time gpuwatch saw the
    instance running) is all there is to know of its spend.
    """
    for rate in rates:
        key = (billing_resources.c.source == rate.source) & (
            billing_resources.c.resource == rate.resource
        )
        row = conn.execute(select(billing_resources).where(key)).mappings().first()
        if row is None:
            conn.execute(insert(billing_resources).values(
                source=rate.source, resource=rate.resource, name=rate.name, gpus=rate.gpus,
                usd_per_hour=rate.usd_per_hour, first_seen=rate.started_at or now,
                last_seen=now, metered_usd=_since_start(rate, now)))  # fmt: skip
            continue
        gap = now - row["last_seen"]
        added = rate.usd_per_hour * Decimal(gap.total_seconds()) / 3600 if gap <= MAX_UNSEEN else 0
        conn.execute(
            billing_resources.update()
            .where(key)
            .values(
                name=rate.name,
                gpus=rate.gpus,
                usd_per_hour=rate.usd_per_hour,
                last_seen=now,
                metered_usd=row["metered_usd"] + added,
            )  # fmt: skip
        )


def _since_start(rate: HourlyRate, now: datetime) -> Decimal:
    if rate.started_at is None or rate.started_at >= now:
        return Decimal(0)
    return rate.usd_per_hour * Decimal((now - rate.started_at).total_seconds()) / 3600


@dataclass
class BillingJob:
    """Reads every configured provider once; one line when a provider starts failing (or fails
    for another reason), one when it recovers.

    Nothing a provider answers escapes the job: bad JSON, answers nested too deeply, amounts out
    of bounds (collectors.billing.base), a key that is missing, an error the source did not
    foresee, a write the database refuses. Each is that provider's failure, returned by ``run``,
    kept in ``last_errors`` and logged with its reason; the other providers go on.
    """

    engine: Engine
    providers: Sequence[BillingProviderConfig]
    # (provider, key, base_url) -> source; tests pass one that never sleeps between requests.
    factory: Callable[[str, str, str | None], RateSource] = make_source
    _sources: dict[str, RateSource] = field(default_factory=dict)
    last_errors: dict[str, str | None] = field(default_factory=dict)
    last_success: dict[str, datetime] = field(default_factory=dict)

    def run(self, now: datetime) -> dict[str, str | None]:
        """provider -> None when stored, else the error; failures store nothing."""
        out = {p.provider: self._one(p, now) for p in self.providers}
        self.last_success.update({name: now for name, error in out.items() if error is None})
        return out

    def health(self, host: str, now: datetime) -> list[Sample]:
        """Each provider read so far as a collector of its own (``billing/<provider>``) with
        the health series every collector has, so a failing billing API shows on /metrics and
        can be alerted on, not only in the log."""
        out: list[Sample] = []
        for name, error in sorted(self.last_errors.items()):
            labels = {"host": host, "collector": f"billing/{name}"}
            values = {"gpuwatch_collector_success": float(error is None)}
            if name in self.last_success:  # never succeeded: absent, not a 1970 timestamp
                last = self.last_success[name].timestamp()
                values["gpuwatch_collector_last_success_timestamp_seconds"] = last
            out.extend(Sample(metric=m, value=v, labels=labels, ts=now) for m, v in values.items())
        return out

    def _one(self, provider: BillingProviderConfig, now: datetime) -> str | None:
        name = provider.provider
        try:
            rates, records = self._fetch(provider, now)
        except BillingError as exc:
            return self._note(name, str(exc))
        except Exception as exc:  # a source's bug, or an input it did not foresee
            error = f"{name}: unexpected {type(exc).__name__}: {exc}"[:_ERROR_CHARS]
            return self._note(name, error, exc)
        try:
            with self.engine.begin() as conn:
                track_resources(conn, rates, now)
                save_records(conn, records, now)
        except SQLAlchemyError as exc:
            return self._note(name, f"{name}: the database refused the write: {_first(exc)}")
        return self._note(name, None)

    def _fetch(
        self, provider: BillingProviderConfig, now: datetime
    ) -> tuple[list[HourlyRate], list[CostRecord]]:
        """Rates and records, each checked against the bounds of what can be stored."""
        source = self._source(provider)
        rates = source.rates(now)
        records: list[CostRecord] = []
        if isinstance(source, CostSource):
            start = now - timedelta(seconds=provider.lookback_seconds)
            records = source.costs(start, now, now)
        for rate in rates:
            check_rate(rate)
        for record in records:
            check_record(record)
        return rates, records

    def _source(self, provider: BillingProviderConfig) -> RateSource:
        if provider.provider not in self._sources:
            self._sources[provider.provider] = self.factory(
                provider.provider, provider.api_key.reveal(), provider.base_url
            )
        return self._sources[provider.provider]

    def _note(self, provider: str, error: str | None, exc: Exception | None = None) -> str | None:
        before = self.last_errors.get(provider)
        self.last_errors[provider] = error
        if error is None and before is not None:
            log.info("billing source %s recovered", provider)
        elif error is not None and error != before:
            # A traceback only for what no source foresaw: that is a bug to fix.
            log.error("billing source %s failed, nothing stored: %s", provider, error,
                      exc_info=exc)  # fmt: skip
        return error

    def close(self) -> None:
        for source in self._sources.values():
            source.close()
        self._sources.clear()


_ERROR_CHARS = 500


def _first(exc: SQLAlchemyError) -> str:
    # SQLAlchemy's str() appends the SQL and its parameters; the first line is the cause.
    cause = getattr(exc, "orig", None) or exc
    return (str(cause).splitlines() or [type(cause).__name__])[0][:_ERROR_CHARS]


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """Metered cost (rate card x observed uptime) against what providers billed."""

    metered_usd: Decimal
    billed_usd: Decimal
    by_source: dict[str, Decimal]

    @property
    def difference_usd(self) -> Decimal:
        return self.billed_usd - self.metered_usd

    @property
    def difference_ratio(self) -> Decimal | None:
        return None if not self.metered_usd else self.difference_usd / self.metered_usd


def reconcile(
    engine: Engine, metered_usd: Decimal, start: datetime, end: datetime
) -> Reconciliation:
    """Billed USD over [start, end) per source, next to the metered figure of the same window."""
    amounts = billed(engine, start, end)
    usd = {source: amount for (source, currency), amount in amounts.items() if currency == "USD"}
    return Reconciliation(metered_usd, sum(usd.values(), Decimal(0)), usd)
