"""Changes queued behind an append lock that its holder does not let go of hold the replica's
event loop once, not once each: its heartbeats go on being answered. Before
(store/append_gate.py), each change waited out the lock timeout on the loop in turn, and
heartbeats waited behind all of them (a hostile run measured heartbeat p99 of 1.7 to 1.9 s
beside a replica stopped again and again while holding the lock).

The test holds the append lock itself, in an open transaction, for HOLD seconds; CHANGES
changes arrive at once meanwhile, and a host beats every 50 ms. Once the lock is let go, every
change is stored, once, and none was refused.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import psycopg

from tests.integration.helpers import wait_for
from tests.integration.replica_set import CONFIG, JOIN_TOKEN, Replicas, call
from xce_controller.store.open import open_store
from xce_controller.store.postgres import APPEND_LOCK

QUIET = CONFIG.replace("host_loss_grace: 4s", "host_loss_grace: 10m")
CHANGES = 8  # without the gate, 8 waits of the 0.5 s lock timeout in turn: 4 s of loop
HOLD = 4.0
SLOWEST_BEAT = 1.5  # one lock wait (0.5 s), and margin for a loaded machine


def _metric(url: str, name: str) -> float:
    text = call(url, "GET", "/metrics").text
    return float(next(ln for ln in text.splitlines() if ln.startswith(name)).split()[-1])


def test_changes_behind_a_stuck_append_lock_hold_the_loop_once(tmp_path: Path, pg_dsn: str) -> None:
    replicas = Replicas(tmp_path, pg_dsn, 1, QUIET).start()
    (url,) = replicas.urls
    holder = psycopg.connect(pg_dsn, autocommit=True)
    try:
        r = call(url, "POST", "/v1/join", {"host": "beater"}, JOIN_TOKEN)
        assert r.status_code == 200, r.text
        cred = str(r.json()["credential"])
        holder.execute("BEGIN")
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (APPEND_LOCK,))
        held_until = time.monotonic() + HOLD
        beats: list[tuple[float, int]] = []  # (seconds taken, status) while the lock was held
        decided: list[int] = []

        def beat() -> None:
            while time.monotonic() < held_until:
                began = time.monotonic()
                status = call(url, "POST", "/v1/hosts/beater/heartbeat", {}, cred).status_code
                beats.append((time.monotonic() - began, status))
                threading.Event().wait(0.05)

        def change(n: int) -> None:
            body = {"instance_id": f"i-{n}", "template": "default"}
            decided.append(call(url, "POST", "/v1/expected", body).status_code)

        threads = [threading.Thread(target=beat)]
        threads += [threading.Thread(target=change, args=(n,)) for n in range(CHANGES)]
        for thread in threads:
            thread.start()
        try:
            refusals = "xce_controller_replica_append_lock_refusals_total"
            # The input arrived: changes met the held lock and were refused at once.
            wait_for(lambda: _metric(url, refusals) >= CHANGES, 30)
            threads[0].join(HOLD + 30)
            assert not decided, f"a change was answered while the lock was held: {decided}"
        finally:
            holder.execute("COMMIT")
            for thread in threads:
                thread.join(60)
        assert sorted(decided) == [201] * CHANGES, decided  # every one stored, none refused
        assert len(beats) >= HOLD / 1.0 and {s for _, s in beats} == {200}, beats
        slowest = max(t for t, _ in beats)
        assert slowest < SLOWEST_BEAT, f"a heartbeat took {slowest:.2f} s: {sorted(beats)[-5:]}"
        store = open_store(pg_dsn)
        try:
            expected = [f.data["instance_id"] for f in store.facts() if f.kind == "expected"]
        finally:
            store.close()
        assert sorted(expected) == sorted(f"i-{n}" for n in range(CHANGES))  # once each
    finally:
        holder.close()
        replicas.stop()
