"""A change waiting for a lock holds its replica's event loop (its commit is synchronous, up
to the lock timeout, then decided again), and with it the requests whose read of the log is
under way: the database answers them at once, but the loop sees the answer late. The replica
must not take its own busy loop for the database gone away: before, it logged "the database
did not answer within 1 s" and refused every change 503 until its probe answered, while the
database was fine (a replica stopped holding a lock made a healthy one do this).
"""

from __future__ import annotations

import threading
from pathlib import Path

import psycopg

from tests.integration.helpers import wait_for
from tests.integration.replica_set import CONFIG, JOIN_TOKEN, Replicas, call, metric
from xce_controller.store.postgres import APPEND_LOCK

QUIET = CONFIG.replace("host_loss_grace: 4s", "host_loss_grace: 10m")
READERS = 4
LOCK_WAITS = 3  # the change waits out the lock timeout this many times before it is let go


def test_a_change_waiting_for_a_lock_is_not_taken_for_the_database_away(
    tmp_path: Path, pg_dsn: str
) -> None:
    replicas = Replicas(tmp_path, pg_dsn, 1, QUIET).start()
    (url,) = replicas.urls
    holder = psycopg.connect(pg_dsn, autocommit=True)
    try:
        for name in ("h0", "h1", "h2"):
            assert call(url, "POST", "/v1/join", {"host": name}, JOIN_TOKEN).status_code == 200
        holder.execute("BEGIN")
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (APPEND_LOCK,))
        reads: list[int] = []
        decided: list[int] = []
        done = threading.Event()

        def read() -> None:
            while not done.is_set():
                reads.append(call(url, "GET", "/v1/hosts/h1").status_code)

        def decide() -> None:
            decided.append(call(url, "POST", "/v1/hosts/h0/decommission", {}).status_code)

        threads = [threading.Thread(target=read) for _ in range(READERS)]
        threads.append(threading.Thread(target=decide))
        for thread in threads:
            thread.start()
        try:
            # The input arrived: the change was refused for the lock (and decided again) that
            # often, each time after holding the loop for the whole lock timeout.
            stale = "xce_controller_replica_stale_changes_total"
            wait_for(lambda: metric(url, stale) >= LOCK_WAITS or decided, 60)
            assert not decided, f"the change was answered while the lock was held: {decided}"
        finally:
            holder.execute("COMMIT")
            threads[-1].join(60)
            done.set()
            for thread in threads:
                thread.join(60)
        log = (replicas[0].workdir / "controller.log").read_text()
        assert decided == [200], "decided once the lock was free, not refused for storage"
        assert len(reads) > LOCK_WAITS and set(reads) == {200}, reads
        assert "did not answer" not in log and "storage unavailable" not in log, log[-2000:]
        # And it still tells a database that is away: a change now goes through at once.
        assert call(url, "POST", "/v1/hosts/h2/decommission", {}).status_code == 200
    finally:
        holder.close()
        replicas.stop()
