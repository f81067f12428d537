"""Alembic environment, run by ``migrations.runner`` (never from an alembic.ini on disk).

The caller passes an open connection through ``config.attributes["connection"]`` (MLflow's
pattern), so migrations run inside the caller's engine and transaction handling.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from migrations.schema import metadata


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=metadata,
        # SQLite cannot ALTER most things; batch mode rebuilds the table instead.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def main() -> None:
    connection = context.config.attributes.get("connection")
    if connection is None:
        raise RuntimeError("migrations.env expects a connection in config.attributes['connection']")
    _run(connection)


main()
