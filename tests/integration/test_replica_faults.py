"""Replicas under faults: a wrong wall clock, a cut listener, the primary killed and a
standby promoted. What each must keep: no timer early, no fact missed, no acknowledged
decision lost or doubled, no host declared lost for the outage."""

from __future__ import annotations

import contextlib
import shutil
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.integration import history_checker as history
from tests.integration.helpers import wait_for, watch_for_change, watches_held
from tests.integration.replica_set import ADMIN_TOKEN, CONFIG, JOIN_TOKEN, Replicas, call
from tests.pg_server import PgCluster, PgServer, need_pg
from xce_controller.core.config import load_cluster_config
from xce_controller.http.server import EmbeddedController
from xce_controller.store.open import open_store


def facts(dsn: str) -> list[tuple[str, float, dict[str, object]]]:
    store = open_store(dsn)
    try:
        return [(f.kind, f.at, f.data) for f in store.facts()]
    finally:
        store.close()


def test_a_replica_whose_clock_runs_60s_fast_fires_no_timer_early(
    tmp_path: Path, pg_dsn: str
) -> None:
    if shutil.which("faketime") is None:
        pytest.skip("faketime not installed (apt-get install faketime)")
    replicas = Replicas(tmp_path, pg_dsn, 2)
    replicas[1].prefix = ["faketime", "-f", "+60s"]
    replicas.start()
    try:
        a, fast = replicas.urls
        began = time.monotonic()
        # Longer than the 4 s grace a replica gives from its start: the deadline decides.
        body = {"instance_id": "i-1", "template": "default", "deadline_in": 8}
        assert call(fast, "POST", "/v1/expected", body).status_code == 201
        assert call(a, "POST", "/v1/expected", {**body, "instance_id": "i-2"}).status_code == 201

        def overdue() -> int:
            return len([k for k, _, _ in facts(pg_dsn) if k == "state"])

        wait_for(lambda: overdue() >= 1, timeout=20, step=0.1)
        assert time.monotonic() - began >= 7.9  # neither replica fired before the deadline
        wait_for(lambda: overdue() == 2, timeout=20)
        expected = {d["instance_id"]: at for k, at, d in facts(pg_dsn) if k == "expected"}
        # Both recorded by the database's clock: the fast replica's is not 60 s ahead.
        assert abs(expected["i-1"] - expected["i-2"]) < 2
    finally:
        replicas.stop()


@pytest.fixture
def embedded(pg_dsn: str, tmp_path: Path) -> Iterator[EmbeddedController]:
    config = tmp_path / "cluster.yaml"
    config.write_text(CONFIG)
    ctl = EmbeddedController(load_cluster_config(config), pg_dsn).start()
    yield ctl
    ctl.stop()


def test_a_replica_whose_listener_is_cut_still_sees_every_fact_within_the_poll(
    embedded: EmbeddedController, tmp_path: Path, pg_dsn: str
) -> None:
    other = Replicas(tmp_path, pg_dsn, 1).start()
    try:
        replica = embedded.controller.replica
        assert replica is not None and replica.listener is not None
        wait_for(replica.listener.connected.is_set)
        replica.listener.cut = True  # NOTIFYs are read and dropped: only the poll is left
        cred = call(other.urls[0], "POST", "/v1/join", {"host": "c1"}, JOIN_TOKEN).json()
        version = call(embedded.url, "POST", "/v1/hosts/c1/heartbeat", {}, cred["credential"])
        since = version.json()["version"]
        got: list[requests.Response] = []

        def watch(since: int) -> requests.Response:
            return call(embedded.url, "GET", "/v1/hosts/c1/watch", bearer=cred["credential"],
                        since=since, timeout=20)  # fmt: skip

        watcher = threading.Thread(target=lambda: got.append(watch_for_change(watch, since)))
        watcher.start()
        wait_for(lambda: watches_held(call(embedded.url, "GET", "/metrics").text) == 1)
        sent = time.monotonic()
        assert call(other.urls[0], "POST", "/v1/hosts/c1/close", {}).status_code == 200
        watcher.join(10)
        assert got and got[0].json()["state"] == "closed"
        assert time.monotonic() - sent < 2.5  # the 1 s poll, not the 20 s watch timeout
    finally:
        other.stop()


@contextlib.contextmanager
def primary_and_standby(port: int) -> Iterator[tuple[PgCluster, PgServer, str]]:
    """A primary on `port` with a synchronous standby on the next; the multi-host string."""
    need_pg()
    pg = PgCluster(port=port)
    try:
        pg.primary.sql("CREATE DATABASE xce")
        open_store(pg.primary.dsn("xce")).close()  # the schema, before the copy
        standby = pg.primary.standby("standby", port + 1)
        pg.servers.append(standby)
        pg.primary.sql("ALTER SYSTEM SET synchronous_standby_names = '*'")
        pg.primary.sql("SELECT pg_reload_conf()")
        wait_for(
            lambda: pg.primary.sql("SELECT count(*) FROM pg_stat_replication "
                                   "WHERE sync_state = 'sync'") == "1", timeout=30)  # fmt: skip
        dsn = (
            f"host={pg.root},{pg.root} port={port},{port + 1} user=postgres dbname=xce "
            "target_session_attrs=read-write connect_timeout=2"
        )
        yield pg, standby, dsn
    finally:
        pg.close()


