"""The fleet-wide cost signals: computed once a minute by the fleet leader, read by everyone.

Recomputing the whole fleet's cost per million tokens over five windows on every daemon each
minute would cost the central database in proportion to the fleet squared; the leader computes
them once (:func:`agent.cost.signals.fleet_samples`) and replaces the ``fleet_signals`` rows in
one transaction, and each daemon reads those few rows for its /metrics, with its own ``host``
label. Figures older than ``STALE_AFTER`` (no leader for a while) are left out rather than
shown as current: absent, never stale-but-plausible.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta

from sqlalchemy import Engine, delete, insert, select

from agent.config.settings import Config
from agent.cost.signals import fleet_samples
from collectors.base import Sample
from migrations.schema import fleet_signals

STALE_AFTER = timedelta(minutes=10)


def publish(engine: Engine, config: Config, now: datetime) -> int:
    """Compute the fleet-wide signals and store them (the leader, once a minute)."""
    samples = fleet_samples(engine, config, now)
    store(engine, samples, config.host, now)
    return len(samples)


def store(engine: Engine, samples: Sequence[Sample], by: str, now: datetime) -> None:
    rows = [
        {"metric": s.metric, "labels": _labels(s), "value": s.value, "computed_at": now,
         "computed_by": by}
        for s in samples
    ]  # fmt: skip
    with engine.begin() as conn:
        conn.execute(delete(fleet_signals))  # a model gone from every window is gone here too
        if rows:
            conn.execute(insert(fleet_signals), rows)


def read(engine: Engine, host: str, now: datetime) -> list[Sample]:
    """The stored fleet-wide signals as this host's /metrics samples; stale ones left out."""
    t = fleet_signals.c
    query = select(t.metric, t.labels, t.value).where(t.computed_at >= now - STALE_AFTER)
    with engine.connect() as conn:
        rows = conn.execute(query.order_by(t.metric, t.labels)).all()
    return [
        Sample(metric=metric, value=value, labels={"host": host, **json.loads(labels)}, ts=now)
        for metric, labels, value in rows
    ]


def _labels(sample: Sample) -> str:
    return json.dumps(dict(sample.labels), sort_keys=True, separators=(",", ":"))
