"""`xce-controller migrate` and `copy-store`: the store's schema and its move to PostgreSQL;
and the check that keeps the SQLite-only verbs (backup, restore) off a PostgreSQL store.

`migrate` brings a store's schema to the version this controller knows (a controller refuses
to start on a newer one). `copy-store` moves a SQLite store's facts and state into an empty
PostgreSQL database in one transaction, then checks it: the facts replayed there must rebuild
exactly the hosts and jobs copied, which must be the source's. The source is only read
(store/sqlite_source.py); a held lease gets one TTL from the copy (store/postgres.py).
"""

from __future__ import annotations

import sqlite3
import tempfile
from pathlib import Path
from typing import Any

import click

from xce_controller.core import leases
from xce_controller.core.codec import host_to_json, job_to_json
from xce_controller.core.model import Cluster
from xce_controller.store.base import SchemaTooNew, StorageUnavailable
from xce_controller.store.open import describe, is_postgres
from xce_protocol.errors import UsageError, XceError


@click.command()
@click.option("--db", required=True, help="SQLite file or PostgreSQL connection string.")
def migrate(db: str) -> None:
    """Bring the store's schema up to this controller's version."""
    try:
        if is_postgres(db):
            from xce_controller.store.postgres import SCHEMA_VERSION, PgStore

            before = _pg_version(db)
            PgStore(db, migrate=True, explicit=True).close()
        else:
            from xce_controller.store.sqlite import SCHEMA_VERSION, Store
            from xce_controller.store.sqlite_source import schema_version

            before = schema_version(Path(db))
            Store(Path(db)).close()
    except (StorageUnavailable, SchemaTooNew, sqlite3.Error) as exc:
        raise XceError(f"{describe(db)}: {exc}") from exc
    if before == SCHEMA_VERSION:
        click.echo(f"{describe(db)}: already at schema version {SCHEMA_VERSION}")
    elif before <= 0:  # said, so that a mistyped path or database is seen for what it made
        click.echo(f"{describe(db)}: a new store, schema version {SCHEMA_VERSION}")
    else:
        click.echo(f"{describe(db)}: schema version {before} -> {SCHEMA_VERSION}")


# What the database's own tools do instead, for a verb that copies a SQLite file.
PG_INSTEAD = {
    "backup": "take a PostgreSQL backup with pg_dump -Fc",
    "restore": "restore a PostgreSQL backup with pg_restore into an empty database, every "
    "replica stopped",
}


def sqlite_file(db: str, verb: str) -> Path:
    """--db of a verb that copies a SQLite file; a PostgreSQL connection string is one line
    naming the database's own tool instead (a Path would also have made `//` one `/`)."""
    if is_postgres(db):
        raise XceError(
            f"{verb} copies a SQLite store, and --db {describe(db)} is PostgreSQL: "
            f"{PG_INSTEAD[verb]} (docs/operations.md, Backup and restore)"
        )
    return Path(db)


def _pg_version(db: str) -> int:
    from xce_controller.store.postgres import PgStore

    store = PgStore(db, migrate=False)
    try:
        return store.version
    finally:
        store.close()


@click.command("copy-store")
@click.option("--from", "source", required=True, type=click.Path(path_type=Path))
@click.option("--to", "target", required=True, help="PostgreSQL connection string.")
def copy_store(source: Path, target: str) -> None:
    """Copy a SQLite store into an empty PostgreSQL database, checked by replay."""
    if not is_postgres(target):
        raise UsageError(f"--to: expected a PostgreSQL connection string, got {target!r}")
    if not source.is_file():
        raise UsageError(f"--from: {source}: no such database file")
    with tempfile.TemporaryDirectory(prefix="xce-copy-store-") as scratch:
        copied = _copy(_read_source(source, Path(scratch) / "source.db"), target)
    click.echo(f"{copied} to {describe(target)}; replay matches")


def _read_source(source: Path, scratch: Path) -> Path:
    """The source store copied into `scratch`, the source only read: a file that is not a
    store is refused as it is, and a store is left byte for byte as it was."""
    from xce_controller.store.sqlite_source import NotReadable, in_use, snapshot

    try:  # a serving controller would go on writing what the copy never gets
        if in_use(source):
            raise XceError(f"{source} is open in another process (stop its controller)")
        snapshot(source, scratch)
    except NotReadable as exc:
        raise XceError(str(exc)) from None
    except sqlite3.Error as exc:
        raise XceError(f"--from: {source}: {exc}") from exc
    except OSError as exc:
        raise XceError(f"--from: {source}: {exc.strerror or exc}") from exc
    return scratch


def _copy(snapshot: Path, target: str) -> str:
    """Copy the store in `snapshot` into the database `target`, then check it by replay;
    what was copied, in words."""
    from xce_controller.lease_desk import stored
    from xce_controller.store.postgres import PgStore
    from xce_controller.store.sqlite import Store

    src = Store(snapshot)
    try:
        dst = PgStore(target)
    except (StorageUnavailable, SchemaTooNew) as exc:
        src.close()
        raise XceError(f"{describe(target)}: {exc}") from exc
    try:
        cluster, seen = src.load()
        numbered = src.facts_after(0)
        book = stored(src)  # rebuilt from the lease facts if a row is unreadable
        rows = [leases.to_row(le) for le in book.leases.values()]
        floor = max(book.floor, src.lease_floor())
        dst.copy_in(numbered, cluster, rows, src.reports(), seen, floor)
        _check(src.replay(), cluster, "the source's facts do not rebuild its own state")
        copied, _ = dst.load()
        _check(copied, cluster, "the copied state differs from the source's")
        _check(dst.replay(), cluster, "the copied facts do not rebuild the copied state")
    except StorageUnavailable as exc:
        raise XceError(f"{describe(target)}: {exc.cause}") from exc
    finally:
        src.close()
        dst.close()
    return f"copied {len(numbered)} facts, {len(cluster.hosts)} hosts, {len(cluster.jobs)} jobs"


def _check(got: Cluster, want: Cluster, what: str) -> None:
    if _state(got) != _state(want):
        raise XceError(what)


def _state(cluster: Cluster) -> tuple[dict[str, Any], dict[int, Any]]:
    return (
        {k: host_to_json(h) for k, h in cluster.hosts.items()},
        {i: job_to_json(j) for i, j in cluster.jobs.items()},
    )
