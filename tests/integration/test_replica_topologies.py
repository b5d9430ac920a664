"""The agent in both topologies of docs/ha.md against live replicas on one PostgreSQL
database: its own list of replica URLs, and Debian's HAProxy (examples/haproxy.cfg) in front
of them. Both replicas serve at once; the one the agent talks to is killed (-9) while its
worker runs a job.

What must hold: the agent goes on through the other replica with its credential (no second
join), keeps heartbeating, its worker is neither stopped nor restarted and the job given
through the survivor runs; and a decommission decided there is still obeyed (the worker
stopped for good). Behind HAProxy the heartbeats are first seen on both replicas, so the
balancer really spread them.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.agents import AgentProcess
from tests.integration.helpers import alive, wait_for
from tests.integration.replica_set import JOIN_TOKEN, Replicas, call
from tests.integration.test_haproxy import HAPROXY, Haproxy
from xce_controller.store.open import open_store
from xce_protocol.times import parse_time

HEARTBEATS = re.compile(
    r'^xce_controller_request_duration_seconds_count\{[^}]*endpoint="/v1/hosts/\{name\}/heartbeat"'
    r"[^}]*\} (\S+)$",
    re.M,
)


def heartbeats_served(url: str) -> float:
    """Heartbeats this replica answered, from its own /metrics."""
    return sum(float(n) for n in HEARTBEATS.findall(call(url, "GET", "/metrics").text))


def joins(dsn: str, instance: str) -> int:
    store = open_store(dsn)
    try:
        return sum(
            1 for f in store.facts() if f.kind == "joined" and f.data.get("instance_id") == instance
        )
    finally:
        store.close()


@pytest.fixture
def two(tmp_path: Path, pg_dsn: str) -> Iterator[Replicas]:
    replicas = Replicas(tmp_path, pg_dsn, 2).start()
    yield replicas
    replicas.stop()


@pytest.fixture(params=["own-list", "haproxy"])
def entry(
    request: pytest.FixtureRequest, tmp_path: Path, two: Replicas
) -> Iterator[str | list[str]]:
    """What the agent is given as `controller.url`: the replicas' URLs, or HAProxy's."""
    if request.param == "own-list":
        yield two.urls
        return
    if HAPROXY is None:
        pytest.skip("haproxy is not installed (Debian: apt-get install haproxy)")
    proxy = Haproxy(tmp_path, [p.port for p in two.procs])
    yield proxy.url
    proxy.close()


def test_an_agent_carries_on_through_a_replica_kill_and_still_obeys_a_decommission(
    tmp_path: Path, pg_dsn: str, two: Replicas, entry: str | list[str]
) -> None:
    a, b = two.urls
    agent = AgentProcess(tmp_path, entry, "i-1", "n1", token=JOIN_TOKEN).start()
    try:
        wait_for(lambda: agent.worker_pid() is not None, timeout=30)
        worker = agent.worker_pid()
        assert worker is not None
        if isinstance(entry, str):  # the balancer sends heartbeats to both replicas
            wait_for(lambda: heartbeats_served(a) > 0 and heartbeats_served(b) > 0, timeout=30)
        incarnation = call(b, "GET", "/v1/hosts/n1").json()["incarnation"]
        two[0].kill()  # the first of the agent's list, one of HAProxy's two

        def last_seen() -> float:
            return parse_time(call(b, "GET", "/v1/hosts/n1").json().get("last_seen")) or 0.0

        after_kill = heartbeats_served(b)
        seen = last_seen()
        wait_for(lambda: last_seen() > seen and heartbeats_served(b) > after_kill, timeout=15)
        job = call(b, "POST", "/v1/jobs", {"command": ["sleep", "60"], "host": "n1"}).json()
        wait_for(lambda: _job_state(b, job["id"]) == "running", timeout=30)
        record = call(b, "GET", "/v1/hosts/n1").json()
        assert record["state"] == "open" and record["incarnation"] == incarnation
        assert agent.worker_pid() == worker and alive(worker)  # never stopped or restarted
        log = agent.log()
        assert "joining again" not in log and "refused" not in log, log
        # The survivor's decommission is the controller's refusal: obeyed, for good.
        gone = call(b, "POST", "/v1/hosts/n1/decommission", {"drain_timeout": 1, "reason": "t"})
        assert gone.status_code == 200, gone.text
        wait_for(lambda: agent.worker().get("phase") == "stopped", timeout=30)
        assert agent.state()["controller"]["state"] == "decommissioned"
        assert not alive(worker)
    finally:
        agent.stop()
    assert joins(pg_dsn, "i-1") == 1  # one join, across the kill


def _job_state(url: str, job: int) -> str:
    jobs: list[dict[str, object]] = call(url, "GET", "/v1/jobs").json()
    return str(next(j for j in jobs if j["id"] == job)["state"])
