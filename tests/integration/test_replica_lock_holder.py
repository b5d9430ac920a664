"""A replica stopped (SIGSTOP) while its transaction holds the append lock: the server ends
that transaction after its idle timeout, so the other replica's decision goes through within
a bound instead of waiting for the stopped one to run again; the stopped one, when it runs
again, finds its transaction gone and acts on nothing (its change is not stored).

Deterministic: the test takes the append lock itself, lets replica A's commit queue behind
it, stops A, and releases the lock; the server grants it to A's session, which is then idle
in its transaction with the lock held and its process stopped.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import Counter
from pathlib import Path

import psycopg
import requests

from tests.integration.helpers import wait_for
from tests.integration.replica_set import CONFIG, JOIN_TOKEN, Replicas, call, stored_drains
from xce_controller.store.postgres import APPEND_LOCK

QUIET = CONFIG.replace("host_loss_grace: 4s", "host_loss_grace: 10m")
BOUND = 20.0  # the server's idle timeout is 2 s; the rest is margin for a loaded machine


def _sessions(
    conn: psycopg.Connection[tuple[object, ...]], sql: str, params: tuple[object, ...] = ()
) -> list[tuple[object, ...]]:
    return conn.execute(sql, params).fetchall()


def test_a_replica_stopped_holding_the_append_lock_stalls_no_other(
    tmp_path: Path, pg_dsn: str
) -> None:
    replicas = Replicas(tmp_path, pg_dsn, 2, QUIET).start()
    a, b = replicas.urls
    pid = replicas[0].proc.pid  # type: ignore[union-attr]
    stopped = False
    holder = psycopg.connect(pg_dsn, autocommit=True)
    watcher = psycopg.connect(pg_dsn, autocommit=True)
    try:
        for name in ("h0", "h1"):
            assert call(b, "POST", "/v1/join", {"host": name}, JOIN_TOKEN).status_code == 200
        assert call(a, "GET", "/v1/hosts/h0").status_code == 200  # a has caught up
        holder.execute("BEGIN")
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (APPEND_LOCK,))
        answers: dict[str, int] = {}

        def decide(url: str, who: str) -> None:
            try:
                answers[who] = call(url, "POST", "/v1/hosts/h0/decommission", {}).status_code
            except requests.RequestException as exc:
                answers[who] = -1
                print(who, exc)

        on_a = threading.Thread(target=decide, args=(a, "a"))
        on_a.start()
        waiting = (
            "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
        )
        wait_for(lambda: _sessions(watcher, waiting), 30)  # a's commit queued behind the test
        (a_backend,) = _sessions(watcher, waiting)[0]
        os.kill(pid, signal.SIGSTOP)
        stopped = True
        holder.execute("COMMIT")  # the lock goes to a's session; a is stopped
        idle = "SELECT 1 FROM pg_stat_activity WHERE state = 'idle in transaction' AND pid = %s"
        wait_for(
            lambda: _sessions(watcher, idle, (a_backend,)), 30
        )  # a's session holds the lock, stopped
        began = time.monotonic()
        on_b = threading.Thread(target=decide, args=(b, "b"))
        on_b.start()
        on_b.join(BOUND)
        took = time.monotonic() - began
        print(f"b's decision with a stopped holding the lock: {took:.1f} s")
        assert not on_b.is_alive(), f"b waited {BOUND} s for the stopped replica's lock"
        assert answers["b"] == 200
        os.kill(pid, signal.SIGCONT)
        stopped = False
        on_a.join(60)
        assert answers["a"] in (409, 503), answers  # its transaction was ended: nothing stored
        # a serves again, on the state b left (a 503 meanwhile: its ended connection was
        # taken for the database away, until its probe reached the database again).
        again: list[int] = []

        def answered() -> bool:
            again.append(call(a, "POST", "/v1/hosts/h0/decommission", {}).status_code)
            return again[-1] != 503

        wait_for(answered, 30)
        assert again[-1] == 409, again
        assert call(a, "POST", "/v1/hosts/h1/decommission", {}).status_code == 200
        drains = stored_drains(pg_dsn)
        assert drains == Counter({"host:h0": 1, "host:h1": 1}), drains
    finally:
        if stopped:
            os.kill(pid, signal.SIGCONT)
        holder.close()
        watcher.close()
        replicas.stop()
