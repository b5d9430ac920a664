"""The version-skew policy of docs/upgrades.md, both ways, with the real code of the previous
protocol version taken from this repository's history: an agent of the previous minor version
joins, works and is decommissioned by this controller, and this agent does the same with the
controller of the previous minor version. A controller refuses an agent of another major."""

from __future__ import annotations

import os
import re
import shutil
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
from tests.integration.helpers import wait_for
from xce_protocol.protocol import PROTOCOL

ROOT = Path(__file__).resolve().parents[2]
CLUSTER = """\
version: 1
heartbeat_interval: 0.5s
host_loss_grace: 10s
agent_max_restart_backoff: 1s
rejoin_allowance: 1s
defaults: {join_deadline: 10m, drain_timeout: 30s, drain_policy: requeue}
templates:
  default: {slots: 1}
"""


def previous_minor() -> str:
    major, minor = PROTOCOL.split(".")
    return f"{major}.{int(minor) - 1}"


def _git(*args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), *args], capture_output=True, text=True, check=True
    ).stdout


def previous_tree(where: Path) -> Path | None:
    """The newest commit whose protocol was the previous minor version, exported; None when
    this is no git checkout with that history (a tarball, a shallow clone)."""
    if shutil.which("git") is None:
        return None
    want = f'PROTOCOL = "{previous_minor()}"'
    try:
        commits = _git("rev-list", "HEAD", "--", "xce_protocol/protocol.py").split()
        for commit in commits:
            if want in _git("show", f"{commit}:xce_protocol/protocol.py"):
                packages = ("xce_protocol", "xce_agent", "xce_controller")
                archive = subprocess.run(
                    ["git", "-C", str(ROOT), "archive", commit, *packages],
                    capture_output=True,
                    check=True,
                ).stdout
                where.mkdir()
                subprocess.run(["tar", "-x", "-C", str(where)], input=archive, check=True)
                return where
    except subprocess.CalledProcessError:
        return None
    return None


@pytest.fixture
def old(tmp_path: Path) -> Iterator[dict[str, str]]:
    """The environment that runs the previous version's code instead of this tree's."""
    tree = previous_tree(tmp_path / "previous")
    if tree is None:
        pytest.skip(f"needs the git history of protocol {previous_minor()}")
    yield {**os.environ, "PYTHONPATH": str(tree)}


def version_of(env: dict[str, str], package: str) -> str:
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import {package}; print({package}.__file__, {package}.__version__)",
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
        check=True,
    ).stdout.split()
    assert out[0].startswith(env["PYTHONPATH"]), out  # really the old code
    return out[1]


def api(ctl: ControllerProcess, method: str, path: str, **kw: Any) -> Any:
    r = requests.request(method, ctl.url + path, headers=ctl.admin_headers(), timeout=10, **kw)
    return r.json()


def agent_works_and_is_decommissioned(ctl: ControllerProcess, agent: AgentProcess) -> None:
    api(ctl, "POST", "/v1/expected", json={"instance_id": "i-1", "template": "default"})
    agent.start()
    wait_for(agent.worker_pid, timeout=30)
    pid = agent.worker_pid()
    wait_for(lambda: api(ctl, "GET", "/v1/hosts/node1").get("last_seen"), timeout=10)
    job = api(ctl, "POST", "/v1/jobs", json={"command": ["true"], "host": "node1"})

    def state() -> str:
        return str(next(j for j in api(ctl, "GET", "/v1/jobs") if j["id"] == job["id"])["state"])

    wait_for(lambda: state() == "done", timeout=20)
    assert agent.worker_pid() == pid
    api(ctl, "POST", "/v1/hosts/node1/decommission", json={"reason": "skew test"})
    wait_for(lambda: agent.worker().get("phase") == "stopped", timeout=20)
    assert agent.state()["tombstone"]["reason"].startswith("skew test")


