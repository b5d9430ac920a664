"""`xce-controller backup`: a consistent copy of the database while the controller runs.

SQLite's online backup copies the pages of one read transaction, so the copy holds every
change committed before it began and none after, even with the controller writing (WAL lets
the reader and the writer run together). Copying the file with `cp` instead can tear: the
newest changes sit in the -wal file until a checkpoint. The copy is written beside its
destination, checked (`PRAGMA integrity_check`), made 0600 (it holds sealed secrets and every
host's history) and renamed into place, so a failed backup never leaves a half file under the
name a restore would take.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import tempfile
from pathlib import Path


class BackupFailed(Exception):
    """The copy could not be made; the message says why in one line. Nothing is left."""


def backup(db: Path, dest: Path) -> int:
    """Copy `db` to `dest`; the number of facts the copy holds."""
    if not db.is_file():
        raise BackupFailed(f"cannot back up {db}: no database there")
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)
    except OSError as exc:
        raise BackupFailed(f"cannot write {dest}: {exc.strerror}") from None
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        os.chmod(tmp, 0o600)
        facts = _copy(db, tmp)
        os.replace(tmp, dest)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    return facts


def _copy(db: Path, tmp: Path) -> int:
    source = target = None
    try:
        source = sqlite3.connect(f"file:{db}?mode=rw", uri=True)  # never creates one
        target = sqlite3.connect(str(tmp))
        source.backup(target)
        check = target.execute("PRAGMA integrity_check").fetchone()[0]
        if check != "ok":
            raise BackupFailed(f"cannot back up {db}: the copy fails its integrity check ({check})")
        facts = int(target.execute("SELECT count(*) FROM facts").fetchone()[0])
        target.execute("PRAGMA journal_mode=DELETE")  # one file: nothing beside it to lose
    except sqlite3.Error as exc:
        raise BackupFailed(f"cannot back up {db}: {exc}") from None
    finally:
        for conn in (source, target):
            if conn is not None:
                conn.close()
    with open(tmp, "rb+") as handle:
        os.fsync(handle.fileno())
    return facts
