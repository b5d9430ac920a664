"""The store a `--db` value names: a file path is SQLite (the embedded default), a libpq
connection string (`postgresql://...`, or `key=value` pairs such as `host=/run/pg dbname=xce`)
is PostgreSQL, shared by any number of controller replicas."""

from __future__ import annotations

import re
from pathlib import Path

from xce_controller.store.base import Store
from xce_controller.store.conninfo_text import hide_password

_URL = re.compile(r"^postgres(ql)?://", re.IGNORECASE)
_KEYWORDS = re.compile(r"^\s*[a-z_]+\s*=", re.IGNORECASE)


def is_postgres(db: str) -> bool:
    """A connection string rather than a file (an existing file of that name stays a file)."""
    if _URL.match(db):
        return True
    return bool(_KEYWORDS.match(db)) and not Path(db).exists()


def open_store(db: str, migrate: bool = True) -> Store:
    """The store `db` names, its schema brought up to date when `migrate` (SQLite always is)."""
    if is_postgres(db):
        from xce_controller.store.postgres import PgStore

        return PgStore(db, migrate=migrate)
    from xce_controller.store.sqlite import Store as SqliteStore

    return SqliteStore(Path(db))


def describe(db: str) -> str:
    """`db` fit for a message: a connection string without its password."""
    if not is_postgres(db):
        return db
    return hide_password(db)
