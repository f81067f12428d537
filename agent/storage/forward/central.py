"""Writing forwarded batches into the central PostgreSQL: COPY into a staging table, then one
INSERT ... SELECT that upserts, all in the caller's transaction.

COPY is PostgreSQL's cheapest way in (one statement, one round trip per batch, no per-row
parse and plan); the upsert from the staging table makes a resend replace the rows it sent
before instead of doubling them. Series ids differ between databases: series definitions are
staged the same way, inserted where missing, and the central ids read back by their identity
(a series by host, metric and labels).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Connection

from agent.storage.forward.streams import Ref, Row, Stream
from migrations.schema import rollup_state


class Central:
    """The central side of one forward transaction (``conn`` is a PostgreSQL connection)."""

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self._quote = conn.dialect.identifier_preparer.quote

    def write(self, stream: Stream, rows: Sequence[Row]) -> None:
        """Upsert ``rows`` (the stream's columns, series ids already central) into its table."""
        if not rows:
            return
        names = [c.name for c in stream.columns]
        stage = self._stage(stream.table.name, names, rows)
        cols = ", ".join(self._quote(n) for n in names)
        target = self._quote(stream.table.name)
        if stream.upserts:
            self.conn.exec_driver_sql(
                f"INSERT INTO {target} ({cols}) SELECT {cols} FROM {stage} "
                f"{self._on_conflict(stream, names)}"
            )
            return
        # No unique key to conflict on (a surrogate id): delete the rows' keys, then insert.
        match = " AND ".join(f"t.{self._quote(k)} = s.{self._quote(k)}" for k in stream.key_columns)
        self.conn.exec_driver_sql(f"DELETE FROM {target} t USING {stage} s WHERE {match}")
        self.conn.exec_driver_sql(f"INSERT INTO {target} ({cols}) SELECT {cols} FROM {stage}")

    def _on_conflict(self, stream: Stream, names: Sequence[str]) -> str:
        keys = stream.key_columns
        rest = [n for n in names if n not in keys]
        target = ", ".join(self._quote(k) for k in keys)
        if not rest:
            return f"ON CONFLICT ({target}) DO NOTHING"
        sets = ", ".join(f"{self._quote(n)} = EXCLUDED.{self._quote(n)}" for n in rest)
        return f"ON CONFLICT ({target}) DO UPDATE SET {sets}"

    def map_ids(self, ref: Ref, definitions: Sequence[Row]) -> dict[int, int]:
        """Local id -> central id for ``definitions`` (rows of ``ref.columns``, the local id
        first), inserting the definitions the central database lacks."""
        if not definitions:
            return {}
        stage = self._stage(ref.name, ref.columns, definitions)
        rest = ", ".join(self._quote(c) for c in ref.columns[1:])
        table = self._quote(ref.name)
        self.conn.exec_driver_sql(
            f"INSERT INTO {table} ({rest}) SELECT {rest} FROM {stage} ON CONFLICT DO NOTHING"
        )
        match = " AND ".join(f"c.{self._quote(k)} = s.{self._quote(k)}" for k in ref.identity)
        found = self.conn.exec_driver_sql(
            f"SELECT s.id, c.id FROM {stage} s JOIN {table} c ON {match}"
        )
        return {int(local): int(central) for local, central in found}

    def set_watermarks(self, host: str, marks: dict[str, datetime]) -> None:
        """The host's rollup watermarks (job -> instant) as far as its rows were forwarded:
        reports read hour rows up to the hour watermark and minute rows after it."""
        if not marks:
            return
        # Imported here: a daemon without a central database never loads the dialect (2 MB).
        from sqlalchemy.dialects.postgresql import insert

        rows = [{"host": host, "job": job, "watermark": at} for job, at in marks.items()]
        statement = insert(rollup_state).values(rows)
        self.conn.execute(
            statement.on_conflict_do_update(
                index_elements=["host", "job"], set_={"watermark": statement.excluded.watermark}
            )
        )

    def _stage(self, table: str, names: Sequence[str], rows: Iterable[Row]) -> str:
        """A temporary copy of ``table``'s ``names`` columns (types only, no constraints),
        filled by COPY. Created once per session and emptied at each commit: creating and
        dropping one per forward would churn PostgreSQL's catalogs once per box per minute."""
        stage = self._quote(f"forward_{table}")
        cols = ", ".join(self._quote(n) for n in names)
        self.conn.exec_driver_sql(
            f"CREATE TEMPORARY TABLE IF NOT EXISTS {stage} ON COMMIT DELETE ROWS AS "
            f"SELECT {cols} FROM {self._quote(table)} WITH NO DATA"
        )
        raw: Any = self.conn.connection.dbapi_connection
        with raw.cursor() as cursor, cursor.copy(f"COPY {stage} ({cols}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(row)
        return stage
