"""The membership machine, stepped with a fake clock through every path of the decommission."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import pytest

from xce_agent.core import membership as ms
from xce_agent.core.membership import MembershipState, Standing
from xce_agent.state import AgentState, Lifecycle

WORKER = "worker"
TEMPLATE = {"host": "node1", "template": {"name": "default", "slots": 1}}


@dataclass
class Host:
    """One host's membership as the agent drives it, with a fake wall clock."""

    instance: str = "i-1"
    roles: tuple[str, ...] = ("worker", "provisioner")
    controller: bool = True
    now: float = 1000.0
    state: MembershipState = field(default_factory=MembershipState)
    log: list[ms.Action] = field(default_factory=list)

    def send(self, event: ms.Event, later: float = 1.0) -> tuple[ms.Action, ...]:
        self.now += later
        self.state, actions = ms.step(self.state, event, self.now)
        self.log.extend(actions)
        return actions

    def standing(self) -> Standing:
        return self.state.standing

    def boot(self) -> tuple[ms.Action, ...]:
        return self.send(ms.Boot(self.instance, "node1", self.roles, self.controller))

    def restart(self, instance: str | None = None) -> tuple[ms.Action, ...]:
        """The agent exits and a new one loads what the old one saved."""
        saved = json.loads(json.dumps(AgentState(membership=self.state).to_json()))
        self.state = AgentState.from_json(saved).membership
        self.instance = instance or self.instance
        return self.boot()

    def joined(self) -> tuple[ms.Action, ...]:
        return self.send(ms.Joined("node1", "open", TEMPLATE))

    def decommission(self, reason: str = "reclaimed") -> tuple[ms.Action, ...]:
        return self.send(ms.Decommissioned(self.instance, reason))


def starts(actions: tuple[ms.Action, ...] | list[ms.Action], role: str = WORKER) -> int:
    return sum(1 for a in actions if isinstance(a, ms.StartRole) and a.role == role)


def test_without_a_controller_every_role_starts_at_once() -> None:
    host = Host(controller=False)
    actions = host.boot()
    assert {a.role for a in actions if isinstance(a, ms.StartRole)} == {"worker", "provisioner"}
    assert not any(isinstance(a, ms.OpenLink) for a in actions)
    assert host.standing() is Standing.NOT_CONFIGURED


def test_the_worker_waits_for_the_join_and_gets_its_template_first() -> None:
    host = Host()
    actions = host.boot()
    assert starts(actions) == 0 and starts(actions, "provisioner") == 1
    assert isinstance(actions[-1], ms.OpenLink)
    assert host.standing() is Standing.WAITING and host.state.since == host.now
    actions = host.joined()
    assert [type(a) for a in actions] == [ms.WriteTemplate, ms.StartRole]
    assert actions[0] == ms.WriteTemplate(TEMPLATE)
    assert host.standing() is Standing.CONNECTED
    assert host.state.detail == "joined as node1 (open)"


def test_failed_contacts_and_refusals_never_touch_the_worker() -> None:
    host = Host()
    host.boot()
    host.joined()
    lost_at = host.now + 1
    assert host.send(ms.ContactLost("controller did not answer within 12s")) == ()
    assert host.standing() is Standing.UNREACHABLE and host.state.since == lost_at
    assert host.send(ms.ContactLost("HTTP 502"), later=30) == ()
    assert host.state.since == lost_at  # since the standing changed, not since the last try
    assert host.send(ms.Refused("HTTP 403 unmatched: no match", retry_until=2000.0)) == ()
    assert host.standing() is Standing.REFUSED and host.state.retry_until == 2000.0
    assert host.send(ms.ContactOk("open")) == ()
    assert host.standing() is Standing.CONNECTED and host.state.retry_until is None


def test_decommission_saves_before_it_stops_the_worker_then_reports_once() -> None:
    host = Host()
    host.boot()
    host.joined()
    actions = host.decommission("reclaimed by provider")
    assert actions == (ms.SaveNow(), ms.StopRole(WORKER, "decommissioned: reclaimed by provider"))
    assert host.standing() is Standing.DECOMMISSIONED
    assert (host.state.instance_id, host.state.detail) == ("i-1", "reclaimed by provider")
    assert host.state.since == host.now
    assert [host.state.reported, *host.send(ms.WorkersDown())] == [
        False,
        ms.SaveNow(),
        ms.FinalReport(),
    ]
    assert host.state.reported
    assert host.send(ms.WorkersDown()) == ()