def test_this_controller_takes_an_agent_of_the_previous_minor_version(
    tmp_path: Path, old: dict[str, str]
) -> None:
    ctl = ControllerProcess(tmp_path, CLUSTER).start()
    agent = AgentProcess(tmp_path, ctl.url, "i-1", "node1", token=ctl.join_token())
    agent.env = old
    try:
        agent_works_and_is_decommissioned(ctl, agent)
        host = api(ctl, "GET", "/v1/hosts/node1")
        assert host["agent_version"] == version_of(old, "xce_agent")  # said at its join
        assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z", host["joined_at"])
    finally:
        agent.stop()
        ctl.stop()
    assert "Traceback" not in agent.log()


def test_this_agent_works_with_the_controller_of_the_previous_minor_version(
    tmp_path: Path, old: dict[str, str]
) -> None:
    ctl = ControllerProcess(tmp_path, CLUSTER)
    ctl.env, ctl.cwd = old, tmp_path
    ctl.start()
    agent = AgentProcess(tmp_path, ctl.url, "i-1", "node1", token=ctl.join_token())
    try:
        assert api(ctl, "GET", "/v1/info")["protocol"] == previous_minor()
        agent_works_and_is_decommissioned(ctl, agent)
    finally:
        agent.stop()
        ctl.stop()
    assert "Traceback" not in (tmp_path / "controller.log").read_text()


def test_this_agents_planned_stop_with_the_controller_of_the_previous_minor_version(
    tmp_path: Path, old: dict[str, str]
) -> None:
    """A 1.2 controller knows no `stop` notice (422): the agent stops at once, as before."""
    ctl = ControllerProcess(tmp_path, CLUSTER)
    ctl.env, ctl.cwd = old, tmp_path
    ctl.start()
    agent = AgentProcess(tmp_path, ctl.url, "i-1", "node1", token=ctl.join_token())
    try:
        api(ctl, "POST", "/v1/expected", json={"instance_id": "i-1", "template": "default"})
        agent.start()
        wait_for(agent.worker_pid, timeout=30)
        wait_for(lambda: "controller contact: connected" in agent.log(), timeout=10)
        api(ctl, "POST", "/v1/jobs", json={"command": ["sleep", "600"], "host": "node1"})
        wait_for(lambda: api(ctl, "GET", "/v1/jobs")[0]["state"] == "running", timeout=20)
        command = [sys.executable, "-m", "xce_agent", "stop", "--config", str(agent.config)]
        started = time.monotonic()
        stop = subprocess.run(command, capture_output=True, text=True, timeout=120)
        assert stop.returncode == 0, stop.stderr
        assert time.monotonic() - started < 30  # not the 60 s drain, nor the job's 600 s
        assert "planned stop: the controller did not take it" in agent.log()
        assert "422" in agent.log()
        assert agent.worker()["phase"] == "stopped"
    finally:
        agent.stop()
        ctl.stop()
    assert "Traceback" not in agent.log()


def test_an_agent_of_another_major_version_is_refused_and_told_why(tmp_path: Path) -> None:
    ctl = ControllerProcess(tmp_path, CLUSTER).start()
    try:
        join = {"Authorization": f"Bearer {ctl.join_token()}"}
        body = {"protocol": "2.0", "host": "node2", "agent_version": "2.0.0"}
        r = requests.post(ctl.url + "/v1/join", json=body, headers=join, timeout=10)
        assert r.status_code == 422
        told = (
            f"agent speaks protocol '2.0', this controller {PROTOCOL} (agents of protocol 1.x only)"
        )
        assert told in r.json()["message"]
        assert api(ctl, "GET", "/v1/hosts") == []  # nothing recorded
        body["protocol"] = PROTOCOL
        ok = requests.post(ctl.url + "/v1/join", json=body, headers=join, timeout=10)
        assert ok.status_code == 200 and api(ctl, "GET", "/v1/hosts")[0]["agent_version"] == "2.0.0"
    finally:
        ctl.stop()
