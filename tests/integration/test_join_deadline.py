"""The join deadline on real agents: one never accepted runs its action and tells the
controller why; one that joined once never runs it, however long the controller is away."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.integration.agents import AgentProcess
from tests.integration.controller_proc import ControllerProcess
from tests.integration.helpers import wait_for

CLUSTER = """\
version: 1
heartbeat_interval: 0.5s
host_loss_grace: 10s
agent_max_restart_backoff: 1s
rejoin_allowance: 1s
auth: {admin_token: adm1n, join_token: j0in}
templates:
  default: {slots: 1}
"""
ADMIN = {"Authorization": "Bearer adm1n"}


@pytest.fixture
def ctl(tmp_path: Path) -> Iterator[ControllerProcess]:
    proc = ControllerProcess(tmp_path, CLUSTER).start()
    yield proc
    proc.stop()


def agent(tmp: Path, ctl: ControllerProcess, host: str, token: str) -> tuple[AgentProcess, Path]:
    done = tmp / f"{host}.gave-up"
    action = json.dumps([sys.executable, "-c", f"open({str(done)!r}, 'w').write('gave up')"])
    a = AgentProcess(tmp, ctl.url, "i-1", host, token=token)
    text = a.config.read_text().replace(
        f"instance: {{id: i-1, host_name: {host}}}",
        f"instance: {{id: i-1, host_name: {host}, join_deadline: 5s, on_join_timeout: {action}}}",
    )
    a.config.write_text(text)
    return a, done


def test_never_accepted_runs_the_command_and_tells_the_controller(
    tmp_path: Path, ctl: ControllerProcess
) -> None:
    # h1 is taken by another live host, so the expected instance i-1 cannot join as h1.
    other = requests.post(
        ctl.url + "/v1/join",
        json={"host": "h1"},
        headers={"Authorization": "Bearer j0in"},
        timeout=10,
    )
    assert other.status_code == 200
    body = {"instance_id": "i-1", "template": "default"}
    assert requests.post(ctl.url + "/v1/expected", json=body, headers=ADMIN, timeout=10).ok
    a, done = agent(tmp_path, ctl, "h1", "j0in")
    a.start()
    try:
        wait_for(lambda: "duplicate" in a.log(), 20)  # the refusal arrived
        assert not done.exists()
        wait_for(done.exists, 30)
        log = a.log()
        assert "not accepted by the controller within 5s" in log and "duplicate" in log
        assert "told the controller: accepted" in log
        record = requests.get(ctl.url + "/v1/expected", headers=ADMIN, timeout=10).json()
        (i1,) = [h for h in record if h["instance_id"] == "i-1"]
        assert i1["state"] == "overdue" and i1["reason"].startswith("agent gave up joining:")
        assert "duplicate" in i1["reason"] and i1["reason"].endswith("(command)")
        assert i1["code"] == "join_gave_up"
        assert a.proc is not None and a.proc.poll() is None  # a command leaves the agent running
    finally:
        a.stop()


def test_a_wrong_token_still_runs_the_action(tmp_path: Path, ctl: ControllerProcess) -> None:
    a, done = agent(tmp_path, ctl, "h2", "wrong-token")
    a.start()
    try:
        wait_for(done.exists, 30)
        assert "unauthorized" in a.log() and "told the controller: refused" in a.log()
    finally:
        a.stop()


def test_a_host_that_joined_once_never_runs_it(tmp_path: Path, ctl: ControllerProcess) -> None:
    a, done = agent(tmp_path, ctl, "h3", "j0in")
    a.start()
    try:
        wait_for(lambda: a.worker_pid() is not None, 30)  # joined: the worker runs
        ctl.stop()
        a.term()
        # The record is lost too (or join_deadline was added after the host joined): the
        # credential the controller issued says this instance joined.
        (a.dir / "state" / "join.json").unlink()
        a.start()  # a new agent run, the controller gone for longer than the deadline
        wait_for(lambda: "unreachable" in a.log().rsplit("agent started", 1)[-1], 30)
        wait_for(lambda: a.log().count("unreachable") >= 3, 30)
        record = json.loads((a.dir / "state" / "join.json").read_text())
        assert record["joined"] is True
        threshold = record["first_start"] + 5
        wait_for(lambda: __import__("time").time() > threshold + 2, 20)
        assert not done.exists() and "not accepted by the controller" not in a.log()
        ctl.start()  # and it still works: the host is heard again
        wait_for(lambda: "connected" in a.log().rsplit("unreachable", 1)[-1], 30)
    finally:
        a.stop()
