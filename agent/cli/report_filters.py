"""`report --host` and `--model` name what the database holds: a name it never stored would
give a report of zeros that reads as if that host or model had been idle, so it is an error
that lists the names there are."""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from foundation.errors import GpuwatchError
from foundation.printable import printable

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection, Engine

LISTED = 20  # a fleet's database may hold hundreds: the first ones, then how many more
# Every engine collector maps its generated-token counter here, with the `model` label.
MODEL_SERIES = "gpuwatch_engine_generation_tokens_total"


class UnknownFilterError(GpuwatchError):
    """A --host or --model that the database has never stored anything for."""


def check_filters(engine: Engine, hosts: Sequence[str], models: Sequence[str]) -> None:
    """Raise UnknownFilterError naming the first flag whose value is unknown."""
    if not hosts and not models:
        return
    with engine.connect() as conn:
        if hosts:
            _check("--host", "host", hosts, _hosts(conn))
        if models:
            _check("--model", "model", models, _models(conn))


def _hosts(conn: Connection) -> list[str]:
    from sqlalchemy import select

    from migrations.schema import series

    return sorted(conn.execute(select(series.c.host).distinct()).scalars())


def _models(conn: Connection) -> list[str]:
    from sqlalchemy import select

    from migrations.schema import series

    rows = conn.execute(select(series.c.labels).where(series.c.metric == MODEL_SERIES).distinct())
    return sorted({json.loads(labels).get("model", "") for labels in rows.scalars()} - {""})


def _check(flag: str, noun: str, asked: Sequence[str], known: Sequence[str]) -> None:
    unknown = [name for name in asked if name not in known]
    if not unknown:
        return
    names = ", ".join(repr(name) for name in unknown)
    there = f"({noun}s: {_some(known)})" if known else f"(no {noun} has stored anything yet)"
    plural = "s" if len(unknown) > 1 else ""
    raise UnknownFilterError(
        printable(f"{flag}: no {noun}{plural} {names} in the database {there}")
    )


def _some(names: Iterable[str]) -> str:
    listed = list(names)
    more = len(listed) - LISTED
    return ", ".join(listed[:LISTED]) + (f" and {more} more" if more > 0 else "")
