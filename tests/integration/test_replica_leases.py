"""Leases on several controller replicas sharing one PostgreSQL database: one holder and one
fencing token whichever replica is asked, renewals seen by every replica, and a takeover after
a replica's kill -9 only once the last renewal's grant ran out, with the next token."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.integration.replica_set import Replicas, call, join
from xce_controller.clock import SharedClock
from xce_controller.lease_desk import LeaseDesk
from xce_controller.store.open import open_store
from xce_controller.store.postgres import PgStore

TTL = 2.0


@pytest.fixture
def two(tmp_path: Path, pg_dsn: str) -> Iterator[Replicas]:
    replicas = Replicas(tmp_path, pg_dsn, 2).start()
    yield replicas
    replicas.stop()


def take(url: str, cred: str, host: str, lease: str = "prov") -> requests.Response:
    body = {"host": host, "session": "s1", "ttl": TTL}
    return call(url, "POST", f"/v1/leases/{lease}", body, cred)


def holder(url: str, lease: str = "prov") -> dict[str, object]:
    r = call(url, "GET", "/v1/leases")
    assert r.status_code == 200, r.text
    found: dict[str, object] = {le["lease"]: le for le in r.json()}[lease]
    return found


def test_racing_acquires_on_two_replicas_grant_one_holder(two: Replicas) -> None:
    urls = two.urls
    creds = {f"h{n}": join(urls[n % 2], f"h{n}") for n in range(8)}
    for round_ in range(6):
        lease = f"race{round_}"
        answers: dict[str, requests.Response] = {}
        start = threading.Barrier(len(creds))

        def racer(
            n: int,
            host: str,
            lease: str = lease,
            start: threading.Barrier = start,
            answers: dict[str, requests.Response] = answers,
        ) -> None:
            start.wait()
            answers[host] = take(urls[n % 2], creds[host], host, lease)

        threads = [threading.Thread(target=racer, args=(n, h)) for n, h in enumerate(sorted(creds))]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        assert len(answers) == len(creds)  # every request arrived and was answered
        granted = [h for h, r in answers.items() if r.status_code == 200]
        assert len(granted) == 1, {h: (r.status_code, r.text) for h, r in answers.items()}
        refused = [r for r in answers.values() if r.status_code == 409]
        assert len(refused) == len(creds) - 1
        assert all(r.json()["host"] == granted[0] for r in refused)
        for url in urls:  # both replicas name the same holder and token
            seen = holder(url, lease)
            assert (seen["host"], seen["token"]) == (granted[0], 1)


def test_a_renewal_on_one_replica_is_seen_by_the_other(two: Replicas) -> None:
    a_url, b_url = two.urls
    a, b = join(a_url, "a"), join(b_url, "b")
    assert take(a_url, a, "a").json()["token"] == 1
    deadline = time.monotonic() + 3 * TTL
    while time.monotonic() < deadline:  # renewed on the other replica only, well past the TTL
        renewed = take(b_url, a, "a")
        assert renewed.status_code == 200 and renewed.json()["token"] == 1, renewed.text
        busy = take(a_url, b, "b")
        assert busy.status_code == 409 and busy.json()["host"] == "a", busy.text
        time.sleep(TTL / 4)  # the renewal period (not synchronisation)
    seen = holder(a_url)
    assert seen["host"] == "a" and seen["token"] == 1
    assert 0 < float(str(seen["expires_in"])) <= TTL


def renewing(url: str, cred: str, host: str, stop: threading.Event) -> threading.Thread:
    """A holder renewing every 50 ms until `stop`, or until its replica stops answering."""

    def renew() -> None:
        while not stop.is_set():
            try:
                take(url, cred, host)
            except requests.RequestException:
                return
            time.sleep(0.05)

    thread = threading.Thread(target=renew)
    thread.start()
    return thread


def test_a_replica_killed_mid_renewal_and_a_takeover_with_the_next_token(two: Replicas) -> None:
    a_url, b_url = two.urls
    a, b = join(a_url, "a"), join(b_url, "b")
    assert take(a_url, a, "a").json()["token"] == 1
    stop = threading.Event()
    renewer = renewing(a_url, a, "a", stop)  # on replica 0 until it dies
    time.sleep(0.5)  # some renewals went through (not synchronisation)
    two[0].kill()
    killed = time.monotonic()
    renewer.join(10)
    stop.set()
    assert take(b_url, b, "b").status_code == 409  # the grant renewed on 0 is still live on 1
    while True:
        got = take(b_url, b, "b")
        if got.status_code == 200 or time.monotonic() - killed > 4 * TTL:
            break
        assert got.json()["host"] == "a" and got.json()["token"] == 1, got.text
        time.sleep(0.05)
    assert got.status_code == 200, got.text
    assert time.monotonic() - killed >= TTL - 0.3  # not before the last renewal ran out
    assert got.json()["token"] == 2
    # b keeps renewing on replica 1 while 0 restarts: a restart slower than the TTL (a loaded
    # machine) must not let the new holder's grant run out under the check.
    stop = threading.Event()
    renewer = renewing(b_url, b, "b", stop)
    try:
        two[0].start()
        refused = take(a_url, a, "a")
    finally:
        stop.set()
        renewer.join(10)
    assert refused.status_code == 409, refused.text  # the restarted replica knows the new holder
    assert holder(a_url)["token"] == 2


def test_a_replica_whose_wall_clock_is_2_minutes_fast_dates_its_leases_by_the_database(
    pg_dsn: str,
) -> None:
    # The desk as a replica's service makes it (the shared clock), its own wall clock wrong.
    store = open_store(pg_dsn)
    assert isinstance(store, PgStore)
    try:
        desk = LeaseDesk(store, SharedClock(store.db_time), wall=lambda: time.time() + 120)
        held = desk.acquire("clk", "h1", "s1", 10.0, "host:h1")
        now = store.db_time()
        (row,) = store.leases()
        shown = desk.describe(held)
        desk.release("clk", "h1", "s1", "host:h1")
        granted, released = store.lease_facts()
    finally:
        store.close()
    # Each by the database's clock, as every other fact: not 120 s ahead, in order.
    assert abs(granted.at - now) < 2 and abs(released.at - now) < 2, (granted.at, now)
    assert abs(float(row["granted_at"]) - now) < 2, (row, now)
    # The expiry listed is the one stored, which every replica lists alike.
    assert abs(shown["expires_at"] - held.expires) < 0.5, (shown, held)
    assert abs(shown["expires_at"] - (now + 10.0)) < 2, (shown, now)
