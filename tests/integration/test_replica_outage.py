"""While the database is away, a replica answers heartbeats from memory at once: the host's
time is the replica's, written to the shared table once the database is back; no heartbeat
waits for a database round trip or the connect timeout (docs/ha.md, "Failover under load").
"""

from __future__ import annotations

import time
from pathlib import Path

import psycopg

from tests.integration.helpers import wait_for
from tests.integration.replica_set import CONFIG, JOIN_TOKEN, Replicas, call
from tests.pg_server import PgCluster, need_pg

QUIET = CONFIG.replace("host_loss_grace: 4s", "host_loss_grace: 10m")
BOUND = 2.0  # seconds; the connect timeout each heartbeat used to wait for is 5 s


def _seen(dsn: str) -> dict[str, float]:
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            rows = conn.execute("SELECT key, at FROM seen WHERE key <> ''").fetchall()
    except psycopg.Error:
        return {}
    return {str(k): float(at) for k, at in rows}


def test_while_the_database_is_away_heartbeats_answer_from_memory_at_once(
    tmp_path: Path,
) -> None:
    need_pg()
    pg = PgCluster(port=5456)
    replicas = None
    try:
        pg.primary.sql("CREATE DATABASE xce")
        dsn = pg.primary.dsn("xce")
        replicas = Replicas(tmp_path, dsn, 1, QUIET).start()
        (url,) = replicas.urls
        cred = call(url, "POST", "/v1/join", {"host": "h0"}, JOIN_TOKEN).json()["credential"]
        assert call(url, "POST", "/v1/hosts/h0/heartbeat", {}, cred).status_code == 200
        wait_for(lambda: "host:h0" in _seen(dsn), 30)  # written within the flush period
        pg.primary.stop()
        answers: list[tuple[int, float]] = []
        for _ in range(12):
            began = time.monotonic()
            r = call(url, "POST", "/v1/hosts/h0/heartbeat", {}, cred)
            answers.append((r.status_code, time.monotonic() - began))
            time.sleep(0.25)  # the agent's pace, compressed; not a synchronisation
        print("heartbeats while the database was away (status, seconds):", answers)
        assert {status for status, _ in answers} == {200}, answers
        assert max(took for _, took in answers) < BOUND, answers
        pg.primary.start()  # an immediate stop empties the unlogged table: only new times
        wait_for(lambda: "host:h0" in _seen(dsn), 60)  # only a time heard while away
    finally:
        if replicas is not None:
            replicas.stop()
        pg.close()
