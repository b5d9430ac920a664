"""A SQLite store read without writing to it: the source of `xce-controller copy-store`.

Opening a file with `Store` makes it a store (it creates the schema, sets WAL mode and mode
0600), which is right for a controller and wrong for a copy's source: a file that is not a
store must be refused as it is, and a store must be left byte for byte as it was. So the
source is checked for another process first without a lock taken on it, read through a
read-only connection, and copied whole (SQLite's backup API, one read transaction) into a
scratch file that the copy then reads with the ordinary `Store`.
"""

from __future__ import annotations

import fcntl
import os
import sqlite3
from pathlib import Path

from xce_controller.store.sqlite import SCHEMA_VERSION, private

# The tables every controller store has had since the first release (later ones, such as
# leases, are created when a store is opened, so an older store may lack them).
TABLES = ("facts", "hosts", "jobs", "seen")
# SQLite's unix VFS: every connection to a WAL database holds a read lock on this byte of
# the -shm file for as long as it is open (the "DMS" lock, sqlite.org/walformat.html).
SHM_DMS_BYTE = 128


class NotReadable(Exception):
    """A source that is not copied; the message says why in one line."""


def in_use(db: Path) -> bool:
    """Whether another process has the store open (a controller serving from it), told by a
    lock tried and let go at once, never by a write. Call it before this process opens `db`
    with SQLite: closing any descriptor of the -shm file drops this process's locks on it."""
    try:
        fd = os.open(f"{db}-shm", os.O_RDWR)
    except FileNotFoundError:
        return False  # no connection in WAL mode has it open: each one maps the -shm file
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, SHM_DMS_BYTE)
    except OSError:
        return True
    else:
        fcntl.lockf(fd, fcntl.LOCK_UN, 1, SHM_DMS_BYTE)
        return False
    finally:
        os.close(fd)


def snapshot(db: Path, into: Path) -> None:
    """Copy the store at `db` into the new file `into` (mode 0600), reading `db` only;
    NotReadable for a file that is not a store of a version this controller reads."""
    source = sqlite3.connect(_read_only_uri(db), uri=True, isolation_level=None)
    try:
        _check_is_store(source, db)
        private(into)
        target = sqlite3.connect(str(into), isolation_level=None)
        try:
            source.backup(target)  # every page in one step: one read transaction, one moment
        finally:
            target.close()
    finally:
        source.close()


def schema_version(db: Path) -> int:
    """The schema version of the store at `db` (user_version 0 is version 1), reading `db`
    only; 0 when there is none yet (no file, or not the store's tables)."""
    if not db.exists():
        return 0
    conn = sqlite3.connect(_read_only_uri(db), uri=True, isolation_level=None)
    try:
        found = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
        if any(t not in found for t in TABLES):
            return 0
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        return max(1, int(version))
    finally:
        conn.close()


def _read_only_uri(db: Path) -> str:
    """A store stopped cleanly is one file (the last connection removes its -wal): read it
    as immutable, so that not even SQLite's side files appear beside it. A -wal left by a
    crash holds committed transactions, so it is read with it (mode=ro)."""
    wal = Path(f"{db}-wal").exists()
    return db.absolute().as_uri() + ("?mode=ro" if wal else "?immutable=1")


def _check_is_store(conn: sqlite3.Connection, db: Path) -> None:
    found = {name for (name,) in conn.execute("SELECT name FROM sqlite_master")}
    missing = [t for t in TABLES if t not in found]
    if missing:
        what = "an empty file" if db.stat().st_size == 0 else f"no table {', '.join(missing)}"
        raise NotReadable(f"--from: {db}: not a controller store ({what})")
    (version,) = conn.execute("PRAGMA user_version").fetchone()
    if version > SCHEMA_VERSION:
        raise NotReadable(
            f"--from: {db}: schema version {version}; this controller knows up to "
            f"{SCHEMA_VERSION}: run a newer xce-controller"
        )
