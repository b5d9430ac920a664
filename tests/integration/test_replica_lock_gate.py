"""Changes queued behind a lock that its holder does not let go of hold the replica's event
loop once, not once each: its heartbeats go on being answered. Before (store/lock_gate.py),
each change waited out the lock timeout on the loop in turn, and heartbeats waited behind all
of them (a hostile run measured heartbeat p99 of 1.7 to 1.9 s beside a replica stopped again
and again while holding the append lock, and 1.87 s with a lease's row, once the gate covered
the append lock alone).

The test holds the lock itself, in an open transaction, for HOLD seconds: the append lock
(8 expects arrive meanwhile) or a lease's row (8 hosts ask for the lease another holds). A
host beats every 50 ms. Once the lock is let go, every change is answered as it would have
been (stored once, or the lease refused as held), and none was refused for the lock.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest
import requests

from tests.integration.helpers import wait_for
from tests.integration.replica_set import CONFIG, Replicas, call, join, metric
from xce_controller.store.open import open_store
from xce_controller.store.postgres import APPEND_LOCK

QUIET = CONFIG.replace("host_loss_grace: 4s", "host_loss_grace: 10m")
CHANGES = 8  # without the gate, 8 waits of the 0.5 s lock timeout in turn: 4 s of loop
HOLD = 4.0
SLOWEST_BEAT = 1.5  # one lock wait (0.5 s), and margin for a loaded machine


def _lease(url: str, host: str, cred: str) -> requests.Response:
    return call(url, "POST", "/v1/leases/prov", {"host": host, "session": "s1", "ttl": 60}, cred)


def _expects(url: str) -> tuple[str, Callable[[int], int], int]:
    def change(n: int) -> int:
        body = {"instance_id": f"i-{n}", "template": "default"}
        return call(url, "POST", "/v1/expected", body).status_code

    return f"SELECT pg_advisory_xact_lock({APPEND_LOCK})", change, 201


def _lease_asks(url: str) -> tuple[str, Callable[[int], int], int]:
    assert _lease(url, "h0", join(url, "h0")).status_code == 200
    creds = {n: join(url, f"l{n}") for n in range(CHANGES)}

    def change(n: int) -> int:
        return _lease(url, f"l{n}", creds[n]).status_code  # held by h0: 409 once decided

    return "SELECT 1 FROM leases WHERE name = 'prov' FOR UPDATE", change, 409


@pytest.mark.parametrize("case", [_expects, _lease_asks], ids=["append-lock", "lease-row"])
def test_changes_behind_a_stuck_lock_hold_the_loop_once(
    tmp_path: Path, pg_dsn: str, case: Callable[[str], tuple[str, Callable[[int], int], int]]
) -> None:
    replicas = Replicas(tmp_path, pg_dsn, 1, QUIET).start()
    (url,) = replicas.urls
    holder = psycopg.connect(pg_dsn, autocommit=True)
    try:
        cred = join(url, "beater")
        lock, change, answer = case(url)
        holder.execute("BEGIN")
        holder.execute(lock)
        held_until = time.monotonic() + HOLD
        beats: list[tuple[float, int]] = []  # (seconds taken, status) while the lock was held
        decided: list[int] = []

        def beat() -> None:
            while time.monotonic() < held_until:
                began = time.monotonic()
                status = call(url, "POST", "/v1/hosts/beater/heartbeat", {}, cred).status_code
                beats.append((time.monotonic() - began, status))
                threading.Event().wait(0.05)

        threads = [threading.Thread(target=beat)]
        threads += [
            threading.Thread(target=lambda n=n: decided.append(change(n))) for n in range(CHANGES)
        ]
        for thread in threads:
            thread.start()
        try:
            # The input arrived: changes met the held lock and were refused at once.
            wait_for(lambda: metric(url, "xce_controller_replica_lock_refusals_total") >= 8, 30)
            threads[0].join(HOLD + 30)
            assert not decided, f"a change was answered while the lock was held: {decided}"
        finally:
            holder.execute("COMMIT")
            for thread in threads:
                thread.join(60)
        assert decided == [answer] * CHANGES, decided  # as without the lock: none refused for it
        assert len(beats) >= HOLD / 1.0 and {s for _, s in beats} == {200}, beats
        slowest = max(t for t, _ in beats)
        print(f"slowest heartbeat {slowest:.2f} s of {len(beats)}")
        assert slowest < SLOWEST_BEAT, f"a heartbeat took {slowest:.2f} s: {sorted(beats)[-5:]}"
        store = open_store(pg_dsn)
        try:
            log = store.facts()
        finally:
            store.close()
        expected = sorted(f.data["instance_id"] for f in log if f.kind == "expected")
        granted = [f for f in log if f.kind == "lease_granted"]
        if answer == 201:
            assert expected == sorted(f"i-{n}" for n in range(CHANGES))  # once each
        else:
            assert [g.data["host"] for g in granted] == ["h0"]  # the holder kept it
    finally:
        holder.close()
        replicas.stop()
