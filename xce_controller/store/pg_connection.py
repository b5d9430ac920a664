"""How the PostgreSQL store talks to its server: the bounds on every connection (a deadline
for an answer, the server's own timeouts for a transaction left open or a lock waited for,
TCP's for a peer gone without a word), and how a driver error is read (the server away, as
against a refusal of the statement). postgres.py and pg_listener.py use them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import suppress
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from xce_controller.store.base import StorageUnavailable
from xce_controller.store.conninfo_text import misplaced_at, scrub

CONNECT_TIMEOUT = 5.0
# A replica stopped (SIGSTOP, a paused VM) inside a transaction would hold the append lock,
# and so every other replica's change, until it runs again: the server ends a session idle in
# its transaction this long (rolled back; the stopped replica finds its connection gone and
# answers 503, its change never stored). Far above any pause between a transaction's
# statements, which are sent back to back.
IDLE_IN_TRANSACTION = "2s"
# A wait for a lock past this fails the change (decided again) instead of holding the
# replica's event loop, where the commit runs: half a second, far above any wait for appends
# queued behind one another (a few milliseconds each), and below the idle timeout. After one
# such wait the locks are taken as stuck (lock_gate.py), so a replica stopped holding one
# costs each other replica's loop one wait, not one per change.
LOCK_TIMEOUT = "500ms"
# The longest a call waits for the server's answer before its connection is cut
# (pg_deadline.py): above the lock timeout, so a server that answers at all answers first.
DEADLINE = 4.0
LONG = 60.0  # the whole state read at once (a start, a reload) at the largest sizes
# How a connection over TCP notices a peer gone without a word (a partition, a machine
# lost): keepalive probes on an idle connection, and a bound on data sent but never
# acknowledged. Given only where the connection string does not say otherwise.
TCP_BOUNDS = {
    "keepalives": "1",
    "keepalives_idle": "5",
    "keepalives_interval": "2",
    "keepalives_count": "3",
    "tcp_user_timeout": "9000",
}


def with_tcp_bounds(conninfo: str) -> str:
    """The connection string with TCP_BOUNDS added where it names none of its own. One that
    libpq cannot read (an unknown option, a malformed URI, an open quote) is StorageUnavailable
    with libpq's words, like a bad value found on connecting, its password taken out; so is a
    URI whose password libpq would cut short (an unescaped `@` or `/`)."""
    if misplaced_at(conninfo):
        raise StorageUnavailable(
            'write "@" as %40 and "/" as %2F in a URI\'s user name, password and database name'
        )
    try:
        given = conninfo_to_dict(conninfo)
        return make_conninfo(conninfo, **{k: v for k, v in TCP_BOUNDS.items() if k not in given})
    except psycopg.ProgrammingError as exc:
        # Not chained: libpq's own words may quote the password, and a chained traceback
        # printed anywhere would show them.
        raise StorageUnavailable(scrub(why(exc), conninfo)) from None


def snapshot(conn: psycopg.Connection[Any]) -> Iterator[psycopg.Cursor[Any]]:
    """A read-only transaction on one snapshot, its cursor yielded; always rolled back."""
    conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    try:
        with conn.cursor() as cur:
            yield cur
    finally:
        with suppress(psycopg.Error):  # a broken connection is dropped
            conn.execute("ROLLBACK")


def configure(conn: psycopg.Connection[Any]) -> None:
    """Each pooled connection's bounds on a transaction left open or a lock waited for."""
    conn.execute(
        "SELECT set_config('idle_in_transaction_session_timeout', %s, false)",
        (IDLE_IN_TRANSACTION,),
    )
    conn.execute("SELECT set_config('lock_timeout', %s, false)", (LOCK_TIMEOUT,))


def unreachable(exc: psycopg.Error) -> bool:
    """The database could not be reached or went away (no server answer, a connection
    exception, the server shutting down), as against a refusal of the statement itself."""
    if not isinstance(exc, psycopg.OperationalError):
        return False
    state = exc.sqlstate
    return state is None or state.startswith("08") or state in ("57P01", "57P02", "57P03")


def one(cur: psycopg.Cursor[Any]) -> int:
    row = cur.fetchone()
    assert row is not None
    return int(row[0])


# psycopg 3.2+ lists each host of a multi-host connection string it tried, one line each.
_ATTEMPT = re.compile(r"^- host: '([^']*)', port: '([^']*)'.*failed: (.*)$")


def why(exc: BaseException) -> str:
    """The driver's error in one line; for a multi-host connection string, every host tried
    and why it failed (the first line names only the last)."""
    text = str(exc).strip().splitlines()
    if not text:
        return type(exc).__name__
    tried = [m.groups() for m in map(_ATTEMPT.match, text) if m]
    if len(tried) < 2:
        return text[0]
    return "no host could be used: " + "; ".join(f"{h}:{p}: {what}" for h, p, what in tried)
