"""Throwaway PostgreSQL databases for the benchmarks, next to an admin (superuser) URL."""

from __future__ import annotations

from sqlalchemy import create_engine, make_url, text

from agent.storage.db import upgrade_database


def database_url(admin_url: str, name: str) -> str:
    return make_url(admin_url).set(database=name).render_as_string(hide_password=False)


def fresh_database(admin_url: str, name: str) -> str:
    """Database ``name`` made anew (dropped first if there) and upgraded; its URL."""
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    url = database_url(admin_url, name)
    upgrade_database(url)
    return url


def drop_database(admin_url: str, name: str) -> None:
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()
