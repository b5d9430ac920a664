"""PostgreSQL persistence: one database shared by any number of controller replicas.

The same tables as the SQLite store, plus what sharing needs. Appends are serialised by a
transaction-scoped advisory lock taken before the log's head is read, so sequence numbers are
given in commit order without gaps: a follower reading by sequence number can never pass a
fact that commits later (sequence values taken at insert, not at commit, allow exactly that).
A commit may name the head it was decided on (`after`); if another replica appended since, it
is refused (StaleState) and nothing is stored, so every decision is made on the whole log.
Each commit sends one NOTIFY carrying only the new head; heartbeats never do: they update an
UNLOGGED table (`seen`), whose marker row ('' key) tells when that table last started empty
(a first start, or a crash or failover that emptied it). Times come from the database's clock.
Any database failure surfaces as StorageUnavailable with the server's words, after rollback.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.types.json import Jsonb
from psycopg_pool import ConnectionPool

from xce_controller.core.codec import host_from_json, host_to_json, job_from_json, job_to_json
from xce_controller.core.facts import apply
from xce_controller.core.model import Cluster, Fact
from xce_controller.store import pg_copy, pg_schema
from xce_controller.store.base import (
    FLOOR_ROW,
    LockBusy,
    Numbered,
    OutcomeUnknown,
    StaleState,
    StorageUnavailable,
)
from xce_controller.store.conninfo_text import scrub
from xce_controller.store.lock_gate import PROBE_SQL, LockGate
from xce_controller.store.pg_background import Beats, Outage
from xce_controller.store.pg_connection import (
    CONNECT_TIMEOUT,
    DEADLINE,
    LOCK_TIMEOUT,
    LONG,
    configure,
    one,
    snapshot,
    unreachable,
    why,
    with_tcp_bounds,
)
from xce_controller.store.pg_copy import Content
from xce_controller.store.pg_deadline import Watchdog
from xce_controller.store.pg_listener import CHANNEL, Listener

log = logging.getLogger(__name__)
SCHEMA_VERSION = pg_schema.SCHEMA_VERSION

LOCK_NOT_AVAILABLE = "55P03"  # the lock timeout passed (pg_connection.LOCK_TIMEOUT)
APPEND_LOCK = pg_copy.APPEND_LOCK  # pg_advisory_xact_lock key: one appender at a time
MARKER = pg_copy.MARKER  # the `seen` row that dates the table itself


class PgStore:
    shared = True

    def __init__(self, conninfo: str, migrate: bool = True, explicit: bool = False) -> None:
        given, self.conninfo = conninfo, with_tcp_bounds(conninfo)
        conninfo = self.conninfo
        self.watchdog = Watchdog()
        try:  # one direct connection first: its error names the cause; the pool's would not
            psycopg.connect(conninfo, connect_timeout=int(CONNECT_TIMEOUT)).close()
        except psycopg.Error as exc:
            # A host that could not be resolved is quoted, and with an unescaped `@` in a
            # URI's password that host is the password's rest: its pieces are those of the
            # string as given, not as libpq rewrote it.
            raise StorageUnavailable(scrub(why(exc), given, conninfo)) from exc
        self.pool = ConnectionPool(
            conninfo,
            min_size=1,
            max_size=4,
            timeout=CONNECT_TIMEOUT,
            # The pool retries a lost connection with a doubling delay (1, 2, 4, 8, 16 s...):
            # after a 20 s failover its next try came 11 s after the new primary was up.
            # Giving up after a few seconds instead leaves reconnection to demand (the next
            # request grows the pool at once), so writes resume within ~2 s of the promotion.
            reconnect_timeout=CONNECT_TIMEOUT,
            kwargs={"autocommit": True},  # transactions are explicit, isolation level too
            configure=configure,
            open=False,
        )
        self.pool.open(wait=True, timeout=CONNECT_TIMEOUT)
        self.outage = Outage(self._probe, self.pool.check)
        self.gate = LockGate()
        try:
            self.version = self._schema(migrate, explicit)
        except BaseException:
            self.pool.close()
            self.watchdog.close()
            raise
        self.beats = Beats(self._write_seen)

    # --- schema -------------------------------------------------------------------------
    def _schema(self, migrate: bool, explicit: bool) -> int:
        with self._tx(limit=LONG) as cur:
            return pg_schema.settle(cur, migrate, explicit)

    # --- plumbing -----------------------------------------------------------------------
    @contextmanager
    def _tx(
        self,
        read_only: bool = False,
        alone: bool = False,
        limit: float | None = DEADLINE,
        gated: bool = False,
    ) -> Iterator[psycopg.Cursor[Any]]:
        """One transaction, its connection cut past `limit` seconds without an answer; any
        database failure as StorageUnavailable after rollback (OutcomeUnknown when the
        connection was lost with the COMMIT in flight). While the database is known
        unreachable, at once (pg_background.Outage). `gated`: a change made on the event
        loop, whose lock waits go through the gate (lock_gate.py)."""
        if self.outage.cause:
            raise StorageUnavailable(self.outage.cause)
        probing = self.gate.enter() if gated else False
        cut = [False]
        committing = False
        wait = CONNECT_TIMEOUT if limit is None else min(limit, CONNECT_TIMEOUT)
        try:
            with (
                self.pool.connection(timeout=wait) as conn,
                self.watchdog.bound(conn.fileno(), limit) as cut,
            ):
                if alone:  # one statement: its own snapshot, one round trip (no BEGIN/END)
                    with conn.cursor() as cur:
                        yield cur
                    return
                if read_only:
                    yield from snapshot(conn)
                    return
                with conn.transaction():
                    with conn.cursor() as cur:
                        if probing:
                            cur.execute(PROBE_SQL)
                        yield cur
                    committing = True  # what fails from here on is the COMMIT itself
            if gated:
                self.gate.went_through(probing)
        except psycopg.Error as exc:
            if exc.sqlstate == LOCK_NOT_AVAILABLE and not committing:
                if gated:
                    self.gate.ran_out(probing)
                raise LockBusy(f"a lock was not granted within {LOCK_TIMEOUT}") from exc
            lost = cut[0] or unreachable(exc)
            cause = f"the database did not answer within {limit:.0f} s" if cut[0] else why(exc)
            if lost:
                self.outage.begin(cause)
            if lost and committing:
                raise OutcomeUnknown(cause) from exc
            raise StorageUnavailable(cause) from exc
        except Exception as exc:  # the pool's own timeout: no connection could be had
            if type(exc).__module__.startswith("psycopg_pool"):
                self.outage.begin(f"no database connection: {exc}")
                raise StorageUnavailable(f"no database connection: {exc}") from exc
            raise

    def _probe(self) -> None:
        """From the outage's thread: raises while the database is unreachable or does not
        answer. Once it is back, the pool drops the connections the outage broke (the
        outage's `after`), so few calls meet one."""
        conn = psycopg.connect(self.conninfo, connect_timeout=int(CONNECT_TIMEOUT))
        with conn, self.watchdog.bound(conn.fileno(), DEADLINE):
            conn.execute("SELECT 1")

    def _rows(
        self, sql: str, params: Any = (), limit: float | None = DEADLINE
    ) -> list[tuple[Any, ...]]:
        """One reading statement. A replica catches up before each request (a heartbeat
        too): one round trip for it, where a transaction around it took three."""
        with self._tx(alone=True, limit=limit) as cur:
            cur.execute(sql, params)
            return cur.fetchall()

    # --- state --------------------------------------------------------------------------
    def load(self) -> tuple[Cluster, dict[str, float]]:
        """The stored state and heartbeat times, read from one snapshot."""
        cluster = Cluster()
        with self._tx(read_only=True, limit=LONG) as cur:
            cur.execute("SELECT data FROM hosts")
            hosts = [host_from_json(json.loads(data)) for (data,) in cur.fetchall()]
            cur.execute("SELECT data FROM jobs")
            jobs = [job_from_json(json.loads(data)) for (data,) in cur.fetchall()]
            cur.execute("SELECT COALESCE(MAX(seq), 0) FROM facts")
            head = one(cur)
            cur.execute("SELECT key, at FROM seen WHERE key <> ''")
            seen = {str(key): float(at) for key, at in cur.fetchall()}
        for host in sorted(hosts, key=lambda h: h.joined_at or 0.0):  # latest name wins
            cluster.put_host(host)
        for job in jobs:
            cluster.put_job(job)
        cluster.next_job = max(cluster.jobs, default=0) + 1
        cluster.version = int(head)  # appends are gapless: the head is the count
        return cluster, seen

    def facts(self) -> list[Fact]:
        rows = self._rows("SELECT kind, at, by, data FROM facts ORDER BY seq", limit=None)
        return [Fact(k, at, by, d) for k, at, by, d in rows]

    def replay(self) -> Cluster:
        cluster = Cluster()
        for fact in self.facts():
            apply(cluster, fact)
        return cluster

    def facts_after(self, seq: int) -> list[Numbered]:
        rows = self._rows(
            "SELECT seq, kind, at, by, data FROM facts WHERE seq > %s ORDER BY seq", (seq,)
        )
        return [(int(n), Fact(k, at, by, d)) for n, k, at, by, d in rows]

    def events_after(self, since: int, keys: set[str] | None, limit: int) -> list[Numbered]:
        if keys is None:
            rows = self._rows(
                "SELECT seq, kind, at, by, data FROM facts WHERE seq > %s ORDER BY seq LIMIT %s",
                (since, limit),
            )
        else:
            wanted = sorted(keys)
            rows = self._rows(
                "SELECT seq, kind, at, by, data FROM facts WHERE seq > %(since)s AND ("
                "data->>'key' = ANY(%(keys)s) OR "
                "(kind = 'expected' AND data->>'instance_id' = ANY(%(keys)s)) OR "
                "(kind = 'lease_granted' AND data->>'previous_key' = ANY(%(keys)s)) OR "
                "(kind LIKE 'job\\_%%' AND data->'id' IN ("
                "SELECT data->'id' FROM facts WHERE kind = 'job_assigned' "
                "AND data->>'key' = ANY(%(keys)s))))"
                " ORDER BY seq LIMIT %(limit)s",
                {"since": since, "keys": wanted, "limit": limit},
            )
        return [(int(n), Fact(k, at, by, d)) for n, k, at, by, d in rows]

    def last_seq(self) -> int:
        return int(self._rows("SELECT COALESCE(MAX(seq), 0) FROM facts")[0][0])

    def _append(self, cur: psycopg.Cursor[Any], facts: list[Fact], after: int | None) -> None:
        """Append under the append lock, numbered from the head; then one NOTIFY."""
        cur.execute("SELECT pg_advisory_xact_lock(%s)", (APPEND_LOCK,))
        cur.execute("SELECT COALESCE(MAX(seq), 0) FROM facts")
        head = one(cur)
        if after is not None and head != after:
            raise StaleState(f"the log is at {head}, the change was decided at {after}")
        if not facts:
            return
        cur.executemany(
            "INSERT INTO facts (seq, kind, at, by, data) VALUES (%s, %s, %s, %s, %s)",
            [(head + i, f.kind, f.at, f.by, Jsonb(f.data)) for i, f in enumerate(facts, 1)],
        )
        cur.execute("SELECT pg_notify(%s, %s)", (CHANNEL, str(head + len(facts))))

    def commit(
        self,
        facts: Iterable[Fact],
        cluster: Cluster,
        hosts: set[str],
        jobs: set[int],
        after: int | None = None,
    ) -> None:
        done = list(facts)
        host_rows = [(k, json.dumps(host_to_json(cluster.hosts[k]))) for k in sorted(hosts)]
        job_rows = [(i, json.dumps(job_to_json(cluster.jobs[i]))) for i in sorted(jobs)]
        with self._tx(gated=True) as cur:
            self._append(cur, done, after)
            cur.executemany(
                "INSERT INTO hosts (key, data) VALUES (%s, %s) "
                "ON CONFLICT (key) DO UPDATE SET data = EXCLUDED.data",
                host_rows,
            )
            cur.executemany(
                "INSERT INTO jobs (id, data) VALUES (%s, %s) "
                "ON CONFLICT (id) DO UPDATE SET data = EXCLUDED.data",
                job_rows,
            )

    # --- leases -------------------------------------------------------------------------
    def leases(self) -> list[dict[str, Any]]:
        rows = self._rows("SELECT data FROM leases WHERE name <> %s AND data <> '{}'", (FLOOR_ROW,))
        return [json.loads(data) for (data,) in rows]

    def lease_floor(self) -> int:
        rows = self._rows("SELECT data FROM leases WHERE name = %s", (FLOOR_ROW,))
        return int(json.loads(rows[0][0])["floor"]) if rows else 0

    def lease_facts(self) -> list[Fact]:
        rows = self._rows(
            "SELECT kind, at, by, data FROM facts WHERE kind IN ('lease_granted', "
            "'lease_released', 'lease_forgotten') ORDER BY seq"
        )
        return [Fact(k, at, by, d) for k, at, by, d in rows]

    def commit_leases(
        self,
        facts: Iterable[Fact],
        rows: Iterable[dict[str, Any]],
        forgotten: Iterable[str] = (),
        floor: int = 0,
    ) -> None:
        lease_rows = [(r["name"], json.dumps(r, sort_keys=True)) for r in rows]
        gone = [(name,) for name in forgotten]
        if gone:
            lease_rows.append((FLOOR_ROW, json.dumps({"floor": floor})))
        with self._tx(gated=True) as cur:
            self._append(cur, list(facts), None)
            cur.executemany("DELETE FROM leases WHERE name = %s", gone)
            cur.executemany(
                "INSERT INTO leases (name, data) VALUES (%s, %s) "
                "ON CONFLICT (name) DO UPDATE SET data = EXCLUDED.data",
                lease_rows,
            )

    def lease_step(
        self,
        name: str,
        decide: Callable[[dict[str, Any] | None, float], tuple[list[Fact], dict[str, Any] | None]],
    ) -> None:
        """Decide on one lease under its row lock, on the database's clock, and store the
        outcome (its facts and its row, expiry included) in the same transaction: every
        replica then sees one holder and one token. `decide(row, now)` gets the stored row
        (None: never granted) and gives the facts and the new row (None: nothing to write)."""
        with self._tx(gated=True) as cur:
            # A placeholder row gives the first grant a row to lock as well.
            cur.execute(
                "INSERT INTO leases (name, data) VALUES (%s, '{}') ON CONFLICT (name) DO NOTHING",
                (name,),
            )
            cur.execute(
                "SELECT data, extract(epoch FROM clock_timestamp()) FROM leases "
                "WHERE name = %s FOR UPDATE",
                (name,),
            )
            found = cur.fetchone()
            assert found is not None  # inserted or locked just above
            row = json.loads(found[0]) or None
            facts, new = decide(row, float(found[1]))
            if facts:
                self._append(cur, facts, None)
            if new is None:
                cur.execute("DELETE FROM leases WHERE name = %s AND data = '{}'", (name,))
            else:
                cur.execute(
                    "UPDATE leases SET data = %s WHERE name = %s",
                    (json.dumps(new, sort_keys=True), name),
                )

    # --- beside the facts ---------------------------------------------------------------
    def save_seen(self, seen: dict[str, float]) -> None:
        """Heartbeat times, newest kept (another replica may have heard a host later)."""
        with self._tx() as cur:
            cur.executemany(
                "INSERT INTO seen (key, at) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE "
                "SET at = GREATEST(seen.at, EXCLUDED.at)",
                [(k, at) for k, at in seen.items() if k != MARKER],
            )

    def _write_seen(self, seen: dict[str, float]) -> None:
        """Heartbeat times in one statement, whatever their number (pg_background.Beats)."""
        keys = [k for k in seen if k != MARKER]
        with self._tx() as cur:
            cur.execute(
                "INSERT INTO seen (key, at) SELECT * FROM unnest(%s::text[], %s::float8[]) "
                "ON CONFLICT (key) DO UPDATE SET at = GREATEST(seen.at, EXCLUDED.at)",
                (keys, [seen[k] for k in keys]),
            )

    def beat(self, key: str, at: float) -> None:
        """One host heard from: kept in memory and written with the others heard in the same
        half second, by a thread (an unlogged row each, no fact and no NOTIFY). Never waits
        for the database, never fails."""
        self.beats.beat(key, at)

    def seen_of(self, keys: Iterable[str]) -> dict[str, float]:
        wanted = sorted(keys)
        rows = self._rows("SELECT key, at FROM seen WHERE key = ANY(%s)", (wanted,))
        seen = {str(k): float(at) for k, at in rows}
        pending = self.beats.pending()
        for key in wanted:  # heard here, not written yet
            if pending.get(key, 0.0) > seen.get(key, 0.0):
                seen[key] = pending[key]
        return seen

    def liveness_since(self) -> float:
        """When the heartbeat table last started empty (database clock): a crash or a
        failover empties an unlogged table, and no host may be judged by beats it lost."""
        with self._tx() as cur:
            cur.execute(
                "INSERT INTO seen (key, at) VALUES (%s, extract(epoch FROM clock_timestamp())) "
                "ON CONFLICT (key) DO NOTHING",
                (MARKER,),
            )
            cur.execute("SELECT at FROM seen WHERE key = %s", (MARKER,))
            return float(one(cur))

    def reachable(self) -> bool:
        return not self.outage.cause

    def unreachable_for(self) -> float:
        return self.outage.lasted()

    def unanswered(self, cause: str) -> None:
        self.outage.begin(cause)

    @property
    def deadline_cuts(self) -> int:
        return self.watchdog.cuts

    @property
    def lock_refusals(self) -> int:
        return self.gate.refused

    def db_time(self) -> float:
        """The database's clock, seconds since the epoch."""
        return float(self._rows("SELECT extract(epoch FROM clock_timestamp())")[0][0])

    def save_report(self, key: str, report: dict[str, Any]) -> None:
        with self._tx(gated=True) as cur:
            cur.execute(
                "INSERT INTO reports (key, data) VALUES (%s, %s) "
                "ON CONFLICT (key) DO UPDATE SET data = EXCLUDED.data",
                (key, json.dumps(report, sort_keys=True)),
            )

    def reports(self) -> dict[str, dict[str, Any]]:
        return {k: json.loads(d) for k, d in self._rows("SELECT key, data FROM reports")}

    def copy_in(
        self,
        numbered: list[Numbered],
        cluster: Cluster,
        leases: list[dict[str, Any]],
        reports: dict[str, dict[str, Any]],
        seen: dict[str, float],
        floor: int = 0,
    ) -> None:
        """Another store's whole content, into this empty one, in one transaction
        (pg_copy.py)."""
        with self._tx(limit=None) as cur:
            pg_copy.copy_in(cur, Content(numbered, cluster, leases, reports, seen, floor))

    def listen(self, told: Callable[[int | None], None], poll: float) -> Listener:
        return Listener(self.conninfo, told, poll)

    def close(self) -> None:
        self.beats.stop()
        self.outage.close()
        self.pool.close()
        self.watchdog.close()
