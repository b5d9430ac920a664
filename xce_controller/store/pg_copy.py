"""A whole store copied into an empty PostgreSQL database (`xce-controller copy-store`): the
facts with their sequence numbers (an events follower's cursor stays good), the state, the
reports, the heartbeat times, and the lease rows with the token floor of forgotten names (a
name taken again must not repeat a token), in one transaction.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.types.json import Jsonb

from xce_controller.core.codec import host_to_json, job_to_json
from xce_controller.core.model import Cluster
from xce_controller.store.base import FLOOR_ROW, Numbered, StorageUnavailable
from xce_controller.store.pg_connection import one

APPEND_LOCK = 0x7863650001  # pg_advisory_xact_lock key: one appender at a time
MARKER = ""  # the `seen` row that dates the table itself


@dataclass(frozen=True)
class Content:
    """What another store holds, read whole."""

    numbered: list[Numbered]
    cluster: Cluster
    leases: list[dict[str, Any]]
    reports: dict[str, dict[str, Any]]
    seen: dict[str, float]
    floor: int = 0


def copy_in(cur: psycopg.Cursor[Any], content: Content) -> None:
    """Everything of `content` into the empty database `cur` is in a transaction on."""
    cur.execute("SELECT pg_advisory_xact_lock(%s)", (APPEND_LOCK,))
    cur.execute("SELECT (SELECT COUNT(*) FROM facts) + (SELECT COUNT(*) FROM hosts)")
    if one(cur):
        raise StorageUnavailable("the target database already holds a cluster")
    cur.executemany(
        "INSERT INTO facts (seq, kind, at, by, data) VALUES (%s, %s, %s, %s, %s)",
        [(n, f.kind, f.at, f.by, Jsonb(f.data)) for n, f in content.numbered],
    )
    cur.executemany(
        "INSERT INTO hosts (key, data) VALUES (%s, %s)",
        [(k, json.dumps(host_to_json(h))) for k, h in content.cluster.hosts.items()],
    )
    cur.executemany(
        "INSERT INTO jobs (id, data) VALUES (%s, %s)",
        [(i, json.dumps(job_to_json(j))) for i, j in content.cluster.jobs.items()],
    )
    cur.executemany(
        "INSERT INTO reports (key, data) VALUES (%s, %s)",
        [(k, json.dumps(r, sort_keys=True)) for k, r in content.reports.items()],
    )
    cur.executemany(
        "INSERT INTO seen (key, at) VALUES (%s, %s) ON CONFLICT (key) DO NOTHING",
        [(k, at) for k, at in content.seen.items() if k != MARKER],
    )
    _copy_leases(cur, content.leases, content.floor)


def _copy_leases(cur: psycopg.Cursor[Any], leases: list[dict[str, Any]], floor: int) -> None:
    """The lease rows, last: the clock is read after every other row is in, so that no
    expiry is earlier than a restart would have given."""
    cur.execute("SELECT extract(epoch FROM clock_timestamp())")
    found = cur.fetchone()  # not `one`: it would round the clock down to the second
    assert found is not None
    now = float(found[0])
    rows = [(r["name"], json.dumps(held_from(r, now), sort_keys=True)) for r in leases]
    if floor:
        rows.append((FLOOR_ROW, json.dumps({"floor": floor})))
    cur.executemany("INSERT INTO leases (name, data) VALUES (%s, %s)", rows)


def held_from(row: dict[str, Any], now: float) -> dict[str, Any]:
    """A lease row copied in from a store that keeps no expiry (SQLite: a restart gives
    every held lease one TTL from the start): here the expiry is a stored database time,
    and a row without one reads as expired, so a held lease gets one TTL from `now`, the
    restart rule; its holder keeps it by renewing. A free lease needs none."""
    if not row.get("host"):
        return row
    return {**row, "expires": now + float(row["ttl"])}
