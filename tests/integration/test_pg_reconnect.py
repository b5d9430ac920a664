"""The PostgreSQL store gets its connection back soon after a failover, however long it was.

The connection pool retries a lost connection with a doubling delay (1, 2, 4, 8, 16 s): with
that alone, a primary gone for 20 s (a Patroni failover, docs/ha.md) was followed by 11 s more
without writes, waiting for the pool's next try. The store caps the pool's retrying and leaves
the rest to demand, so the first request after the promotion connects.
"""

from __future__ import annotations

import threading
import time

from tests.pg_server import PgCluster, need_pg
from xce_controller.store.base import StorageUnavailable
from xce_controller.store.open import open_store

OUTAGE = 9.0  # with the doubling delay alone the pool's tries fall at 0, 1, 3, 7 and 15 s


def test_writes_resume_within_seconds_of_the_promotion_after_a_long_outage() -> None:
    need_pg()
    pg = PgCluster(port=5452)
    try:
        pg.primary.sql("CREATE DATABASE xce")
        open_store(pg.primary.dsn("xce")).close()
        standby = pg.primary.standby("standby", 5453)
        pg.servers.append(standby)
        dsn = (
            f"host={pg.root},{pg.root} port=5452,5453 user=postgres dbname=xce "
            "target_session_attrs=read-write connect_timeout=2"
        )
        store = open_store(dsn)
        answered: list[float] = []
        failed = [0]
        stop = threading.Event()

        def probe() -> None:
            while not stop.is_set():
                try:
                    store.last_seq()
                    answered.append(time.monotonic())
                except StorageUnavailable:
                    failed[0] += 1
                stop.wait(0.1)

        thread = threading.Thread(target=probe)
        thread.start()
        try:
            deadline = time.monotonic() + 10
            while not answered and time.monotonic() < deadline:
                time.sleep(0.05)
            assert answered, "the store never answered before the outage"
            pg.primary.kill()
            time.sleep(OUTAGE)  # the fault's length, not a synchronisation
            assert failed[0] > 0  # the outage was seen
            promoted = time.monotonic()
            standby.promote()
            deadline = promoted + 20
            while not [t for t in answered if t > promoted] and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            stop.set()
            thread.join(30)
            store.close()
        back = [t for t in answered if t > promoted]
        assert back, "the store never answered after the promotion"
        assert back[0] - promoted < 4.0, f"answered {back[0] - promoted:.1f}s after the promotion"
    finally:
        pg.close()
