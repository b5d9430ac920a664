"""The reference provisioner against sushy-tools' Redfish emulator (fake driver, loopback).

The emulator applies each power change 1 to 11 s after it is asked for, so these tests
wait on conditions with bounds that include that delay; they skip where sushy-tools is not
installed (it is in the test extras).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.integration.provisioner_world import Host, World, wait_until
from tests.integration.redfish_emulator import emulator_command

pytestmark = pytest.mark.skipif(
    emulator_command() is None, reason="sushy-tools (sushy-emulator) is not installed"
)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path, ["node1", "node2"])
    yield w
    w.close()


def test_the_whole_story_expect_power_on_join_drain_power_off_return_and_again(
    world: World,
) -> None:
    world.start_provisioner()
    world.xcecli("expect", "rf-node1", "--template", "small", "--name", "node1")
    took = wait_until(lambda: world.bmc.power("node1") == "On", 15, "node1 powered on")
    print(f"powered on {took:.1f}s after xcecli expect")
    assert world.bmc.power("node2") == "Off", "a machine nobody expected stays off"

    host = Host(world, "node1")
    job = world.admin("POST", "/v1/jobs", {"command": ["true"], "host": "node1"})
    wait_until(lambda: world.admin("GET", "/v1/hosts/node1")["jobs_running"] == 1, 10, "job placed")
    host.report(job["id"], "started")
    world.admin("POST", "/v1/hosts/node1/decommission", {"policy": "wait"})
    assert world.record("node1")["state"] == "draining"
    host.report(job["id"], "finished")  # the drain ends as this report is committed
    assert world.record("node1")["state"] == "decommissioned"
    took = wait_until(lambda: world.record("node1")["state"] == "returned", 15, "returned")
    print(f"powered off and returned {took:.1f}s after the drain ended")
    assert world.bmc.power("node1") == "Off"
    assert ("shutdown", "confirmed", 1) in world.steps("node1")

    world.xcecli("expect", "rf-node1", "--template", "small", "--name", "node1")
    wait_until(lambda: world.bmc.power("node1") == "On", 15, "node1 powered on again")
    Host(world, "node1")  # the new life joins with the join token again
    assert world.record("node1")["state"] == "open"
    story = world.xcecli("why", "node1")
    assert story.count("expected: instance rf-node1") == 2, story
    assert "graceful shutdown issued by provisioner" in story, story
    assert "power on confirmed" in story, story
    assert world.bmc.resets("node1") == 3, "on, shutdown, on: each once"
    assert world.bmc.resets("node2") == 0


def _lease(world: World, host: Host, session: str, ttl: float) -> int:
    answer = requests.post(
        f"{world.ctl.url}/v1/leases/provisioner",
        json={"host": host.name, "session": session, "ttl": ttl},
        headers={"Authorization": f"Bearer {host.credential}"},
        timeout=10,
    )
    answer.raise_for_status()
    return int(answer.json()["token"])


def test_a_provisioner_killed_mid_action_is_taken_over_without_a_second_request(
    tmp_path: Path,
) -> None:
    """The first holder is killed once its power on is issued, before the slow BMC (10 s
    for every change here) applies it; the next holder reads the journal, waits out the step
    and confirms it: one reset. The killed holder's token, shown again, is refused."""
    world = World(tmp_path, ["node1", "node2"], delay=10)
    try:
        _takeover(world)
    finally:
        world.close()


def _takeover(world: World) -> None:
    first, second = Host(world, "prov-a"), Host(world, "prov-b")
    token = _lease(world, first, "a", 5)
    proc = world.start_provisioner("provisioner", token)
    world.xcecli("expect", "rf-node1", "--template", "small", "--name", "node1")
    wait_until(lambda: ("on", "issued", 1) in world.steps("node1"), 15, "power on issued")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    wait_until(lambda: _try_lease(world, second) > token, 10, "lease taken over")
    taken = _try_lease(world, second)
    world.start_provisioner("provisioner", taken)
    wait_until(lambda: "running: 2 machines" in world.log().split("issued")[-1], 10, "started")
    assert world.bmc.power("node1") == "Off", "taken over while the power on is pending"
    wait_until(lambda: ("on", "confirmed", 1) in world.steps("node1"), 20, "confirmed")
    assert world.bmc.power("node1") == "On"
    assert world.bmc.resets("node1") == 1, "the power on was sent once across the takeover"

    assert _read_under(world, "provisioner", taken) == 200
    assert _read_under(world, "provisioner", token) == 409, "the old grant reads nothing"
    stale = world.start_provisioner("provisioner", token)
    # Nothing asks it to act: its first pass's read is what the controller refuses.
    assert stale.wait(timeout=10) == 75, "the stale holder stops: the lease moved on"
    assert f"lease provisioner token {token} is not the current grant" in world.log()
    world.xcecli("expect", "rf-node2", "--template", "small", "--name", "node2")
    wait_until(lambda: world.bmc.power("node2") == "On", 15, "node2 powered on by the holder")
    assert world.bmc.resets("node2") == 1


