"""While the database is away, a replica answers heartbeats at once: from memory for a
moment (isolated_after: a failover costs no heartbeat), then 503 with the code
`refused_storage_unavailable`, so the agent moves to its next URL (the other replicas would not
hear the host through this one: docs/ha.md, "The failover contract"). No heartbeat waits for
a database round trip or the connect timeout; once the database is back, heartbeats are
answered 200 again and their times reach the shared table.
"""

from __future__ import annotations

import time
from pathlib import Path

import psycopg

from tests.integration.helpers import wait_for
from tests.integration.replica_set import CONFIG, JOIN_TOKEN, Replicas, call
from tests.pg_server import PgCluster, need_pg
from xce_protocol.replicas import code_of

QUIET = CONFIG.replace("host_loss_grace: 4s", "host_loss_grace: 10m")
BOUND = 2.0  # seconds; the connect timeout each heartbeat used to wait for is 5 s


def _seen(dsn: str) -> dict[str, float]:
    try:
        with psycopg.connect(dsn, autocommit=True) as conn:
            rows = conn.execute("SELECT key, at FROM seen WHERE key <> ''").fetchall()
    except psycopg.Error:
        return {}
    return {str(k): float(at) for k, at in rows}


def test_while_the_database_is_away_heartbeats_answer_503_at_once(tmp_path: Path) -> None:
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
        answers: list[tuple[int, str, float]] = []
        for _ in range(16):  # 4 s: past isolated_after (2 s with this grace)
            began = time.monotonic()
            r = call(url, "POST", "/v1/hosts/h0/heartbeat", {}, cred)
            answers.append((r.status_code, code_of(r.json()), time.monotonic() - began))
            time.sleep(0.25)  # the agent's pace, compressed; not a synchronisation
        print("heartbeats while the database was away (status, code, seconds):", answers)
        # From memory for isolated_after (a failover costs no heartbeat), then 503, for good.
        statuses = [status for status, _, _ in answers]
        assert statuses[-1] == 503 and answers[-1][1] == "refused_storage_unavailable", answers
        first = statuses.index(503)
        assert set(statuses[:first]) <= {200} and set(statuses[first:]) == {503}, answers
        assert max(took for _, _, took in answers) < BOUND, answers
        pg.primary.start()  # an immediate stop empties the unlogged table: only new times

        def beats() -> bool:
            return call(url, "POST", "/v1/hosts/h0/heartbeat", {}, cred).status_code == 200

        wait_for(beats, 60)  # answered again once the database is back
        wait_for(lambda: "host:h0" in _seen(dsn), 60)  # and shared
    finally:
        if replicas is not None:
            replicas.stop()
        pg.close()
