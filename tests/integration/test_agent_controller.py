"""Real agents, real sample workers, the real controller on 127.0.0.1: the whole protocol."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.integration.agents import AgentProcess
from tests.integration.controller_proc import ControllerProcess
from tests.integration.helpers import alive, wait_for

CLUSTER = """\
version: 1
heartbeat_interval: 0.5s
host_loss_grace: 5s
agent_max_restart_backoff: 1s
rejoin_allowance: 1s
unmatched_joins: {unmatched}
defaults: {{join_deadline: 10m, drain_timeout: 30s, drain_policy: requeue}}
templates:
  default: {{slots: 1}}
  big: {{slots: 3, host_groups: [big]}}
"""


@pytest.fixture
def workdir(tmp_path: Path) -> Iterator[Path]:
    yield tmp_path


class World:
    def __init__(self, tmp: Path, unmatched: str = "accept") -> None:
        self.tmp = tmp
        self.ctl = ControllerProcess(tmp, CLUSTER.format(unmatched=unmatched)).start()
        self.agents: list[AgentProcess] = []

    def api(self, method: str, path: str, **kw: Any) -> Any:
        headers = self.ctl.admin_headers()
        response = requests.request(method, self.ctl.url + path, timeout=10, headers=headers, **kw)
        return response.json()

    def expect(self, instance: str, **body: Any) -> None:
        self.api(
            "POST", "/v1/expected", json={"instance_id": instance, "template": "default", **body}
        )

    def agent(self, instance: str, host: str, **kw: Any) -> AgentProcess:
        kw.setdefault("token", self.ctl.join_token())
        agent = AgentProcess(self.tmp, self.ctl.url, instance, host, **kw).start()
        self.agents.append(agent)
        return agent

    def record(self, instance_id: str) -> dict[str, Any]:
        """An instance's record, found by instance id (host paths take names only)."""
        hosts = self.api("GET", "/v1/hosts", params={"all": "true"})
        return next(h for h in hosts if h["instance_id"] == instance_id)

    def refusals(self, code: str) -> float:
        """How many requests the controller refused with `code` (its /metrics)."""
        headers = self.ctl.admin_headers()
        text = requests.get(self.ctl.url + "/metrics", timeout=10, headers=headers).text
        series = f'xce_controller_refusals_total{{code="{code}"'
        return sum(
            float(line.rsplit(" ", 1)[1]) for line in text.splitlines() if line.startswith(series)
        )

    def host(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.api("GET", f"/v1/hosts/{name}")
        return result

    def close(self) -> None:
        for agent in self.agents:
            agent.stop()
        self.ctl.stop()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    yield w
    w.close()


def contact_detail(agent: AgentProcess) -> str:
    return str(agent.state().get("controller", {}).get("detail", ""))


def environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def test_provisioned_join_by_instance_id_hands_the_template_to_the_worker(world: World) -> None:
    world.expect("i-1", template="big")
    agent = world.agent("i-1", "node1")
    wait_for(agent.worker_pid)
    host = world.host("node1")
    assert host["state"] == "open" and host["provisioned"] and host["template"] == "big"
    pid = agent.worker_pid()
    assert pid is not None
    env = environ(pid)
    assert env["XCE_SLOTS"] == "3" and env["XCE_TEMPLATE"] == "big"
    assert env["XCE_HOST_NAME"] == "node1" and env["XCE_INSTANCE_ID"] == "i-1"
    template = json.loads(Path(env["XCE_TEMPLATE_FILE"]).read_text())
    assert template["template"]["host_groups"] == ["big"]
    assert agent.state()["controller"]["state"] == "connected"


def test_join_matched_by_host_name_must_carry_the_expected_instance_id(world: World) -> None:
    world.expect("i-cloud", expected_name="node2")
    agent = world.agent("i-other", "node2")
    wait_for(lambda: "belongs to instance i-cloud" in contact_detail(agent))
    assert "join token refused: HTTP 409 duplicate" in contact_detail(agent)
    assert agent.worker_pid() is None and world.host("node2")["state"] == "expected"


def test_unmatched_join_accepted_with_default_template(world: World) -> None:
    agent = world.agent("i-stray", "stray1")
    wait_for(agent.worker_pid)
    host = world.host("stray1")
    assert host["provisioned"] is False and host["template"] == "default"


def test_unmatched_join_refused_leaves_the_worker_unstarted(tmp_path: Path) -> None:
    w = World(tmp_path, unmatched="refuse")
    try:
        agent = w.agent("i-stray", "stray1")
        # A definite refusal is shown as one, with its reason, not as "unreachable".
        wait_for(lambda: agent.state().get("controller", {}).get("state") == "refused")
        assert "unmatched" in agent.state()["controller"]["detail"]
        status = subprocess.run(
            [sys.executable, "-m", "xce_agent", "status", "--state-dir", str(agent.dir / "state")],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        assert "refused by the controller" in status.splitlines()[0]
        assert "unmatched" in status.splitlines()[0]
        # Two more refused joins (the agent retries within max_retry_delay): still unstarted.
        seen = w.refusals("refused_unmatched")
        wait_for(lambda: w.refusals("refused_unmatched") >= seen + 2, timeout=15)
        assert agent.worker().get("phase") == "stopped"
    finally:
        w.close()


def test_duplicate_instance_id_is_refused(world: World) -> None:
    world.expect("i-dup")
    first = world.agent("i-dup", "node-a")
    wait_for(first.worker_pid)
    second = world.agent("i-dup", "node-b")
    wait_for(lambda: "duplicate" in second.state().get("controller", {}).get("detail", ""))
    assert second.worker().get("phase") == "stopped"
    assert first.worker_pid() is not None


def test_overdue_record_then_late_join(world: World) -> None:
    world.expect("i-late", deadline_in=0.3)
    wait_for(lambda: world.record("i-late")["state"] == "overdue")
    assert [h["instance_id"] for h in world.api("GET", "/v1/to-return")] == ["i-late"]
    agent = world.agent("i-late", "late1")
    wait_for(agent.worker_pid)
    assert world.host("late1")["state"] == "open"
    assert world.api("GET", "/v1/to-return") == []


def test_controller_down_at_boot_then_back(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = CLUSTER.format(unmatched="accept") + "auth: {join_token: boot-join-token}\n"
    ctl = ControllerProcess(tmp_path, config)
    ctl.port = port
    url = f"http://127.0.0.1:{port}"
    agent = AgentProcess(tmp_path, url, "i-1", "node1", token="boot-join-token").start()
    try:
        wait_for(lambda: agent.state().get("lifecycle") == "running")
        wait_for(lambda: agent.state().get("controller", {}).get("state") == "unreachable")
        assert agent.worker().get("phase") == "stopped"
        ctl.start()
        wait_for(agent.worker_pid, timeout=15)
    finally:
        agent.stop()
        ctl.stop()


def test_controller_restart_leaves_running_workers_alone(world: World) -> None:
    agent = world.agent("i-1", "node1")
    wait_for(agent.worker_pid)
    pid = agent.worker_pid()
    world.ctl.kill()
    wait_for(lambda: agent.state()["controller"]["state"] == "unreachable")
    assert agent.worker_pid() == pid
    world.ctl.start()
    wait_for(lambda: agent.state()["controller"]["state"] == "connected", timeout=15)
    assert pid is not None and agent.worker_pid() == pid and alive(pid)


@pytest.mark.parametrize(
    ("policy", "final"), [("requeue", "pending"), ("kill", "killed"), ("wait", "done")]
)
def test_decommission_stops_the_worker_for_good(world: World, policy: str, final: str) -> None:
    world.expect("i-1", expected_name="node1")
    agent = world.agent("i-1", "node1")
    wait_for(agent.worker_pid)
    pid = agent.worker_pid()
    duration = "2" if policy == "wait" else "60"
    job = world.api("POST", "/v1/jobs", json={"command": ["sleep", duration], "host": "node1"})
    wait_for(lambda: world.api("GET", "/v1/jobs")[0]["state"] == "running")
    world.api(
        "POST",
        "/v1/hosts/node1/decommission",
        json={"policy": policy, "drain_timeout": 1, "reason": f"reclaim {policy}"},
    )
    assert world.host("node1")["state"] == "draining"
    assert agent.worker_pid() == pid  # still draining: the worker stops once the drain ends
    wait_for(lambda: agent.worker().get("phase") == "stopped", timeout=15)
    assert agent.state()["tombstone"]["reason"].startswith(f"reclaim {policy}")
    assert agent.state()["controller"]["state"] == "decommissioned"
    assert world.api("GET", "/v1/jobs")[0]["state"] == final
    assert job["id"] == 1
    # Honoured across an agent restart: the worker is not started again.
    agent.restart()
    wait_for(lambda: agent.state().get("lifecycle") == "running")
    assert agent.state()["controller"]["state"] == "decommissioned"
    # The tombstone is read at boot, before the agent says it runs: it opens no link and
    # starts no worker, so there is nothing later to wait for.
    assert agent.worker().get("phase") == "stopped" and not agent.worker().get("pid")


def test_new_instance_from_the_same_disk_is_not_affected(world: World) -> None:
    world.expect("i-1", expected_name="node1")
    agent = world.agent("i-1", "node1")
    wait_for(agent.worker_pid)
    world.api("POST", "/v1/hosts/node1/decommission", json={"reason": "gone"})
    wait_for(lambda: agent.state().get("tombstone"))
    agent.term()
    world.expect("i-2", expected_name="node1")
    agent.config.write_text(agent.config.read_text().replace("id: i-1", "id: i-2"))
    agent.start()
    wait_for(agent.worker_pid)
    assert agent.state()["tombstone"] is None
    assert world.host("node1")["instance_id"] == "i-2"


def test_worker_rejoin_refused_code_is_confirmed_with_the_controller(
    world: World, tmp_path: Path
) -> None:
    marker = tmp_path / "exited-once"
    script = tmp_path / "worker.py"
    script.write_text(
        "import pathlib, sys, time\n"
        f"m = pathlib.Path({str(marker)!r})\n"
        "if not m.exists():\n    m.write_text('x'); sys.exit(100)\n"
        "time.sleep(600)\n"
    )
    agent = world.agent("i-1", "node1", worker=[sys.executable, str(script)])
    wait_for(marker.exists)
    wait_for(lambda: agent.worker_pid() and agent.worker().get("restarts") == 1)
    assert agent.state().get("tombstone") is None
    assert "controller says this host is active" in agent.log()


def test_a_job_that_cannot_start_fails_alone_and_the_worker_stays(world: World) -> None:
    # A submitted command that does not exist used to crash the sample worker at every
    # restart (the job stays assigned) until its crash loop stopped it for good.
    agent = world.agent("i-1", "node1")
    wait_for(agent.worker_pid)
    pid = agent.worker_pid()
    bad = world.api("POST", "/v1/jobs", json={"command": ["/nonexistent/job"], "host": "node1"})

    def job(job_id: int) -> dict[str, Any]:
        return dict(next(j for j in world.api("GET", "/v1/jobs") if j["id"] == job_id))

    wait_for(lambda: job(bad["id"])["state"] == "failed", timeout=15)
    assert job(bad["id"])["exit_code"] == 127
    good = world.api("POST", "/v1/jobs", json={"command": ["true"], "host": "node1"})
    wait_for(lambda: job(good["id"])["state"] == "done", timeout=15)
    assert agent.worker_pid() == pid and agent.worker().get("restarts") == 0
    world.api("POST", "/v1/hosts/node1/decommission", json={"reason": "gone"})
    wait_for(lambda: agent.worker().get("phase") == "stopped", timeout=15)
    assert agent.state()["tombstone"]["reason"].startswith("gone")
