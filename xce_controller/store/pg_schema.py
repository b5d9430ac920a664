"""The PostgreSQL store's schema: its migrations, and the version the database records.

Each migration brings the schema from the previous version to its own (never edit a released
one). `settle` runs under an advisory lock, so replicas starting at once migrate once; a
controller refuses a schema newer than it knows, and a schema record that is not one version.
"""

from __future__ import annotations

import logging
from typing import Any

import psycopg

from xce_controller.store.base import SchemaDamaged, SchemaTooNew
from xce_controller.store.pg_connection import one

log = logging.getLogger(__name__)

MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE facts (
        seq BIGINT PRIMARY KEY, kind TEXT NOT NULL, at DOUBLE PRECISION NOT NULL,
        by TEXT NOT NULL, data JSONB NOT NULL,
        committed_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp());
    CREATE INDEX facts_key ON facts ((data->>'key'), seq);
    CREATE INDEX facts_instance ON facts ((data->>'instance_id'), seq) WHERE kind = 'expected';
    CREATE INDEX facts_previous ON facts ((data->>'previous_key'), seq)
        WHERE kind = 'lease_granted';
    CREATE TABLE hosts (key TEXT PRIMARY KEY, data TEXT NOT NULL);
    CREATE TABLE jobs (id BIGINT PRIMARY KEY, data TEXT NOT NULL);
    CREATE UNLOGGED TABLE seen (key TEXT PRIMARY KEY, at DOUBLE PRECISION NOT NULL);
    CREATE TABLE reports (key TEXT PRIMARY KEY, data TEXT NOT NULL);
    CREATE TABLE leases (name TEXT PRIMARY KEY, data TEXT NOT NULL);
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)
MIGRATE_LOCK = 0x7863650002


def settle(cur: psycopg.Cursor[Any], migrate: bool, explicit: bool) -> int:
    """The schema version the store runs on, migrated to SCHEMA_VERSION when `migrate`
    (a version already there only when `explicit`: `xce-controller migrate`)."""
    cur.execute("SELECT pg_advisory_xact_lock(%s)", (MIGRATE_LOCK,))
    cur.execute("SELECT to_regclass('schema_version') IS NOT NULL")
    row = cur.fetchone()
    version = _recorded_version(cur, bool(row and row[0]))
    if version > SCHEMA_VERSION:
        raise SchemaTooNew(
            f"the database has schema version {version}; this controller knows up to "
            f"{SCHEMA_VERSION}: run a newer xce-controller"
        )
    if version == SCHEMA_VERSION or not migrate:
        return version
    if version and not explicit:
        raise SchemaTooNew(
            f"the database has schema version {version}, this controller needs "
            f"{SCHEMA_VERSION}: run `xce-controller migrate` first"
        )
    if version == 0:
        cur.execute("CREATE TABLE schema_version (version INTEGER NOT NULL)")
        cur.execute("INSERT INTO schema_version VALUES (0)")
    for step in range(version, SCHEMA_VERSION):
        cur.execute(MIGRATIONS[step])
        cur.execute("UPDATE schema_version SET version = %s", (step + 1,))
        log.warning("database schema migrated to version %d", step + 1)
    return SCHEMA_VERSION


def _recorded_version(cur: psycopg.Cursor[Any], recorded: bool) -> int:
    """The schema version the database records (0: a new database); SchemaDamaged when the
    record is not one row, or is gone while the store's tables are there."""
    restore = "restore the database from a backup, or fix schema_version by hand"
    if not recorded:
        cur.execute("SELECT to_regclass('facts') IS NOT NULL")
        if one(cur):
            raise SchemaDamaged(
                f"the database holds a store's tables but no schema_version table: {restore}"
            )
        return 0
    cur.execute("SELECT count(*), max(version) FROM schema_version")
    got = cur.fetchone()
    rows, version = (int(got[0]), got[1]) if got else (0, None)
    if rows != 1 or version is None:
        raise SchemaDamaged(f"schema_version holds {rows} rows, not one version: {restore}")
    return int(version)