def test_primary_killed_and_standby_promoted_loses_no_acknowledged_decision(
    tmp_path: Path,
) -> None:
    with primary_and_standby(5442) as (pg, standby, dsn):
        replicas = Replicas(tmp_path, dsn, 2).start()
        try:
            failover(replicas, pg, standby)
            kept = facts(f"host={pg.root} port=5443 user=postgres dbname=xce")
        finally:
            replicas.stop()
    lost = [d for k, _, d in kept if k == "state" and d.get("state") == "lost"]
    assert not lost, lost


def test_after_a_failover_longer_than_the_grace_no_host_is_lost_for_a_grace(
    tmp_path: Path,
) -> None:
    """The primary down for twice the 4 s grace, then the standby promoted; the host's agent
    beats through one replica and, backed off, is first heard 2 s (half the grace) after the
    promotion. The heartbeat times died with the primary (an unlogged table): judged by them,
    the host would be lost at the first timer pass on the new primary."""
    with primary_and_standby(5446) as (pg, standby, dsn):
        replicas = Replicas(tmp_path, dsn, 2).start()
        try:
            a, b = replicas.urls
            cred = call(b, "POST", "/v1/join", {"host": "far"}, JOIN_TOKEN).json()["credential"]
            for _ in range(3):
                assert call(b, "POST", "/v1/hosts/far/heartbeat", {}, cred).status_code == 200
            pg.primary.kill()
            time.sleep(8.0)  # the outage itself (no agent reaches the database meanwhile)
            standby.promote()
            promoted = time.monotonic()
            time.sleep(2.0)  # the agent's backoff: first heard half a grace after the promotion
            beats = []
            while time.monotonic() - promoted < 7.0:  # past a grace after the first pass
                with contextlib.suppress(requests.RequestException):
                    beats.append(call(b, "POST", "/v1/hosts/far/heartbeat", {}, cred))
                time.sleep(0.3)  # the heartbeat interval
            assert beats and beats[-1].status_code == 200, [r.text for r in beats[-3:]]
            kept = facts(f"host={pg.root} port=5447 user=postgres dbname=xce")
            states = {h["name"]: h["state"] for h in call(a, "GET", "/v1/hosts").json()}
        finally:
            replicas.stop()
    lost = [d for k, _, d in kept if k == "state" and d.get("state") == "lost"]
    assert not lost, lost
    assert states["far"] == "open"


def failover(replicas: Replicas, pg: PgCluster, standby: PgServer) -> None:
    a, b = replicas.urls
    cred = call(a, "POST", "/v1/join", {"host": "beating"}, JOIN_TOKEN).json()["credential"]
    stop = threading.Event()
    acked: list[str] = []

    def beat() -> None:
        n = 0
        while not stop.wait(0.3):
            n += 1
            with contextlib.suppress(requests.RequestException):
                call((a, b)[n % 2], "POST", "/v1/hosts/beating/heartbeat", {}, cred)

    def expect() -> None:
        n = 0
        while not stop.is_set():
            n += 1
            iid = f"i-{n}"
            try:
                body = {"instance_id": iid, "template": "default"}
                r = call((a, b)[n % 2], "POST", "/v1/expected", body, ADMIN_TOKEN)
            except requests.RequestException:
                continue
            if r.status_code == 201:
                acked.append(iid)
            else:
                time.sleep(0.05)

    threads = [threading.Thread(target=beat), threading.Thread(target=expect)]
    for t in threads:
        t.start()
    try:
        wait_for(lambda: len(acked) >= 20, timeout=30)
        pg.primary.kill()
        standby.promote()
        before = len(acked)
        wait_for(lambda: len(acked) >= before + 20, timeout=60)  # writes resumed, both replicas
        time.sleep(5)  # more than the 4 s grace after the outage: a loss would show now
    finally:
        stop.set()
        for t in threads:
            t.join(30)
    store = open_store(f"host={pg.root} port=5443 user=postgres dbname=xce")
    try:
        log = store.facts()
        got = [f.data["instance_id"] for f in log if f.kind == "expected"]
        assert set(acked) <= set(got)  # every acknowledged decision survived
        assert len(got) == len(set(got))  # and none twice
        assert store.load()[0].hosts == store.replay().hosts
        assert history.problems(log) == []
        assert history.acknowledged(log, acked, history.expected_instance) == []
    finally:
        store.close()
    states = {h["name"]: h["state"] for h in call(b, "GET", "/v1/hosts").json()}
    assert states["beating"] == "open"