@pytest.mark.parametrize(
    "event",
    [
        ms.Joined("node1", "open", TEMPLATE),
        ms.ContactOk("open"),
        ms.ContactLost("timeout"),
        ms.Refused("HTTP 409 duplicate"),
        ms.WorkerExit("xce-worker", 100),
        ms.ConfirmedActive(),
        ms.Decommissioned("i-1", "again"),
    ],
)
def test_once_decommissioned_nothing_starts_the_worker_again(event: ms.Event) -> None:
    host = Host()
    host.boot()
    host.joined()
    host.decommission()
    before = host.state
    assert host.send(event) == ()
    assert host.state == before


def test_a_refusal_for_another_instance_is_not_obeyed() -> None:
    host = Host()
    host.boot()
    host.joined()
    assert host.send(ms.Decommissioned("i-2", "not us")) == ()
    assert host.standing() is Standing.CONNECTED


def test_the_tombstone_holds_across_restarts_and_the_saved_file() -> None:
    host = Host()
    host.boot()
    host.joined()
    host.decommission("reclaimed")
    host.send(ms.WorkersDown())
    at = host.state.since
    for _ in range(3):
        actions = host.restart()
        assert actions == (ms.StopRole(WORKER, "decommissioned: reclaimed"),)
        assert host.standing() is Standing.DECOMMISSIONED and host.state.since == at
        assert host.send(ms.WorkersDown()) == ()  # reported already, before the restart
        assert starts(host.send(ms.Joined("node1", "open", TEMPLATE))) == 0


def test_a_crash_between_tombstone_and_report_reports_after_the_restart() -> None:
    host = Host()
    host.boot()
    host.joined()
    host.decommission()
    host.restart()  # the worker had not stopped yet when the agent died
    assert host.state.decommissioned and not host.state.reported
    assert host.send(ms.WorkersDown()) == (ms.SaveNow(), ms.FinalReport())


def test_a_new_instance_from_the_same_disk_clears_the_tombstone() -> None:
    host = Host()
    host.boot()
    host.joined()
    host.decommission()
    actions = host.restart(instance="i-2")
    assert host.standing() is Standing.WAITING and host.state.instance_id == "i-2"
    assert "tombstone of instance i-1 cleared" in host.state.detail
    assert isinstance(actions[-1], ms.OpenLink)
    assert starts(host.joined()) == 1
    assert host.send(ms.Decommissioned("i-1", "the old one")) == ()  # not this instance


def test_worker_exit_code_is_confirmed_before_anything_happens() -> None:
    host = Host()
    host.boot()
    host.joined()
    assert host.send(ms.WorkerExit("xce-worker", 100)) == (ms.Confirm(),)
    assert host.standing() is Standing.CONNECTED
    assert starts(host.send(ms.ConfirmedActive())) == 1
    # The next time, the controller answers the confirmation with the refusal.
    assert host.send(ms.WorkerExit("xce-worker", 100)) == (ms.Confirm(),)
    assert ms.StopRole(WORKER, "decommissioned: gone") in host.decommission("gone")


def test_the_link_watchdog_warning_is_kept_in_any_standing() -> None:
    host = Host()
    host.boot()
    host.send(ms.LinkStalled("link watch thread stuck for 95s: replaced at 10:00:00"))
    assert host.state.link_warning.startswith("link watch thread stuck")
    assert host.standing() is Standing.WAITING


def test_state_written_by_the_previous_agent_version_keeps_its_tombstone() -> None:
    old = {
        "version": 1,
        "lifecycle": "decommissioned",
        "instance_id": "i-1",
        "roles": ["worker"],
        "agent": None,
        "components": [],
        "controller": {"state": "decommissioned", "since": 5.0, "host": "n1", "detail": "r"},
        "tombstone": {"instance_id": "i-1", "reason": "reclaimed", "at": 5.0},
        "updated_at": 6.0,
    }
    state = AgentState.from_json(old)
    assert state.membership.standing is Standing.DECOMMISSIONED
    assert state.membership.detail == "reclaimed" and state.membership.reported
    assert state.lifecycle is Lifecycle.STOPPED
    host = Host(state=state.membership)
    assert starts(host.boot()) == 0 and starts(host.joined()) == 0
    written = state.to_json()
    assert written["tombstone"] == {"instance_id": "i-1", "reason": "reclaimed", "at": 5.0}
    assert written["controller"]["state"] == "decommissioned"