def _read_under(world: World, lease: str, token: int) -> int:
    """The status of a provisioner's read of its records under a lease grant."""
    answer = requests.get(
        f"{world.ctl.url}/v1/provisioned",
        params={"lease": lease, "token": str(token)},
        headers=world.ctl.admin_headers(),
        timeout=10,
    )
    if answer.status_code == 409:
        assert answer.json()["error"] == "stale_lease", answer.text
    return answer.status_code


def _try_lease(world: World, host: Host) -> int:
    try:
        return _lease(world, host, "b", 30)
    except requests.HTTPError:
        return 0


def test_a_record_in_an_excluded_state_is_never_powered_off(world: World) -> None:
    world.write_config(exclude_states="[decommissioned]")
    world.start_provisioner()
    world.xcecli("expect", "rf-node1", "--template", "small", "--name", "node1")
    wait_until(lambda: world.bmc.power("node1") == "On", 15, "node1 powered on")
    Host(world, "node1")
    world.admin("POST", "/v1/hosts/node1/decommission", {})
    assert world.record("node1")["state"] == "decommissioned"  # nothing ran: at once
    wait_until(lambda: "node1: not powered off" in world.log(), 10, "the refusal logged")
    assert "decommissioned is excluded [power_off_excluded]" in world.log()
    assert world.bmc.power("node1") == "On"
    assert world.bmc.resets("node1") == 1, "only the power on"
    assert world.record("node1")["state"] == "decommissioned", "not returned either"


def test_a_bmc_that_is_down_delays_the_power_on_and_loses_nothing(world: World) -> None:
    world.bmc.stop()
    world.start_provisioner()
    world.xcecli("expect", "rf-node1", "--template", "small", "--name", "node1")
    wait_until(lambda: "cannot read the power" in world.log(), 10, "the BMC failure logged")
    assert "[bmc_unreachable]" in world.log()
    assert world.steps("node1") == [], "nothing begun without a reading"
    world.bmc.start()
    wait_until(lambda: world.bmc.power("node1") == "On", 20, "powered on once the BMC is back")
    assert world.bmc.resets("node1") == 1


def test_the_idle_policy_decommissions_an_idle_host_and_powers_it_off(world: World) -> None:
    world.write_config(idle_after="2s")
    world.start_provisioner()
    world.xcecli("expect", "rf-node1", "--template", "small", "--name", "node1")
    wait_until(lambda: world.bmc.power("node1") == "On", 15, "node1 powered on")
    Host(world, "node1")
    wait_until(lambda: world.record("node1")["state"] == "returned", 25, "idle, off, returned")
    assert world.bmc.power("node1") == "Off"
    story = world.xcecli("why", "node1")
    assert "idle for 2s (idle_after)" in story, story


def _agent(world: World, name: str) -> subprocess.Popen[bytes]:
    """An agent whose provisioner role runs xce-provisioner as its singleton component."""
    home = world.tmp / name
    home.mkdir()
    command = [sys.executable, "-m", "xce_provisioner", "run", "--config", str(world.config)]
    (home / "agent.yaml").write_text(
        f"version: 1\ncontroller: {{url: '{world.ctl.url}', token: {world.ctl.join_token()}, "
        "timeout: 2s, max_retry_delay: 1s}\n"
        f"instance: {{id: i-{name}, host_name: {name}}}\n"
        "roles:\n  provisioner:\n    components:\n      xce-provisioner:\n"
        f"        command: {json.dumps(command)}\n"
        "        singleton: {lease: provisioner, ttl: 6s}\n        stop_timeout: 1s\n"
        f"state_directory: '{home / 'state'}'\n"
    )
    with open(home / "agent.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "xce_agent", "run", "--config", str(home / "agent.yaml")],
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def test_under_agents_the_lease_holder_acts_and_its_successor_carries_on(world: World) -> None:
    """Two agents run xce-provisioner as the provisioner role's singleton: the holder powers
    machines on under its lease token; killed with its agent, the other takes over."""
    agents = {name: _agent(world, name) for name in ("prov-a", "prov-b")}
    try:
        wait_until(lambda: world.admin("GET", "/v1/leases"), 20, "the lease granted")
        world.xcecli("expect", "rf-node1", "--template", "small", "--name", "node1")
        wait_until(lambda: world.bmc.power("node1") == "On", 20, "node1 powered on")
        lease = world.admin("GET", "/v1/leases")[0]
        first = world.record("node1")["power"][0]
        assert first["token"] == lease["token"], "the step carries the holder's token"
        holder = agents[lease["host"]]
        holder.send_signal(signal.SIGKILL)  # the host dies: its fence stops the component
        holder.wait()
        wait_until(
            lambda: world.admin("GET", "/v1/leases")[0]["host"] not in ("", lease["host"]),
            30,
            "the lease taken over",
        )  # until then the killed host's fenced component may still act, and rightly
        world.xcecli("expect", "rf-node2", "--template", "small", "--name", "node2")
        wait_until(lambda: world.bmc.power("node2") == "On", 40, "node2 powered on")
        second = world.record("node2")["power"][0]
        assert second["token"] > first["token"], "by the next holder"
        assert world.bmc.resets("node1") == 1 and world.bmc.resets("node2") == 1
    finally:
        for proc in agents.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGUSR2)  # stop its components, then itself
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
