"""A real agent against hostile metadata answers, and then a valid notice it must still obey.

Each case first proves its input reached the agent (the emulator counts the requests it
answered), then posts a valid notice and checks all three effects: the host closed at the
controller, the notice file written and the worker's notice_signal delivered.
"""

from __future__ import annotations

import json
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.integration.helpers import wait_for
from tests.integration.test_agent_notices import CHECKPOINTER, Agent, World
from tests.metadata_emulator import Emulator, aws_event_time, rfc1123, spot
from xce_protocol.times import times_to_epoch

GCE = "/computeMetadata/v1/instance/"
AZURE = "/metadata/scheduledevents"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    yield w
    w.close()


def checkpointing(world: World, provider: str) -> tuple[Agent, Path]:
    script = world.tmp / "checkpointer.py"
    script.write_text(CHECKPOINTER)
    out = world.tmp / "noticed.jsonl"
    agent = world.agent(
        provider,
        worker=[sys.executable, str(script), str(out)],
        component="        notice_signal: SIGUSR1\n",
    )
    wait_for(agent.worker_pid, timeout=20)
    return agent, out


def answered(
    em: Emulator, method: str, prefix: str, more: int, timeout: float = 20, since: int | None = None
) -> None:
    """Wait until `more` requests of that kind (after `since`, else from now) were answered."""
    start = em.count(method, prefix) if since is None else since
    assert em.wait_for(
        lambda st: (
            sum(1 for m, p in st.requests if m == method and p.startswith(prefix)) >= start + more
        ),
        timeout,
    ), f"the agent did not ask {method} {prefix} {more} more times"


def obeyed(world: World, out: Path, kind: str, timeout: float = 15) -> dict[str, Any]:
    """The valid notice's three effects: closed at the controller, file written, signal sent."""
    wait_for(lambda: world.host()["state"] == "closed", timeout=timeout)
    notice: dict[str, Any] = times_to_epoch(world.host()["notice"])  # its times: seconds
    assert notice["kind"] == kind
    wait_for(lambda: out.exists() and kind in out.read_text(), timeout=10)
    seen = [json.loads(line) for line in out.read_text().splitlines()]
    assert seen[-1]["signal"] == signal.SIGUSR1 and seen[-1]["kind"] == kind
    return notice


def azure_event(
    event_id: str, event_type: str, resources: list[str], lead: float = 30
) -> dict[str, Any]:
    return {
        "EventId": event_id,
        "EventStatus": "Scheduled",
        "EventType": event_type,
        "ResourceType": "VirtualMachine",
        "Resources": resources,
        "NotBefore": rfc1123(time.time() + lead),
        "Description": "test",
        "EventSource": "Platform",
        "DurationInSeconds": -1,
    }


def test_aws_token_with_a_control_character_does_not_blind_the_watch(world: World) -> None:
    # A token http.client cannot send: kept, it made every read fail until it expired (1 h).
    world.emulator.change({"fault": {"token": "abc\r\nX-Injected: 1"}})
    _, out = checkpointing(world, "aws")
    answered(world.emulator, "PUT", "/latest/api/token", 2, since=0)
    world.emulator.change({"fault": {}})
    world.emulator.change(spot(time.time() + 120))
    obeyed(world, out, "preemption")


def test_gce_non_ascii_etag_does_not_blind_the_watch(world: World) -> None:
    # 'é' passed isalnum(); put back into the URL it made every later request fail.
    world.emulator.change({"fault": {"etag": "\u00e9"}})
    _, out = checkpointing(world, "gce")
    answered(world.emulator, "GET", GCE, 4, since=0)
    world.emulator.change({"fault": {}})
    world.emulator.change({"gce.instance/preempted": "TRUE"})
    obeyed(world, out, "preemption")


def test_gce_answer_without_etag_still_delivers_the_preemption(world: World) -> None:
    world.emulator.change({"fault": {"etag": ""}})
    _, out = checkpointing(world, "gce")
    answered(world.emulator, "GET", GCE, 4, since=0)
    assert world.host()["state"] == "open"
    world.emulator.change({"gce.instance/preempted": "TRUE"})
    obeyed(world, out, "preemption")


def test_azure_unknown_event_type_does_not_hide_a_preempt(world: World) -> None:
    _, out = checkpointing(world, "azure")
    unknown = azure_event("U-1", "Hibernate", ["vm0"])
    world.emulator.change({"azure.events": [unknown]})
    answered(world.emulator, "GET", AZURE, 3)
    assert world.host()["state"] == "open"
    preempt = azure_event("P-1", "Preempt", ["vm0"])
    world.emulator.change({"azure.events": [unknown, preempt]})
    assert obeyed(world, out, "preemption")["event_id"] == "P-1"


