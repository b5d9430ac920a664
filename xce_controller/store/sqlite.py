"""SQLite persistence: facts appended in the same transaction as the state they produce.

WAL mode with synchronous=FULL: a change is durable when `commit` returns, and only then is
an answer sent, so `kill -9` loses nothing that was acknowledged. Heartbeat times are not
stored per beat (docs/controller.md says why); they are saved once at a clean stop, for
display only. The last agent report of a decommissioned host is stored, for `to-return`.
Any SQLite failure (a full disk, an I/O error) surfaces as StorageUnavailable with its cause,
after the transaction is rolled back: nothing is half-written. So does a database file deleted
or replaced under the controller (the writes would go to a file no later start reads).
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from xce_controller.core.codec import host_from_json, host_to_json, job_from_json, job_to_json
from xce_controller.core.facts import apply
from xce_controller.core.model import Cluster, Fact
from xce_controller.store.base import (
    FLOOR_ROW,
    Numbered,
    SchemaTooNew,
    StaleState,
    StorageUnavailable,
)

__all__ = ["SCHEMA_VERSION", "StorageUnavailable", "Store"]

SCHEMA = """
CREATE TABLE IF NOT EXISTS facts (
    seq INTEGER PRIMARY KEY, kind TEXT NOT NULL, at REAL NOT NULL, by TEXT NOT NULL,
    data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS hosts (key TEXT PRIMARY KEY, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS jobs (id INTEGER PRIMARY KEY, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS seen (key TEXT PRIMARY KEY, at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS reports (key TEXT PRIMARY KEY, data TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS leases (name TEXT PRIMARY KEY, data TEXT NOT NULL);
"""
# The schema above is version 1. `PRAGMA user_version` holds the version once a migration
# writes one; 0, in every file so far, is version 1.
SCHEMA_VERSION = 1


def private(path: Path) -> None:
    """Create the database file 0600 (it holds sealed secrets and every host's history)."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


class Store:
    shared = False  # one controller process per file

    def __init__(self, path: Path) -> None:
        self.path = path
        private(path)  # before SQLite opens it: its -wal and -shm files take the same mode
        self.db = sqlite3.connect(str(path), isolation_level=None, check_same_thread=False)
        (version,) = self.db.execute("PRAGMA user_version").fetchone()
        if version > SCHEMA_VERSION:
            self.db.close()
            raise SchemaTooNew(
                f"database {path} has schema version {version}; this controller knows up to "
                f"{SCHEMA_VERSION}: run a newer xce-controller"
            )
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript(SCHEMA)
        self.schema_version = max(version, 1)
        for side in ("-wal", "-shm"):  # left 0644 by an older version, say
            with contextlib.suppress(FileNotFoundError):
                os.chmod(f"{path}{side}", 0o600)
        self._identity = self._file_identity()

    def _file_identity(self) -> tuple[int, int]:
        st = os.stat(self.path)
        return st.st_dev, st.st_ino

    def _check_file(self) -> None:
        """Refuse to write into a database file that is no longer at its path: SQLite keeps
        writing to the open (deleted or replaced) file, the answers say stored, and the next
        start finds none of it."""
        try:
            same = self._file_identity() == self._identity
        except OSError as exc:
            raise StorageUnavailable(f"database {self.path} is gone: {exc.strerror}") from exc
        if not same:
            raise StorageUnavailable(f"database {self.path} was replaced by another file")

    def load(self) -> tuple[Cluster, dict[str, float]]:
        """The stored state (from the state tables) and the last heartbeat times."""
        cluster = Cluster()
        hosts = [
            host_from_json(json.loads(data))
            for (data,) in self.db.execute("SELECT data FROM hosts")
        ]
        for host in sorted(hosts, key=lambda h: h.joined_at or 0.0):  # latest name wins
            cluster.put_host(host)
        for (data,) in self.db.execute("SELECT data FROM jobs"):
            cluster.put_job(job_from_json(json.loads(data)))
        cluster.next_job = max(cluster.jobs, default=0) + 1
        (count,) = self.db.execute("SELECT COUNT(*) FROM facts").fetchone()
        cluster.version = int(count)
        seen = {key: at for key, at in self.db.execute("SELECT key, at FROM seen")}
        return cluster, seen

    def facts(self) -> list[Fact]:
        rows = self.db.execute("SELECT kind, at, by, data FROM facts ORDER BY seq")
        return [Fact(kind, at, by, json.loads(data)) for kind, at, by, data in rows]

    def replay(self) -> Cluster:
        """The state rebuilt from the facts alone."""
        cluster = Cluster()
        for fact in self.facts():
            apply(cluster, fact)
        return cluster

    def commit(
        self,
        facts: Iterable[Fact],
        cluster: Cluster,
        hosts: set[str],
        jobs: set[int],
        after: int | None = None,
    ) -> None:
        """Append facts and write the rows they changed, in one durable transaction; with
        `after`, only if the log still ends there (another process may share the file)."""
        rows = (
            [(f.kind, f.at, f.by, json.dumps(f.data, sort_keys=True)) for f in facts],
            [(k, json.dumps(host_to_json(cluster.hosts[k]))) for k in hosts],
            [(i, json.dumps(job_to_json(cluster.jobs[i]))) for i in jobs],
        )
        self._check_file()
        try:
            self.db.execute("BEGIN IMMEDIATE")
            if after is not None and self.last_seq() != after:
                raise StaleState(f"the log moved past {after}")
            self.db.executemany(
                "INSERT INTO facts (kind, at, by, data) VALUES (?, ?, ?, ?)", rows[0]
            )
            self.db.executemany("INSERT OR REPLACE INTO hosts (key, data) VALUES (?, ?)", rows[1])
            self.db.executemany("INSERT OR REPLACE INTO jobs (id, data) VALUES (?, ?)", rows[2])
            self.db.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback()
            raise StorageUnavailable(str(exc)) from exc
        except BaseException:
            self._rollback()
            raise

    def leases(self) -> list[dict[str, Any]]:
        """The stored leases (xce_controller/core/leases.py writes and reads their rows)."""
        rows = self.db.execute("SELECT data FROM leases WHERE name != ?", (FLOOR_ROW,))
        return [json.loads(data) for (data,) in rows]

    def lease_floor(self) -> int:
        """The highest token of the leases forgotten (0: none); a name taken again starts
        above it."""
        row = self.db.execute("SELECT data FROM leases WHERE name = ?", (FLOOR_ROW,)).fetchone()
        return int(json.loads(row[0])["floor"]) if row else 0

    def lease_facts(self) -> list[Fact]:
        """The lease facts, oldest first (the leases rebuilt when their rows are unreadable)."""
        rows = self.db.execute(
            "SELECT kind, at, by, data FROM facts WHERE kind IN (?, ?, ?) ORDER BY seq",
            ("lease_granted", "lease_released", "lease_forgotten"),
        )
        return [Fact(kind, at, by, json.loads(data)) for kind, at, by, data in rows]

    def commit_leases(
        self,
        facts: Iterable[Fact],
        rows: Iterable[dict[str, Any]],
        forgotten: Iterable[str] = (),
        floor: int = 0,
    ) -> None:
        """Append lease facts, write the lease rows they changed and delete the forgotten
        ones (keeping the token floor), in one transaction."""
        fact_rows = [(f.kind, f.at, f.by, json.dumps(f.data, sort_keys=True)) for f in facts]
        lease_rows = [(r["name"], json.dumps(r, sort_keys=True)) for r in rows]
        gone = [(name,) for name in forgotten]
        if gone:
            lease_rows.append((FLOOR_ROW, json.dumps({"floor": floor})))
        try:
            self.db.execute("BEGIN IMMEDIATE")
            self.db.executemany(
                "INSERT INTO facts (kind, at, by, data) VALUES (?, ?, ?, ?)", fact_rows
            )
            self.db.executemany("DELETE FROM leases WHERE name = ?", gone)
            self.db.executemany(
                "INSERT OR REPLACE INTO leases (name, data) VALUES (?, ?)", lease_rows
            )
            self.db.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback()
            raise StorageUnavailable(str(exc)) from exc
        except BaseException:
            self._rollback()
            raise

    def _rollback(self) -> None:
        if self.db.in_transaction:  # SQLite may already have rolled back (SQLITE_FULL)
            # The cause is the error being raised; SQLite also rolls back on its own.
            with contextlib.suppress(sqlite3.Error):
                self.db.execute("ROLLBACK")

    def _write(self, sql: str, rows: list[tuple[object, ...]]) -> None:
        self._check_file()
        try:
            self.db.execute("BEGIN IMMEDIATE")
            self.db.executemany(sql, rows)
            self.db.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback()
            raise StorageUnavailable(str(exc)) from exc

    def save_seen(self, seen: dict[str, float]) -> None:
        """All heartbeat times in one transaction (at a clean stop)."""
        self._write("INSERT OR REPLACE INTO seen (key, at) VALUES (?, ?)", list(seen.items()))

    def save_report(self, key: str, report: dict[str, Any]) -> None:
        self._write(
            "INSERT OR REPLACE INTO reports (key, data) VALUES (?, ?)",
            [(key, json.dumps(report, sort_keys=True))],
        )

    def reports(self) -> dict[str, dict[str, Any]]:
        rows = self.db.execute("SELECT key, data FROM reports")
        return {key: json.loads(data) for key, data in rows}

    def facts_after(self, seq: int) -> list[Numbered]:
        rows = self.db.execute(
            "SELECT seq, kind, at, by, data FROM facts WHERE seq > ? ORDER BY seq", (seq,)
        )
        return [(int(n), Fact(k, at, by, json.loads(d))) for n, k, at, by, d in rows]

    def events_after(self, since: int, keys: set[str] | None, limit: int) -> list[Numbered]:
        if keys is None:
            rows = self.db.execute(
                "SELECT seq, kind, at, by, data FROM facts WHERE seq > ? ORDER BY seq LIMIT ?",
                (since, limit),
            ).fetchall()
        else:
            # SQLite picks the host's facts (and every fact of the jobs ever placed on it);
            # far cheaper than decoding every fact in Python.
            wanted = json.dumps(sorted(keys))
            rows = self.db.execute(
                "SELECT seq, kind, at, by, data FROM facts WHERE seq > ?1 AND ("
                "json_extract(data, '$.key') IN (SELECT value FROM json_each(?2)) OR "
                "(kind = 'expected' AND json_extract(data, '$.instance_id') IN "
                "(SELECT value FROM json_each(?2))) OR "
                "(kind = 'lease_granted' AND json_extract(data, '$.previous_key') IN "
                "(SELECT value FROM json_each(?2))) OR "
                "(kind GLOB 'job_*' AND json_extract(data, '$.id') IN ("
                "SELECT json_extract(data, '$.id') FROM facts WHERE kind = 'job_assigned' "
                "AND json_extract(data, '$.key') IN (SELECT value FROM json_each(?2)))))"
                " ORDER BY seq LIMIT ?3",
                (since, wanted, limit),
            ).fetchall()
        return [(int(n), Fact(k, at, by, json.loads(d))) for n, k, at, by, d in rows]

    def last_seq(self) -> int:
        (seq,) = self.db.execute("SELECT COALESCE(MAX(seq), 0) FROM facts").fetchone()
        return int(seq)

    def close(self) -> None:
        self.db.close()
