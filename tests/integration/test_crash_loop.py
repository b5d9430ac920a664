"""A worker in a crash loop on a real agent: the controller closes the host, or (replace)
drains it and lists it for return; a worker that runs again opens a closed host."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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
on_worker_fatal: {policy}
defaults: {{join_deadline: 10m, drain_timeout: 30s, drain_policy: requeue}}
auth: {{admin_token: adm1n, join_token: j0in}}
templates:
  default: {{slots: 1}}
"""
ADMIN = {"Authorization": "Bearer adm1n"}
# Crashes at once while the flag file exists, else runs.
WORKER = "import os, sys, time\nif os.path.exists(sys.argv[1]): sys.exit(3)\ntime.sleep(3600)\n"


class Rig:
    def __init__(self, tmp: Path, policy: str) -> None:
        self.ctl = ControllerProcess(tmp, CLUSTER.format(policy=policy)).start()
        self.flag = tmp / "crash"
        self.flag.write_text("")
        script = tmp / "worker.py"
        script.write_text(WORKER)
        self.ctl_headers = ADMIN
        r = requests.post(
            self.ctl.url + "/v1/expected",
            json={"instance_id": "i-1", "template": "default", "expected_name": "h1"},
            headers=ADMIN,
            timeout=10,
        )
        assert r.status_code == 201, r.text
        self.agent = AgentProcess(
            tmp,
            self.ctl.url,
            "i-1",
            "h1",
            worker=[sys.executable, str(script), str(self.flag)],
            token="j0in",
        )
        text = self.agent.config.read_text().replace(
            "restart: {initial_delay: 0, delay: 0.2s, max_delay: 1s}",
            "restart: {initial_delay: 0, delay: 0.1s, max_delay: 0.2s, "
            "give_up: {starts: 3, window: 1m}}",
        )
        self.agent.config.write_text(text)
        self.agent.start()

    def host(self) -> dict[str, Any]:
        r = requests.get(self.ctl.url + "/v1/hosts/h1", headers=ADMIN, timeout=10)
        return r.json() if r.status_code == 200 else {}

    def to_return(self) -> list[dict[str, Any]]:
        r = requests.get(self.ctl.url + "/v1/to-return", headers=ADMIN, timeout=10)
        return r.json()  # type: ignore[no-any-return]

    def close(self) -> None:
        self.agent.stop()
        self.ctl.stop()


@pytest.fixture
def rig(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Rig]:
    r = Rig(tmp_path, request.param)
    yield r
    r.close()


@pytest.mark.parametrize("rig", ["close"], indirect=True)
def test_crash_loop_closes_the_host_and_a_recovered_worker_opens_it(rig: Rig) -> None:
    wait_for(lambda: rig.agent.worker().get("phase") == "fatal", 30)
    wait_for(lambda: rig.host().get("state") == "closed", 20)
    host = rig.host()
    assert host["reason"].startswith("worker crash loop: worker gave up"), host["reason"]
    assert [c["by"] for c in host["history"]][-1] == "controller"
    assert host["code"] == "worker_fatal_closed"
    # No new job goes there.
    r = requests.post(
        rig.ctl.url + "/v1/jobs",
        json={"command": ["true"], "host": "h1"},
        headers=ADMIN,
        timeout=10,
    )
    assert r.status_code == 201 and r.json()["assigned"] == ""
    # The operator fixes the cause and restarts the worker (xce-agent restart worker).
    rig.flag.unlink()
    restarted = subprocess.run(
        [sys.executable, "-m", "xce_agent", "restart", "worker", "--config", str(rig.agent.config)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert restarted.returncode == 0, restarted.stdout + restarted.stderr
    wait_for(lambda: rig.agent.worker().get("phase") == "running", 30)
    wait_for(lambda: rig.host().get("state") == "open", 20)
    assert rig.host()["reason"] == "worker recovered: worker running again"
    assert rig.host()["code"] == "worker_recovered"
    assert rig.to_return() == []


@pytest.mark.parametrize("rig", ["replace"], indirect=True)
def test_crash_loop_with_replace_drains_and_lists_the_instance_for_return(rig: Rig) -> None:
    wait_for(lambda: [h["instance_id"] for h in rig.to_return()] == ["i-1"], 40)
    (listed,) = rig.to_return()
    assert listed["state"] == "decommissioned"
    assert listed["reason"].startswith("worker crash loop: worker gave up")
    states = [c["state"] for c in listed["history"]]
    assert states[-3:] == ["closed", "draining", "decommissioned"], states
    codes = [c["code"] for c in listed["history"]][-3:]
    assert codes[:2] == ["worker_fatal_closed", "worker_fatal_replaced"], codes
    # The agent heard the decommission: a tombstone, and the worker stays down.
    wait_for(lambda: json.dumps(rig.agent.state()).count("decommissioned") > 0, 20)
