"""A real agent watching the metadata emulator: notices reach the controller and the worker, an
Azure event is approved once drained, and an OS shutdown requeues the host's jobs at once."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.integration.agents import SAMPLE_WORKER, AgentProcess
from tests.integration.controller_proc import ControllerProcess
from tests.integration.helpers import wait_for
from tests.metadata_emulator import Emulator, rfc1123, spot
from xce_protocol.times import parse_time, times_to_epoch

CLUSTER = """\
version: 1
heartbeat_interval: 0.5s
host_loss_grace: 30s
agent_max_restart_backoff: 1s
rejoin_allowance: 1s
templates:
  default: {slots: 1}
notices: {margin: 10s}
"""

# Records the notice file each time the notice signal arrives.
CHECKPOINTER = """\
import json, os, signal, sys, time
out = sys.argv[1]
def noticed(signum, frame):
    with open(os.environ["XCE_NOTICE_FILE"]) as f:
        notice = json.load(f)
    with open(out, "a") as f:
        f.write(json.dumps({"signal": signum, **notice}) + "\\n")
signal.signal(signal.SIGUSR1, noticed)
while True:
    time.sleep(1)
"""


class Agent(AgentProcess):
    """An agent with its own environment (a PATH whose systemctl says the system stops)."""

    env: dict[str, str] | None = None

    def start(self) -> Agent:
        with open(self.dir / "agent.log", "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "xce_agent", "run", "--config", str(self.config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
            )
        return self


class World:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.emulator = Emulator().start()
        self.ctl = ControllerProcess(tmp, CLUSTER).start()
        self.agents: list[Agent] = []

    def api(self, method: str, path: str, **kw: Any) -> Any:
        headers = self.ctl.admin_headers()
        return requests.request(
            method, self.ctl.url + path, timeout=10, headers=headers, **kw
        ).json()

    def agent(
        self,
        provider: str,
        worker: list[str] | None = None,
        component: str = "",
        env: dict[str, str] | None = None,
    ) -> Agent:
        cloud = (
            f"cloud: {{provider: {provider}, metadata_url: '{self.emulator.url}', "
            "poll_interval: 0.2s}\n"
        )
        agent = Agent(
            self.tmp,
            self.ctl.url,
            "i-1",
            "node1",
            worker=worker,
            extra=cloud,
            token=self.ctl.join_token(),
        )
        if component:
            text = agent.config.read_text()
            agent.config.write_text(
                text.replace("        stop_timeout: 5s\n", f"        stop_timeout: 5s\n{component}")
            )
        agent.env = env
        agent.start()
        self.agents.append(agent)
        wait_for(lambda: self.host().get("state") == "open", timeout=20)
        return agent

    def host(self) -> dict[str, Any]:
        result: dict[str, Any] = self.api("GET", "/v1/hosts/node1")
        return result

    def close(self) -> None:
        for agent in self.agents:
            agent.stop()
        self.ctl.stop()
        self.emulator.close()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    yield w
    w.close()


def test_spot_notice_closes_the_host_and_signals_the_worker(world: World, tmp_path: Path) -> None:
    script = tmp_path / "checkpointer.py"
    script.write_text(CHECKPOINTER)
    out = tmp_path / "noticed.jsonl"
    agent = world.agent(
        "aws",
        worker=[sys.executable, str(script), str(out)],
        component="        notice_signal: SIGUSR1\n",
    )
    wait_for(agent.worker_pid, timeout=20)
    assert world.emulator.wait_for(lambda st: len(st.requests) > 6, 10)
    when = time.time() + 120
    applied = world.emulator.change(spot(when))
    wait_for(lambda: world.host()["state"] == "closed", timeout=10)
    latency = time.monotonic() - applied.monotonic
    notice = times_to_epoch(world.host()["notice"])  # its times: seconds
    assert notice["kind"] == "preemption" and notice["provider"] == "aws"
    assert abs(notice["deadline"] - int(when)) <= 1
    assert latency < 5.0
    wait_for(out.exists, timeout=10)
    [seen] = [json.loads(line) for line in out.read_text().splitlines()]
    assert seen["signal"] == signal.SIGUSR1 and seen["kind"] == "preemption"
    assert agent.worker_pid() is not None  # signalled, not stopped


def test_azure_event_is_approved_once_the_host_is_drained(world: World) -> None:
    world.agent("azure")
    event = {
        "EventId": "A1B2",
        "EventStatus": "Scheduled",
        "EventType": "Preempt",
        "ResourceType": "VirtualMachine",
        "Resources": ["vm0"],
        "NotBefore": rfc1123(time.time() + 30),
        "Description": "spot eviction",
        "EventSource": "Platform",
        "DurationInSeconds": -1,
    }
    world.emulator.change({"azure.events": [event]})
    # No jobs: drained as soon as the requeue point (NotBefore - margin) has passed.
    assert world.emulator.wait_for(lambda st: st.approvals == ["A1B2"], 40)
    assert world.host()["notice"]["acted"] is True


def test_os_shutdown_requeues_the_hosts_jobs_at_once(world: World, tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "systemctl"
    fake.write_text("#!/bin/sh\necho stopping\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    agent = world.agent("aws", worker=SAMPLE_WORKER, env=env)
    job = world.api("POST", "/v1/jobs", json={"command": ["sleep", "600"], "host": "node1"})
    wait_for(lambda: world.api("GET", "/v1/jobs")[0]["state"] == "running", timeout=20)
    assert agent.proc is not None
    started = time.monotonic()
    agent.proc.send_signal(signal.SIGTERM)
    wait_for(lambda: world.api("GET", "/v1/jobs")[0]["state"] == "pending", timeout=10)
    requeued_after = time.monotonic() - started
    [listed] = world.api("GET", "/v1/jobs")
    assert listed["id"] == job["id"] and "shutdown notice" in listed["note"]
    assert requeued_after < 3.0  # the host-loss grace is 30 s
    agent.proc.wait(timeout=20)
    assert "notice accepted, final report sent" in agent.log()
    assert world.host()["report"]["agent_state"] == "stopping"


def test_os_shutdown_with_the_controller_gone_still_stops_the_worker(
    world: World, tmp_path: Path
) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "systemctl"
    fake.write_text("#!/bin/sh\necho stopping\n")
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    agent = world.agent("aws", env=env)
    wait_for(agent.worker_pid, timeout=20)
    pid = agent.worker_pid()
    world.ctl.kill()  # nobody to tell
    assert agent.proc is not None and pid is not None
    started = time.monotonic()
    agent.proc.send_signal(signal.SIGTERM)
    agent.proc.wait(timeout=30)
    assert time.monotonic() - started < 15  # the notice is bounded, then the usual stop
    assert agent.worker()["phase"] == "stopped"
    assert "notice retry, no final report" in agent.log()


def test_status_shows_the_pending_notice_and_nothing_once_it_ended(world: World) -> None:
    agent = world.agent("aws")

    def status(*args: str) -> str:
        command = [sys.executable, "-m", "xce_agent", "status", "--config", str(agent.config)]
        done = subprocess.run([*command, *args], capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
        return done.stdout

    def pending() -> list[dict[str, Any]]:
        notices: list[dict[str, Any]] = json.loads(status("--json"))["notices"]
        return notices

    spot_path = "/latest/meta-data/spot/instance-action"
    assert world.emulator.wait_for(lambda st: ("GET", spot_path) in st.requests, 10)
    assert "notice:" not in status() and pending() == []
    when = time.time() + 120
    applied = world.emulator.change(spot(when))
    wait_for(lambda: pending() != [], timeout=10)
    [shown] = pending()
    assert (shown["kind"], shown["provider"], shown["event_id"]) == (
        "preemption",
        "aws",
        "aws-spot",
    )
    deadline, since = parse_time(shown["deadline"]), parse_time(shown["since"])  # RFC 3339
    assert isinstance(shown["deadline"], str) and deadline is not None and since is not None
    assert abs(deadline - int(when)) <= 1
    assert applied.wall - 1 <= since <= time.time()
    acts = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(deadline))
    assert f"notice:      preemption [aws aws-spot]: platform acts at {acts} (in " in status()
    world.emulator.change({"aws.spot": None})
    wait_for(lambda: pending() == [], timeout=10)
    assert "notice:" not in status()


def test_a_job_requeued_ahead_of_a_spot_notice_is_stopped_on_the_old_host(world: World) -> None:
    import psutil

    world.agent("aws", worker=SAMPLE_WORKER)
    marker = "600.25"  # a duration no other process uses: the job's copy is found by it
    world.api("POST", "/v1/jobs", json={"command": ["sleep", marker], "host": "node1"})
    wait_for(lambda: world.api("GET", "/v1/jobs")[0]["state"] == "running", timeout=20)

    def copies() -> int:
        return sum(
            1 for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", marker]
        )

    assert copies() == 1
    world.emulator.change(spot(time.time() + 11))  # requeued at deadline - margin: in 1 s
    wait_for(lambda: world.api("GET", "/v1/jobs")[0]["requeues"] == 1, timeout=15)
    wait_for(lambda: copies() == 0, timeout=15)  # the old host's copy no longer runs
    [job] = world.api("GET", "/v1/jobs")
    assert job["state"] == "pending" and "preemption notice (aws)" in job["note"]