def test_azure_never_approves_an_event_naming_other_vms(world: World) -> None:
    # The VM name is unknown: a neighbour's reboot is taken (the host drains), but approving
    # it would release the neighbour's reboot before that host drained.
    world.emulator.change({"fault": {"name_status": 500}})
    agent, out = checkpointing(world, "azure")
    world.emulator.change({"azure.events": [azure_event("R-7", "Reboot", ["vm7"], lead=11)]})
    answered(world.emulator, "GET", AZURE, 3)
    wait_for(lambda: (world.host().get("notice") or {}).get("acted") is True, timeout=20)
    wait_for(lambda: "not approving scheduled event R-7" in agent.log(), timeout=10)
    assert world.emulator.count("POST", AZURE) == 0
    world.emulator.change({"fault": {}})  # the name is known again: vm7's event is not ours
    wait_for(lambda: world.host()["state"] == "open", timeout=20)
    world.emulator.change({"azure.events": [azure_event("P-0", "Preempt", ["vm0"], lead=11)]})
    obeyed(world, out, "preemption")
    assert world.emulator.wait_for(lambda st: st.approvals == ["P-0"], 30)


def test_azure_failed_start_requests_is_retried(world: World) -> None:
    world.emulator.change({"fault": {"approve_status": 500}})
    _, out = checkpointing(world, "azure")
    world.emulator.change({"azure.events": [azure_event("P-2", "Preempt", ["vm0"], lead=11)]})
    obeyed(world, out, "preemption")
    answered(world.emulator, "POST", AZURE, 1, timeout=30)
    assert world.emulator.state.approvals == []
    world.emulator.change({"fault": {}})
    assert world.emulator.wait_for(lambda st: st.approvals == ["P-2"], 30)


def test_aws_spot_time_beyond_the_protocol_then_a_valid_one(world: World) -> None:
    _, out = checkpointing(world, "aws")
    world.emulator.change({"aws.spot": {"action": "terminate", "time": "9999-12-31T23:59:59Z"}})
    answered(world.emulator, "GET", "/latest/meta-data/spot/instance-action", 3)
    assert world.host()["state"] == "open"
    when = time.time() + 120
    world.emulator.change(spot(when))
    assert abs(obeyed(world, out, "preemption")["deadline"] - int(when)) <= 1


def test_a_notice_that_ended_while_the_agent_was_down_reopens_the_host(world: World) -> None:
    # The cordon never lifted: the new agent's watcher saw nothing, so it never said "ended".
    agent, out = checkpointing(world, "aws")
    event = {
        "NotBefore": aws_event_time(time.time() + 3600),
        "Code": "system-reboot",
        "Description": "scheduled reboot",
        "EventId": "instance-event-1",
        "NotAfter": aws_event_time(time.time() + 4600),
        "State": "active",
    }
    world.emulator.change({"aws.scheduled": [event]})
    wait_for(lambda: world.host()["state"] == "closed", timeout=15)
    agent.term()  # an upgrade, say: the worker keeps running
    canceled = {**event, "State": "canceled", "Description": "[Canceled] scheduled reboot"}
    world.emulator.change({"aws.scheduled": [canceled]})
    agent.start()
    answered(world.emulator, "GET", "/latest/meta-data/events/maintenance/scheduled", 2)
    wait_for(lambda: world.host()["state"] == "open", timeout=20)
    assert world.host()["notice"] is None
    world.emulator.change(spot(time.time() + 120))
    obeyed(world, out, "preemption")


def test_a_spot_notice_missing_from_one_answer_does_not_reopen_the_host(world: World) -> None:
    # A flapping metadata service: one 404 between two answers that carry the notice. Taken
    # for the end, it reopened the host for work just before the instance went.
    _, out = checkpointing(world, "aws")
    when = time.time() + 120
    world.emulator.change(spot(when))
    obeyed(world, out, "preemption")
    world.emulator.change({"aws.spot": None})
    answered(world.emulator, "GET", "/latest/meta-data/spot/instance-action", 1)
    world.emulator.change(spot(when))
    answered(world.emulator, "GET", "/latest/meta-data/spot/instance-action", 5)
    assert host_states(world)[-1] == "closed"
    assert "open" not in host_states(world)  # closed (it joined open), never reopened


def host_states(world: World) -> list[str]:
    """The states the controller's facts gave node1, in order."""
    r = requests.get(
        world.ctl.url + "/v1/events?host=node1", headers=world.ctl.admin_headers(), timeout=10
    )
    facts = [json.loads(line) for line in r.text.splitlines() if line.strip()]
    return [f["data"]["state"] for f in facts if f["kind"] == "state"]


def test_a_notice_during_a_controller_restart_reaches_the_new_controller(world: World) -> None:
    _, out = checkpointing(world, "aws")
    world.ctl.kill()
    when = time.time() + 120
    world.emulator.change(spot(when))
    answered(world.emulator, "GET", "/latest/meta-data/spot/instance-action", 2)
    wait_for(lambda: out.exists() and "preemption" in out.read_text(), timeout=10)  # worker told
    world.ctl.start()
    notice = obeyed(world, out, "preemption")
    assert abs(notice["deadline"] - int(when)) <= 1
