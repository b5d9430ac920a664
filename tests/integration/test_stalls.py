"""Stalls: a database that stops answering (every one of its processes stopped, as a frozen
machine is) and a controller that is itself stopped past the hosts' grace.

- The database stopped for 9 s under two replicas: heartbeats are answered within
  FOLLOW_WAIT, never held for the stop, not even on the replica that takes a change
  meanwhile (its read of the log unanswered past FOLLOW_WAIT, the database is taken as away
  and the change fails at once, never holding the loop for the store's deadline); once the
  database is taken as away no request waits for a read, and heartbeats are answered 503
  (the replica is isolated: the agent would move on) and /healthz says "isolated"; a scrape
  shows the outage; once the database runs again, heartbeats and changes go through and no
  host is declared lost (each replica's loss timers give a fresh grace after the stall).
- A single SQLite controller stopped for 1.5 graces while its host keeps beating: on resume
  the timer is due before the heartbeats waiting in its socket are read; the host must not
  be judged lost by the time the controller could not hear it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from pathlib import Path

import psutil
import requests

from tests.integration.controller_proc import ControllerProcess
from tests.integration.helpers import wait_for
from tests.integration.replica_set import ADMIN, CONFIG, JOIN_TOKEN, Replicas, call
from tests.pg_server import PgCluster, PgServer, need_pg
from xce_controller.core.config import load_cluster_config
from xce_controller.core.lifecycle import JoinRequest
from xce_controller.core.model import Fact
from xce_controller.service import Controller
from xce_controller.stall_watch import StallWatch
from xce_controller.store.open import open_store

FROZEN = 9.0  # seconds the database does not answer: past the 4 s grace and the deadline
BEAT_BOUND = 2.5  # FOLLOW_WAIT (1 s) and a loaded machine's margin
CHANGE_BOUND = 2.5  # FOLLOW_WAIT, then the database taken as away: the change fails at once
KNOWN_AFTER = 2.5  # the stop is known by then (FOLLOW_WAIT and a loaded machine's margin)
FAST = 0.6  # an answer from memory, on a loaded machine


class Beater:
    """A host's heartbeats every 0.3 s, each answer's status and seconds recorded."""

    def __init__(self, url: str, name: str, cred: str) -> None:
        self.url, self.name, self.cred = url, name, cred
        self.answers: list[tuple[float, int, float]] = []  # (sent at, status, seconds)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run)

    def __enter__(self) -> Beater:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(30)

    def _run(self) -> None:
        while not self._stop.wait(0.3):
            began = time.monotonic()
            try:
                r = call(self.url, "POST", f"/v1/hosts/{self.name}/heartbeat", {}, self.cred)
                status = r.status_code
            except requests.RequestException:
                status = -1
            self.answers.append((began, status, time.monotonic() - began))

    def between(self, start: float, end: float) -> list[tuple[float, int, float]]:
        return [a for a in self.answers if start <= a[0] <= end]


def _lost(dsn: str) -> list[dict[str, object]]:
    store = open_store(dsn)
    try:
        return [f.data for f in store.facts() if f.kind == "state" and f.data["state"] == "lost"]
    finally:
        store.close()


def _freeze(server: PgServer) -> list[psutil.Process]:
    procs = server.processes()
    for proc in procs:
        proc.send_signal(signal.SIGSTOP)
    return procs


def test_a_database_that_stops_answering_holds_no_heartbeat_and_loses_no_host(
    tmp_path: Path,
) -> None:
    need_pg()
    pg = PgCluster(port=5458)
    replicas = None
    frozen: list[psutil.Process] = []
    try:
        pg.primary.sql("CREATE DATABASE xce")
        dsn = pg.primary.dsn("xce")
        replicas = Replicas(tmp_path, dsn, 2).start()
        a, b = replicas.urls
        cred = call(a, "POST", "/v1/join", {"host": "h0"}, JOIN_TOKEN).json()["credential"]
        with Beater(a, "h0", cred) as beats:
            wait_for(lambda: len(beats.answers) >= 3, 30)
            frozen = _freeze(pg.primary)
            stopped = time.monotonic()
            time.sleep(1.0)  # the stop under way, as a change would meet it
            began = time.monotonic()
            # On the replica the host beats through: its commit must not hold their answers.
            change = call(a, "POST", "/v1/expected", {"instance_id": "i-1", "template": "default"})
            took = time.monotonic() - began
            began = time.monotonic()
            scrape = requests.get(a + "/metrics", headers=ADMIN, timeout=30)
            scraped = time.monotonic() - began
            health = requests.get(a + "/healthz", timeout=5)
            time.sleep(max(0.0, FROZEN - (time.monotonic() - stopped)))
            for proc in frozen:
                proc.send_signal(signal.SIGCONT)
            frozen = []
            resumed = time.monotonic()

            def stored() -> bool:
                body = {"instance_id": "i-2", "template": "default"}
                return call(b, "POST", "/v1/expected", body).status_code == 201

            wait_for(stored, 20, step=0.2)  # changes go through again
            time.sleep(6.0)  # past a grace after the resume: a loss would show now
        during = beats.between(stopped, resumed)
        print("heartbeats while the database was stopped:", during)
        print("the change:", change.status_code, round(took, 2), change.text)
        assert len(during) >= 10, during  # the beats did arrive during the stop
        assert {status for _, status, _ in beats.answers} == {200, 503}, beats.answers
        assert 503 in {status for _, status, _ in during}, during  # isolated meanwhile
        assert beats.answers[-1][1] == 200, beats.answers  # and answered again after
        assert max(s for _, _, s in during) < BEAT_BOUND, during
        # Once the database is known away no request waits for a read (before, each waited
        # FOLLOW_WAIT until the store's 4 s deadline cut the read under way).
        known = [s for at, _, s in during if stopped + KNOWN_AFTER < at < resumed - 1.0]
        assert known and max(known) < FAST, during
        assert (health.status_code, health.json()["status"]) == (503, "isolated"), health.text
        assert change.status_code == 503 and took < CHANGE_BOUND, (change.text, took)
        # The outage is shown while it lasts: the scrape answers, from memory.
        assert scrape.status_code == 200 and scraped < BEAT_BOUND, (scrape.status_code, scraped)
        assert "xce_controller_storage_available 0.0" in scrape.text
        logs = "".join((tmp_path / f"replica{n}" / "controller.log").read_text() for n in (0, 1))
        assert "did not answer within" in logs  # the stop was met
        assert _lost(dsn) == []
        assert call(a, "GET", "/v1/hosts/h0").json()["state"] == "open"
    finally:
        for proc in frozen:
            proc.send_signal(signal.SIGCONT)
        if replicas is not None:
            replicas.stop()
        pg.close()


def test_a_controller_stopped_past_the_grace_loses_no_host_that_kept_beating(
    tmp_path: Path,
) -> None:
    ctl = ControllerProcess(tmp_path, CONFIG).start()
    try:
        cred = call(ctl.url, "POST", "/v1/join", {"host": "h0"}, JOIN_TOKEN).json()["credential"]
        assert ctl.proc is not None
        with Beater(ctl.url, "h0", cred) as beats:
            wait_for(lambda: len(beats.answers) >= 3, 30)
            os.kill(ctl.proc.pid, signal.SIGSTOP)
            try:
                time.sleep(6.0)  # 1.5 graces (4 s): every timer is overdue on resume
            finally:
                os.kill(ctl.proc.pid, signal.SIGCONT)
            resumed = time.monotonic()
            wait_for(lambda: len(beats.between(resumed, time.monotonic())) >= 3, 30)
        state = call(ctl.url, "GET", "/v1/hosts/h0").json()["state"]
        log = (tmp_path / "controller.log").read_text()
    finally:
        ctl.stop()
    assert "could not hear hosts for" in log  # the stall was seen
    assert _lost(str(ctl.db)) == []
    assert state == "open"


def test_after_a_stall_the_fleet_s_checks_spread_over_the_last_half_of_the_grace(
    tmp_path: Path,
) -> None:
    """Every host's grace begins again at the stall's end; looked at all at that grace's end,
    5,000 hosts held each replica's loop for about 100 ms."""
    config = tmp_path / "c.yaml"
    config.write_text(CONFIG)
    ctl = Controller(load_cluster_config(config), open_store(str(tmp_path / "c.db")))
    try:
        for n in range(200):
            ctl.join(JoinRequest(name=f"h{n}", token=JOIN_TOKEN))
        ticks = [0.0]
        ctl.passes.stall = StallWatch(lambda: True, lambda: ticks[0])
        ticks[0] = 10.0
        ctl.passes.stalled()
        grace = ctl.cfg.host_loss_grace
        due = [ctl.timers._due[f"host:h{n}"] for n in range(200)]
        assert ctl.stall.stalls == 1
        begun = ctl.alive_since
        outside = [at - begun for at in due if not begun + grace / 2 <= at <= begun + grace + 0.01]
        assert outside == [], (grace, outside)  # each in the grace's last half
        assert len({round(at, 3) for at in due}) > 150, sorted(due)[:5]  # spread, not one instant
    finally:
        ctl.store.close()


