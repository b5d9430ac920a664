"""`xce-agent stop` of a joined agent is a planned stop: real agents, the real controller (and a
fake one that never answers the stop notice). The host is closed and drained before the worker
stops, it is neither lost nor listed for return while its agent is down, and it reopens when
the agent starts again (an admin's close is kept). The drain is bounded whatever the controller
does; `--no-drain` is the old stop."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.integration.agents import AgentProcess
from tests.integration.controller_proc import ControllerProcess
from tests.integration.fake_controller import HOST, INSTANCE, Exchange, FakeController
from tests.integration.helpers import wait_for
from xce_protocol.times import parse_time, times_to_epoch

GRACE = 3.0
CLUSTER = f"""\
version: 1
heartbeat_interval: 0.5s
host_loss_grace: {GRACE:g}s
agent_max_restart_backoff: 1s
rejoin_allowance: 1s
templates:
  default: {{slots: 1}}
"""
SLEEPER = [sys.executable, "-c", "import time\nwhile True: time.sleep(1)"]


class World:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.ctl = ControllerProcess(tmp, CLUSTER).start()
        self.api("POST", "/v1/expected", json={"instance_id": "i-1", "template": "default"})
        self.agent = AgentProcess(tmp, self.ctl.url, "i-1", "node1", token=self.ctl.join_token())
        self.agent.start()
        wait_for(lambda: self.host().get("state") == "open", timeout=20)
        wait_for(self.agent.worker_pid, timeout=20)

    def api(self, method: str, path: str, **kw: Any) -> Any:
        headers = self.ctl.admin_headers()
        answer = requests.request(method, self.ctl.url + path, timeout=10, headers=headers, **kw)
        return answer.json()

    def host(self) -> dict[str, Any]:
        result: dict[str, Any] = self.api("GET", "/v1/hosts/node1")
        return result

    def jobs(self) -> list[dict[str, Any]]:
        result: list[dict[str, Any]] = self.api("GET", "/v1/jobs")
        return result

    def stop(self, *flags: str) -> subprocess.Popen[str]:
        return cli(self.agent, "stop", *flags)

    def start_again(self) -> None:
        assert self.agent.proc is not None
        self.agent.proc.wait(timeout=10)  # it exited: reaped before the next one starts
        self.agent.start()

    def close(self) -> None:
        self.agent.stop()
        self.ctl.stop()


def cli(agent: AgentProcess, *args: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "xce_agent", *args, "--config", str(agent.config)]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def finished(proc: subprocess.Popen[str]) -> int:
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, (out, err)
    return proc.returncode


def past(seconds: float) -> None:
    """Let `seconds` pass: what is under test is what the controller does with the time."""
    until = time.monotonic() + seconds
    wait_for(lambda: time.monotonic() >= until, timeout=seconds + 5)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    yield w
    w.close()


def test_planned_stop_drains_the_jobs_then_stops_the_worker_and_the_host_is_not_lost(
    world: World,
) -> None:
    world.api("POST", "/v1/jobs", json={"command": ["sleep", "6"], "host": "node1"})
    wait_for(lambda: world.jobs()[0]["state"] == "running", timeout=20)
    stop = world.stop("--drain-timeout", "60s")
    wait_for(lambda: world.host()["state"] == "closed", timeout=10)
    host = world.host()
    assert host["reason"].startswith("agent stopped (planned)"), host
    assert host["notice"]["kind"] == "stop"
    # Draining: the worker runs its job on (unless, on a loaded machine, it already ended).
    if world.agent.worker_pid() is None:
        assert world.jobs()[0]["state"] == "done"
    out, err = stop.communicate(timeout=60)
    assert stop.returncode == 0, err
    assert "components stopped, agent exited" in out
    [job] = [times_to_epoch(j) for j in world.jobs()]
    assert job["state"] == "done" and job["requeues"] == 0, job  # finished, not requeued
    stopped = world.agent.worker()
    assert stopped["phase"] == "stopped"
    assert stopped["since"] >= job["finished_at"]  # the worker stopped after its job ended
    assert "the controller says the host's jobs are done" in world.agent.log()
    report = world.host()["report"]  # the last report: the worker is down, the agent stopped
    assert report["agent_state"] == "stopped" and report["components"][0]["state"] == "stopped"
    past(GRACE + 2)  # the host-loss grace passes with no heartbeat
    host = world.host()
    assert host["state"] == "closed" and host["notice"]["kind"] == "stop", host
    assert world.api("GET", "/v1/to-return") == []


def test_the_host_reopens_when_the_agent_starts_again(world: World) -> None:
    stop = world.stop()
    assert finished(stop) == 0
    assert world.host()["state"] == "closed"
    past(GRACE + 1)
    world.start_again()
    wait_for(lambda: world.host()["state"] == "open", timeout=20)
    assert world.host()["notice"] is None, world.agent.log()
    assert "agent started again after its planned stop" in world.host()["reason"]


def test_an_admins_close_is_kept_across_the_planned_stop(world: World) -> None:
    world.api("POST", "/v1/hosts/node1/close", json={})
    wait_for(lambda: world.host()["state"] == "closed", timeout=10)
    stop = world.stop()
    assert finished(stop) == 0
    assert world.host()["notice"]["kind"] == "stop"  # told, and the admin's close stays
    world.start_again()
    wait_for(lambda: world.host()["notice"] is None, timeout=20)
    assert world.host()["state"] == "closed"


def test_no_drain_stops_at_once_without_telling_the_controller(world: World) -> None:
    world.api("POST", "/v1/jobs", json={"command": ["sleep", "600"], "host": "node1"})
    wait_for(lambda: world.jobs()[0]["state"] == "running", timeout=20)
    started = time.monotonic()
    stop = world.stop("--no-drain")
    assert finished(stop) == 0
    assert time.monotonic() - started < 10  # the job's 600 s were not waited for
    assert world.agent.worker()["phase"] == "stopped"
    host = world.host()
    assert host["notice"] is None and "planned stop" not in world.agent.log()
    wait_for(lambda: world.host()["state"] == "lost", timeout=GRACE + 10)  # the old behaviour


def test_a_second_stop_without_a_drain_ends_the_drain_at_once(world: World) -> None:
    world.api("POST", "/v1/jobs", json={"command": ["sleep", "600"], "host": "node1"})
    wait_for(lambda: world.jobs()[0]["state"] == "running", timeout=20)
    draining = world.stop("--drain-timeout", "10m")
    wait_for(lambda: "waiting for its jobs" in world.agent.log(), timeout=20)
    started = time.monotonic()
    assert finished(world.stop("--no-drain")) == 0
    assert finished(draining) == 0
    assert time.monotonic() - started < 15  # not the 10 minutes
    assert "planned stop: asked again, without a drain" in world.agent.log()
    assert world.agent.worker()["phase"] == "stopped"


def _never_answer(exchange: Exchange) -> None:
    time.sleep(60)  # holds the connection: the agent's notice gets no answer


def test_the_drain_is_bounded_when_the_controller_never_answers(tmp_path: Path) -> None:
    server = FakeController(_never_answer, ("notice",))
    agent = AgentProcess(tmp_path, server.url, INSTANCE, HOST, worker=SLEEPER)
    agent.config.write_text(
        agent.config.read_text().replace("timeout: 2s,", "timeout: 30s, drain_on_stop: 3s,")
    )
    try:
        agent.start()
        wait_for(agent.worker_pid, timeout=20)
        wait_for(lambda: "controller contact: connected" in agent.log(), timeout=20)
        server.set_phase("hostile")  # the notice only: heartbeats and watches are answered
        started = time.monotonic()
        stop = cli(agent, "stop")
        _, err = stop.communicate(timeout=60)
        took = time.monotonic() - started
        assert stop.returncode == 0, err
        assert server.count("hostile", "notice") == 1  # the notice arrived, once
        assert 3.0 <= took < 3.0 + 8.0, took  # the bound, then the worker's stop
        assert "the drain's bound of 3s passed" in agent.log()
        assert agent.worker()["phase"] == "stopped"
    finally:
        agent.stop()
        server.close()


def test_a_decommission_during_the_drain_ends_it_and_the_worker_stays_stopped(
    world: World,
) -> None:
    world.api("POST", "/v1/jobs", json={"command": ["sleep", "600"], "host": "node1"})
    wait_for(lambda: world.jobs()[0]["state"] == "running", timeout=20)
    draining = world.stop("--drain-timeout", "10m")
    wait_for(lambda: "waiting for its jobs" in world.agent.log(), timeout=20)
    started = time.monotonic()
    # Its own drain of 0 s, its job requeued: decommissioned at once, the 410 on the next call.
    body = {"reason": "gone", "drain_timeout": 0, "policy": "requeue"}
    world.api("POST", "/v1/hosts/node1/decommission", json=body)
    assert finished(draining) == 0  # the agent ends: it does not hang on the drain
    assert time.monotonic() - started < 20  # not the 10 minutes
    log = world.agent.log()
    assert "planned stop: the host was decommissioned; stopping the components" in log, log
    # Started once, before the stop; never again after the decommission.
    assert log.count("worker: stopped -> starting") == 1, log
    # Stopped by the agent, or exited first by itself on hearing of the decommission (the
    # sample worker's own code, "held"): both down for good; a full run once saw the second.
    assert world.agent.worker()["phase"] in ("stopped", "held")
    assert world.agent.state()["controller"]["state"] == "decommissioned"
    assert world.agent.state()["tombstone"]["reason"].startswith("gone")
    assert world.agent.proc is not None and world.agent.proc.wait(timeout=10) == 0


def test_status_shows_the_drain_since_when_and_its_bound(world: World) -> None:
    world.api("POST", "/v1/jobs", json={"command": ["sleep", "600"], "host": "node1"})
    wait_for(lambda: world.jobs()[0]["state"] == "running", timeout=20)
    before = time.time()
    draining = world.stop("--drain-timeout", "10m")
    wait_for(lambda: "waiting for its jobs" in world.agent.log(), timeout=20)
    wait_for(lambda: world.agent.state().get("planned_stop"), timeout=10)
    text, _ = cli(world.agent, "status").communicate(timeout=30)
    assert "planned stop: draining since " in text, text
    assert "bound 600s: the worker stops by " in text, text
    shown, _ = cli(world.agent, "status", "--json").communicate(timeout=30)
    drain = json.loads(shown)["planned_stop"]
    since, deadline = parse_time(drain["since"]), parse_time(drain["deadline"])
    assert since is not None and deadline is not None, drain
    assert before - 1 <= since <= time.time() and drain["bound"] == 600, drain
    assert deadline == pytest.approx(since + 600, abs=0.01), drain
    assert drain["event_id"].startswith("agent-stop-"), drain
    assert finished(world.stop("--no-drain")) == 0
    assert finished(draining) == 0
    assert world.agent.state()["planned_stop"] is None  # over: the last state says so
    text, _ = cli(world.agent, "status").communicate(timeout=30)
    assert "planned stop" not in text, text


def test_stop_without_an_agent_tells_the_controller_itself(world: World) -> None:
    world.api("POST", "/v1/jobs", json={"command": ["sleep", "600"], "host": "node1"})
    wait_for(lambda: world.jobs()[0]["state"] == "running", timeout=20)
    world.agent.term()  # `systemctl stop xce-agent`: the worker and its job run on, unheard
    worker = world.agent.worker_pid()
    assert worker is not None
    out, err = world.stop().communicate(timeout=60)
    assert "no agent was running; stopped worker" in out, (out, err)
    assert "the controller was told (a stop notice): the host is closed, not lost" in out, out
    assert len(out.strip().splitlines()) == 1, out
    host = world.host()
    assert host["state"] == "closed" and host["notice"]["kind"] == "stop", host
    wait_for(lambda: world.jobs()[0]["requeues"] == 1, timeout=10)  # requeued at once
    assert world.jobs()[0]["state"] == "pending"
    past(GRACE + 2)  # no heartbeat for longer than the grace: still not lost
    host = world.host()
    assert host["state"] == "closed" and host["notice"]["kind"] == "stop", host
    assert world.api("GET", "/v1/to-return") == []
    world.agent.start()  # the next agent's start ends the notice
    wait_for(lambda: world.host()["state"] == "open", timeout=20)
    assert world.host()["notice"] is None


def test_stop_without_an_agent_says_so_when_the_controller_cannot_be_told(world: World) -> None:
    world.agent.term()
    world.ctl.stop()
    started = time.monotonic()
    out, err = world.stop().communicate(timeout=60)
    took = time.monotonic() - started
    assert "no agent was running; stopped worker" in out, (out, err)
    assert "the controller was not told (" in out, out
    assert "the host is lost after the grace" in out and len(out.strip().splitlines()) == 1
    assert took < 5.0 + 10.0, took  # the notice's bound, then the worker's stop
    assert world.agent.worker()["phase"] == "stopped"


def test_stop_without_an_agent_and_no_drain_tells_nobody(world: World) -> None:
    world.agent.term()
    out, _ = world.stop("--no-drain").communicate(timeout=60)
    assert "the controller was not told (--no-drain)" in out, out
    assert world.host()["notice"] is None


def test_a_killed_agents_drain_is_not_shown_by_the_next_agent(world: World) -> None:
    world.api("POST", "/v1/jobs", json={"command": ["sleep", "600"], "host": "node1"})
    wait_for(lambda: world.jobs()[0]["state"] == "running", timeout=20)
    draining = world.stop("--drain-timeout", "10m")
    wait_for(lambda: world.agent.state().get("planned_stop"), timeout=20)
    assert world.agent.proc is not None
    world.agent.proc.kill()  # mid-drain: its last state still says draining
    draining.communicate(timeout=60)  # the command stops what the agent left
    assert world.agent.state()["planned_stop"] is not None
    world.start_again()
    wait_for(lambda: world.agent.state().get("lifecycle") == "running", timeout=20)
    assert world.agent.state()["planned_stop"] is None
