"""The controller's side of the provisioner: a returned instance expected again, and power
steps as facts (core/power.py), fenced by the provisioner's lease."""

from __future__ import annotations

import pytest

from tests.unit.test_lifecycle import World
from xce_controller.core import credentials, joining, power
from xce_controller.core import lifecycle as lc
from xce_controller.core.model import HostState
from xce_controller.core.story import story


def returned(w: World) -> None:
    w.expect("rf-1", expected_name="node1")
    w.join("node1", "rf-1", token="")
    w.decommission("rf-1")
    w.commit(lc.ack_return(w.cluster, w.now, "prov", "rf-1"))
    assert w.state("rf-1") is HostState.RETURNED


def test_a_returned_instance_expected_again_is_a_new_life_with_its_history_kept() -> None:
    w = World()
    returned(w)
    old = w.credentials["rf-1"]
    w.now = 10.0
    w.expect("rf-1", expected_name="node1")
    host = w.cluster.hosts["rf-1"]
    assert host.state is HostState.EXPECTED
    states = [c.state for c in host.history]
    assert states[0] is HostState.EXPECTED and states[-1] is HostState.EXPECTED
    assert HostState.RETURNED in states, "the earlier life stays in the record"
    assert (host.name, host.incarnation, host.credential_hash) == ("", 0, "")
    w.join("node1", "rf-1", token="")  # the machine boots again and joins
    assert w.state("rf-1") is HostState.OPEN
    with pytest.raises(lc.Refused) as refused:  # its old disk's credential is stale
        joining.join(
            w.cluster, w.cfg, w.now, lc.JoinRequest(name="node1", instance_id="rf-1", token=old)
        )
    assert refused.value.kind == "stale_incarnation"


def test_an_instance_still_live_cannot_be_expected_again() -> None:
    w = World()
    w.expect("rf-1")
    for step in ("expected", "joined", "decommissioned"):  # not returned yet
        if step == "joined":
            w.join("node1", "rf-1", token="")
        if step == "decommissioned":
            w.decommission("rf-1")
        with pytest.raises(lc.Refused) as refused:
            w.expect("rf-1")
        assert refused.value.kind == "duplicate", step


def report(action: str = "on", phase: str = "begun", **kw: object) -> power.PowerReport:
    return power.PowerReport("rf-1", "expected@0.000000", action, phase, **kw)  # type: ignore[arg-type]


def test_a_power_step_is_a_fact_once_however_often_it_is_reported() -> None:
    w = World()
    w.expect("rf-1")
    first = w.commit(power.report(w.cluster, 1.0, "provisioner", report(code="power_on_expected")))
    assert [f.kind for f in first] == ["power"]
    assert power.report(w.cluster, 2.0, "provisioner", report()) == [], "a repeat: no fact"
    w.commit(power.report(w.cluster, 3.0, "provisioner", report(phase="issued")))
    steps = w.cluster.hosts["rf-1"].power
    assert [(s.action, s.phase, s.code) for s in steps] == [
        ("on", "begun", "power_on_expected"),
        ("on", "issued", ""),
    ]
    assert power.report(w.cluster, 4.0, "p", report(attempt=2)) != [], "a new attempt is new"


def test_power_steps_for_unknown_instances_or_steps_are_refused() -> None:
    w = World()
    w.expect("rf-1")
    with pytest.raises(lc.Refused) as refused:
        power.report(w.cluster, 1.0, "p", power.PowerReport("rf-9", "x@1", "on", "begun"))
    assert refused.value.kind == "not_found"
    with pytest.raises(lc.Refused) as refused:
        power.report(w.cluster, 1.0, "p", report(action="explode"))
    assert refused.value.kind == "bad_request"
    assert w.cluster.hosts["rf-1"].power == (), "nothing recorded"


def test_a_power_step_under_a_lease_needs_its_current_live_grant() -> None:
    power.check_grant("provisioner", 7, 7, True)
    power.check_grant("", 0, 9, True)  # no lease: a provisioner run without one
    with pytest.raises(lc.Refused) as half:
        power.check_grant("", 9, 9, True)  # a token without its lease: meant to be fenced
    assert half.value.kind == "conflict"
    for token, current, live in ((6, 7, True), (7, 7, False), (8, 7, True)):
        with pytest.raises(lc.Refused) as refused:
            power.check_grant("provisioner", token, current, live)
        assert refused.value.kind == "stale_lease"
        assert refused.value.code.value == "refused_stale_lease"


def test_why_tells_each_power_step_with_its_outcome() -> None:
    host = {"key": "rf-1", "name": "node1", "state": "open", "history": []}
    events = [
        {
            "kind": "power",
            "at": 1.0,
            "by": "provisioner",
            "why": "",
            "code": "power_on_expected",
            "data": {"action": "on", "phase": "issued", "attempt": 1},
        },
        {
            "kind": "power",
            "at": 2.0,
            "by": "provisioner",
            "why": "timeout",
            "code": "bmc_timeout",
            "data": {"action": "shutdown", "phase": "failed", "attempt": 2},
        },
    ]
    lines = story(host, events, 3.0)
    assert lines[1].endswith("power on issued by provisioner [power_on_expected]")
    assert lines[2].endswith(
        "graceful shutdown failed (attempt 2) by provisioner: timeout [bmc_timeout]"
    )


def test_the_seal_of_a_returned_life_is_kept_among_the_past_credentials() -> None:
    w = World()
    returned(w)
    sealed = w.cluster.hosts["rf-1"].credential_hash
    w.expect("rf-1")
    assert sealed in w.cluster.hosts["rf-1"].past_credentials
    assert credentials.matches(w.credentials["rf-1"], sealed)