class _ReadsEndTheOutage:
    """A replica whose pass reads are the first to find the database back (its outage ended
    between the pass's start and its reads): what a replica meets right after a stop."""

    def __init__(self, hearing: list[bool]) -> None:
        self._hearing = hearing

    async def current(self) -> None:
        self._hearing[0] = True

    async def refreshed(self, keys: object) -> None:
        return None


def test_a_pass_whose_reads_find_the_database_back_gives_a_fresh_grace(tmp_path: Path) -> None:
    """A pass fired while the database was away (no stall seen yet), its reads answered once
    it is back: judged on the clock alone, every host unheard meanwhile was lost then."""
    config = tmp_path / "c.yaml"
    config.write_text(CONFIG)
    clock = [1000.0]
    ctl = Controller(
        load_cluster_config(config), open_store(str(tmp_path / "c.db")), clock=lambda: clock[0]
    )
    try:
        ctl.join(JoinRequest(name="h0", token=JOIN_TOKEN))
        hearing, ticks = [False], [0.0]
        ctl.passes.stall = StallWatch(lambda: hearing[0], lambda: ticks[0])
        ctl.replica = _ReadsEndTheOutage(hearing)  # type: ignore[assignment]
        committed: list[Fact] = []

        def commit(facts: list[Fact]) -> set[str]:
            committed.extend(facts)
            return set()

        ctl.commit = commit  # type: ignore[method-assign]
        grace = ctl.cfg.host_loss_grace
        ticks[0] = 9.0  # the database away 9 s: every timer is overdue
        clock[0] += 9.0
        asyncio.run(ctl.passes._shared_pass(["host:h0"], clock[0]))
        assert ctl.stall.stalls == 1 and committed == []  # the stall seen, before judging
        for _ in range(int(grace) + 1):  # then a grace with the database up and h0 silent
            ticks[0] += 1.0
            clock[0] += 1.0
            ctl.passes.stalled()
        asyncio.run(ctl.passes._shared_pass(["host:h0"], clock[0]))
        assert ctl.stall.stalls == 1
        assert [f.data["state"] for f in committed if f.kind == "state"] == ["lost"]
    finally:
        ctl.store.close()
