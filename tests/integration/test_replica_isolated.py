"""One replica cut off from the database while the other keeps it (a partition between the
first replica's machine and the database): the hosts that beat through the cut-off replica
must not be declared lost by the other.

The cut-off replica cannot share the heartbeats it hears, so the other sees those hosts
silent. Once it knows (a read of the log unanswered for 1 s, a failed call) it answers
heartbeats 503 and its /healthz 503 "isolated" (after isolated_after: an eighth of the
grace, 2 s at most), and the agent moves to the next URL, where
it is heard. Before, it answered 200 from memory for as long as the cut lasted: the other
replica declared the host lost after its grace and requeued its running job, which ran twice
once the cut healed.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.integration.agents import AgentProcess
from tests.integration.controller_proc import ControllerProcess
from tests.integration.helpers import alive, wait_for
from tests.integration.replica_set import CONFIG, JOIN_TOKEN, call
from tests.integration.test_commit_outcome import MuteProxy, _recv, _send
from tests.integration.test_outcome_unknown_replicas import through
from tests.pg_server import PgCluster
from xce_controller.store.open import open_store

# A grace of 8 s: isolated after 1 s (an eighth), then the heartbeat interval and the move.
GRACED = CONFIG.replace("host_loss_grace: 4s", "host_loss_grace: 8s")
CUT = 20.0  # seconds the first replica cannot reach the database: 2.5 graces


class Blackhole(MuteProxy):
    """127.0.0.1:port to the database's unix socket (test_commit_outcome's proxy, whose
    accepting and closing it keeps); while partitioned, nothing is forwarded either way and
    connections stay open (a partition, not a refusal). What was sent meanwhile is held and
    delivered once the cut heals, as TCP's retransmissions do."""

    def __init__(self, server_socket: str) -> None:
        self.healed = threading.Event()
        self.healed.set()
        self.held = 0  # chunks held back while cut: the cut was met
        super().__init__(server_socket)

    def _up(self, client: socket.socket, server: socket.socket) -> None:
        self._pump(client, server)

    def _down(self, server: socket.socket, client: socket.socket) -> None:
        self._pump(server, client)

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := _recv(source):
                if not self.healed.is_set():
                    self.held += 1
                    self.healed.wait()
                _send(sink, data)
        finally:
            source.close()
            sink.close()

    def partition(self) -> None:
        self.healed.clear()

    def heal(self) -> None:
        self.healed.set()


@pytest.fixture
def cut_off(
    tmp_path: Path, pg: PgCluster
) -> Iterator[tuple[ControllerProcess, ControllerProcess, Blackhole, str]]:
    direct = pg.database()
    proxy = Blackhole(f"{pg.primary.socket}/.s.PGSQL.{pg.primary.port}")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = ControllerProcess(tmp_path / "a", GRACED, db=through(proxy, pg, direct))
    second = ControllerProcess(tmp_path / "b", GRACED, db=direct)
    try:
        first.start()
        second.start()
        yield first, second, proxy, direct
    finally:
        proxy.heal()
        first.stop()
        second.stop()
        proxy.close()


def _states(dsn: str) -> list[str]:
    store = open_store(dsn)
    try:
        return [str(f.data["state"]) for f in store.facts() if f.kind == "state"]
    finally:
        store.close()


def _health(ctl: ControllerProcess) -> tuple[int, str]:
    r = requests.get(ctl.url + "/healthz", timeout=5)
    return r.status_code, str(r.json()["status"])


def test_hosts_beating_through_a_replica_cut_off_from_the_database_are_not_lost(
    tmp_path: Path, cut_off: tuple[ControllerProcess, ControllerProcess, Blackhole, str]
) -> None:
    first, second, proxy, dsn = cut_off
    a, b = first.url, second.url
    agent = AgentProcess(tmp_path, [a, b], "i-1", "n1", token=JOIN_TOKEN).start()
    try:
        wait_for(lambda: agent.worker_pid() is not None, timeout=30)
        worker = agent.worker_pid()
        job = call(b, "POST", "/v1/jobs", {"command": ["sleep", "120"], "host": "n1"}).json()

        def job_state() -> str:
            jobs: list[dict[str, object]] = call(b, "GET", "/v1/jobs").json()
            return str(next(j for j in jobs if j["id"] == job["id"])["state"])

        wait_for(lambda: job_state() == "running", timeout=30)
        assert _health(first) == (200, "ok")
        proxy.partition()
        wait_for(lambda: _health(first) == (503, "isolated"), timeout=15)
        wait_for(lambda: f"now at {b}" in agent.log(), timeout=15)  # moved, at the 503
        done = threading.Event()
        done.wait(CUT)  # the cut lasts: past two graces of the second replica's timers
        assert proxy.held > 0  # the first replica's database traffic was cut
        change = call(a, "POST", "/v1/expected", {"instance_id": "i-9", "template": "default"})
        assert change.status_code == 503, change.text  # refused there: storage unavailable
        assert "lost" not in _states(dsn), _states(dsn)
        assert job_state() == "running"
        assert call(b, "GET", "/v1/hosts/n1").json()["state"] == "open"
        proxy.heal()
        wait_for(lambda: _health(first) == (200, "ok"), timeout=20)  # back in rotation
        # and saying its storage is fine again, before any change through it succeeded
        storage = requests.get(a + "/healthz", timeout=5).json()["storage"]
        assert storage == "ok", storage
        assert call(a, "GET", "/v1/hosts/n1").json()["state"] == "open"
        assert agent.worker_pid() == worker and worker is not None and alive(worker)
        assert "lost" not in _states(dsn) and job_state() == "running"
        log = agent.log()
        assert "joining again" not in log and "refused" not in log, log
    finally:
        agent.stop()
