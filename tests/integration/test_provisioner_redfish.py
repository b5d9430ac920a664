"""The reference provisioner against sushy-tools' Redfish emulator (fake driver, loopback).

The emulator applies each power change 1 to 11 s after it is asked for, so these tests
wait on conditions with bounds that include that delay; they skip where sushy-tools is not
installed (it is in the test extras).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

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
    host.report(job["id"], "finished")
    drained = wait_until(lambda: world.record("node1")["state"] != "draining", 10, "drained")
    took = wait_until(lambda: world.record("node1")["state"] == "returned", 15, "returned")
    print(f"powered off and returned {took + drained:.1f}s after the drain ended")
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
