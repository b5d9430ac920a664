"""Both sides scraped through the decommission story: a real agent (textfile and port), a real
controller (/metrics); every step moves the counters it should, and promtool accepts both."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.integration.agents import AgentProcess
from tests.integration.controller_proc import ControllerProcess
from tests.integration.helpers import wait_for

CLUSTER = """\
version: 1
heartbeat_interval: 0.5s
host_loss_grace: 5s
agent_max_restart_backoff: 1s
rejoin_allowance: 1s
defaults: {join_deadline: 10m, drain_timeout: 30s, drain_policy: requeue}
auth: {admin_token: adm1n, read_token: r3ad}
templates:
  default: {slots: 1}
"""
ADMIN = {"Authorization": "Bearer adm1n"}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def values(text: str) -> dict[str, float]:
    """name{labels} -> value, labels sorted, as one string key."""
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}"] = s.value
    return out


class Sides:
    def __init__(self, tmp: Path) -> None:
        self.ctl = ControllerProcess(tmp, CLUSTER).start()
        self.port = free_port()
        self.textfile = tmp / "node-exporter" / "xce-agent.prom"
        self.textfile.parent.mkdir()
        extra = f"metrics: {{textfile: '{self.textfile}', listen: '127.0.0.1:{self.port}'}}\n"
        token = self.ctl.join_token()
        self.agent = AgentProcess(tmp, self.ctl.url, "i-1", "node1", extra=extra, token=token)

    def api(self, method: str, path: str, **kw: Any) -> Any:
        r = requests.request(method, self.ctl.url + path, headers=ADMIN, timeout=10, **kw)
        assert r.status_code < 300, r.text
        return r.json()

    def controller(self) -> dict[str, float]:
        headers = {"Authorization": "Bearer r3ad"}
        return values(requests.get(self.ctl.url + "/metrics", headers=headers, timeout=10).text)

    def agent_file(self) -> dict[str, float]:
        try:
            return values(self.textfile.read_text())
        except OSError:
            return {}

    def status(self) -> str:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "xce_agent",
                "status",
                "--state-dir",
                str(self.agent.dir / "state"),
            ],
            capture_output=True,
            text=True,
            timeout=30,
        )
        return out.stdout

    def agent_port(self) -> str:
        return requests.get(f"http://127.0.0.1:{self.port}/metrics", timeout=5).text


@pytest.fixture
def sides(tmp_path: Path) -> Iterator[Sides]:
    s = Sides(tmp_path)
    yield s
    s.agent.stop()
    s.ctl.stop()


W = "component=worker,role=worker"


def test_counters_move_through_the_decommission_story(sides: Sides) -> None:
    c0 = sides.controller()
    assert c0["xce_controller_hosts{state=open,template=default}"] == 0
    assert not any(k.startswith("xce_controller_joins_total") for k in c0)
    sides.api("POST", "/v1/expected", json={"instance_id": "i-1", "template": "default"})
    sides.agent.start()

    # Joined: the controller counts the join, the agent's file says the worker is up and the
    # controller answers; the served text also has the heartbeat's age.
    wait_for(lambda: sides.agent_file().get(f"xce_agent_component_up{{{W}}}") == 1, 20)
    wait_for(lambda: "xce_agent_last_heartbeat_timestamp_seconds{}" in sides.agent_file(), 20)
    a1 = sides.agent_file()
    assert a1["xce_agent_controller_contact{}"] == 1 and a1["xce_agent_decommissioned{}"] == 0
    c1 = sides.controller()
    assert c1["xce_controller_joins_total{code=joined_provisioned,template=default}"] == 1
    assert c1["xce_controller_hosts{state=open,template=default}"] == 1
    served = values(sides.agent_port())
    assert 0 <= served["xce_agent_heartbeat_age_seconds{}"] < 5

    # The worker crashes: a restart and the exit code of SIGKILL.
    pid = sides.agent.worker_pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: sides.agent_file().get(f"xce_agent_component_restarts_total{{{W}}}") == 1, 20)
    assert sides.agent_file()[f"xce_agent_component_last_exit_code{{{W}}}"] == 137
    assert "killed by SIGKILL [component_exited]" in sides.status()
    running = "xce_agent_component_state{code=component_exited,component=worker,phase=running,"
    running += "role=worker}"
    assert sides.agent_file()[running] == 1

    # Decommissioned: counted by the controller, the instance on to-return, the agent's
    # worker down for good and the agent says so.
    sides.api("POST", "/v1/hosts/node1/decommission", json={"reason": "scale in"})
    wait_for(lambda: sides.agent_file().get("xce_agent_decommissioned{}") == 1, 20)
    wait_for(lambda: sides.agent_file().get(f"xce_agent_component_up{{{W}}}") == 0, 20)
    status = sides.status()
    assert "[refused_decommissioned]" in status and "[worker_stopped_decommissioned]" in status
    c2 = sides.controller()
    assert c2["xce_controller_decommissions_total{code=drained,template=default}"] == 1
    assert c2["xce_controller_drain_duration_seconds_count{code=drained,policy=requeue}"] == 1
    assert c2["xce_controller_to_return_hosts{}"] == 1
    assert c2["xce_controller_hosts{state=decommissioned,template=default}"] == 1
    # The agent's rejoin attempts after the decommission were refused and counted.
    wait_for(
        lambda: any(
            k.startswith("xce_controller_refusals_total{code=refused_decommissioned,") and v >= 1
            for k, v in sides.controller().items()
        ),
        20,
    )
    served_text = sides.agent_port()

    # The agent stops: its file keeps nothing frozen, and says the host was decommissioned
    # (the alert for an agent that is down leaves such a host out).
    sides.agent.term()
    assert sides.agent_file() == {
        "xce_agent_up{}": 0,
        "xce_agent_info{instance_id=i-1}": 1,
        "xce_agent_decommissioned{}": 1,
    }

    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus; make e2e-deps)")
    headers = {"Authorization": "Bearer r3ad"}
    for text in (
        sides.textfile.read_text(),
        served_text,
        requests.get(sides.ctl.url + "/metrics", headers=headers, timeout=10).text,
    ):
        out = subprocess.run(
            [promtool, "check", "metrics"], input=text, capture_output=True, text=True
        )
        assert out.returncode == 0, out.stdout + out.stderr


def test_events_follow_survives_a_controller_restart_without_gaps_or_repeats(
    tmp_path: Path,
) -> None:
    ctl = ControllerProcess(tmp_path, CLUSTER).start()
    out = open(tmp_path / "events.out", "w+")  # noqa: SIM115 - closed below
    args = ["--url", ctl.url, "--token", "r3ad", "events", "--follow", "--json"]
    cli = subprocess.Popen(
        [sys.executable, "-m", "xce_controller.cli.xcecli", *args],
        stdout=out,
        stderr=subprocess.PIPE,
        text=True,
    )

    def seqs() -> list[int]:
        lines = (tmp_path / "events.out").read_text().splitlines()
        return [json.loads(line)["seq"] for line in lines if line.strip()]

    def expect(instance: str) -> None:
        body = {"instance_id": instance, "template": "default"}
        r = requests.post(ctl.url + "/v1/expected", json=body, headers=ADMIN, timeout=10)
        assert r.status_code == 201

    try:
        expect("i-a")
        wait_for(lambda: seqs() == [1], 20)
        ctl.kill()  # the stream breaks; xcecli reconnects from event 1
        ctl.start()
        expect("i-b")
        expect("i-c")
        wait_for(lambda: seqs() == [1, 2, 3], 30)
    finally:
        cli.terminate()
        _, err = cli.communicate(timeout=10)
        out.close()
        ctl.stop()
    assert "reconnecting" in err  # it said so, once per attempt, on stderr
