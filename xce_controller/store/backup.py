"""Backup and restore of the SQLite store (`xce-controller backup` and `restore`).

A backup is taken online, while a controller serves and commits: SQLite's backup API copies
the database in one step inside one read transaction, so the copy is one consistent moment
(a commit is in it whole or not at all) and writers are not held up (WAL mode). The copy is
written beside its destination, checked (SQLite's integrity check, then the state rebuilt
from its facts alone must equal its state tables), made durable, and only then renamed into
place: a failed or interrupted backup leaves the previous one as it was.

A restore needs the controller stopped (it keeps the state in memory and would write it back
over the restored file): a database another process has open is refused. The backup is
checked the same way first; the database it replaces is kept beside it (`.before-restore`),
and the copy goes in through the backup API, which writes through SQLite's own locking and
journal, so no stale -wal file of the old database is ever applied to the new one.

The tokens `serve` generates (DB.admin-token, DB.join-token) are files beside the database,
not in it: back them up with it, or set them in the cluster config.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from dataclasses import dataclass
from pathlib import Path

from xce_controller.store.sqlite import Store, private

BEFORE_RESTORE = ".before-restore"


class BackupError(Exception):
    """A backup or restore that did not happen; the message says why in one line."""


@dataclass(frozen=True)
class Checked:
    facts: int
    hosts: int
    jobs: int

    def __str__(self) -> str:
        return f"{self.facts} facts, {self.hosts} hosts, {self.jobs} jobs; replay equal"


def backup(db: Path, out: Path) -> Checked:
    """Copy the store at `db` to `out` while it may be in use; the copy's check."""
    if not db.is_file():
        raise BackupError(f"--db {db}: no such database file")
    if out.exists() and out.resolve() == db.resolve():
        raise BackupError(f"{out}: is the database itself")
    partial = out.with_name(out.name + ".partial")
    _remove(partial)
    try:
        private(partial)
        _copy(_open(db, "ro"), partial)
        checked = check(partial)
        _single_file(partial)
        _fsync(partial)
        os.replace(partial, out)
        _fsync(out.parent)
    except (OSError, sqlite3.Error) as exc:
        _remove(partial)
        raise BackupError(f"backup of {db} to {out} failed: {_why(exc)}") from exc
    except BackupError:
        _remove(partial)
        raise
    return checked


def restore(source: Path, db: Path) -> Checked:
    """Put the backup `source` in place of the store at `db` (its controller stopped)."""
    if not source.is_file():
        raise BackupError(f"{source}: no such backup file")
    checked = check(source, copy_first=True)
    try:
        if db.exists():
            refuse_if_open(db)
            kept = db.with_name(db.name + BEFORE_RESTORE)
            _remove(kept)
            private(kept)
            _copy(_open(db, "ro"), kept)
            _fsync(kept)
        else:
            private(db)
        target = sqlite3.connect(str(db), isolation_level=None, timeout=1)
        try:
            _open(source, "ro").backup(target)
        finally:
            target.close()
        _fsync(db)
    except (OSError, sqlite3.Error) as exc:
        raise BackupError(f"restore of {db} from {source} failed: {_why(exc)}") from exc
    return checked


def check(path: Path, copy_first: bool = False) -> Checked:
    """Integrity, then replay: the facts alone must rebuild the state tables exactly.

    `copy_first`: check a private copy (a restore reads its source without writing to it)."""
    if copy_first:
        scratch = path.with_name(path.name + ".check")
        _remove(scratch)
        try:
            private(scratch)
            _copy(_open(path, "ro"), scratch)
            return check(scratch)
        except (OSError, sqlite3.Error) as exc:
            raise BackupError(f"{path}: not a readable store ({_why(exc)})") from exc
        finally:
            _remove(scratch)
    conn = _open(path, "rw")
    try:
        (verdict,) = conn.execute("PRAGMA integrity_check").fetchone()
    finally:
        conn.close()
    if verdict != "ok":
        raise BackupError(f"{path}: integrity check failed: {str(verdict)[:200]}")
    store = Store(path)
    try:
        stored, _ = store.load()
        replayed = store.replay()
        facts = len(store.facts())
    except (ValueError, KeyError, TypeError) as exc:  # rows or facts the codec cannot read
        raise BackupError(f"{path}: unreadable rows ({type(exc).__name__}: {exc})") from exc
    finally:
        store.close()
    if stored.hosts != replayed.hosts or stored.jobs != replayed.jobs:
        raise BackupError(f"{path}: its state differs from the replay of its facts")
    return Checked(facts, len(stored.hosts), len(stored.jobs))


def refuse_if_open(db: Path) -> None:
    """A WAL database leaves WAL mode only when no other connection has it open (a serving
    controller): restore and copy-store need its controller stopped."""
    conn = sqlite3.connect(str(db), isolation_level=None, timeout=1)
    try:
        (mode,) = conn.execute("PRAGMA journal_mode=DELETE").fetchone()
    except sqlite3.OperationalError as exc:
        raise BackupError(f"{db} is open in another process (stop its controller): {exc}") from exc
    finally:
        conn.close()
    if mode != "delete":
        raise BackupError(f"{db} is open in another process (stop its controller)")


def _single_file(path: Path) -> None:
    """Out of WAL mode: the copy is one self-contained file, read without side files."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=DELETE")
    finally:
        conn.close()


def _open(path: Path, mode: str) -> sqlite3.Connection:
    return sqlite3.connect(f"file:{path}?mode={mode}", uri=True, isolation_level=None, timeout=5)


def _copy(source: sqlite3.Connection, dest: Path) -> None:
    target = sqlite3.connect(str(dest), isolation_level=None)
    try:
        source.backup(target)  # every page in one step: one read transaction, one moment
    finally:
        target.close()
        source.close()


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _remove(path: Path) -> None:
    for side in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}{side}")


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.strerror}" + (f": {exc.filename}" if exc.filename else "")
    return str(exc)
