"""Every host change and job end the controller decides carries its reason code: joins,
admin control, decommissions by outcome, losses, notices, returns, refusals."""

from __future__ import annotations

import pytest

from tests.unit.test_notices_lifecycle import World
from xce_controller.core import deadlines, joining
from xce_controller.core import lifecycle as lc
from xce_controller.core.model import AdminAction, DrainPolicy, Fact
from xce_protocol.notices import NoticeKind
from xce_protocol.reasons import Reason


def codes(facts: list[Fact], kind: str | None = None) -> list[str]:
    return [f.data.get("code", "") for f in facts if kind is None or f.kind == kind]


def test_join_control_and_a_drain_that_times_out() -> None:
    w = World()
    a = w.join("a")
    assert codes(w.facts) == [Reason.JOINED_UNPROVISIONED]
    w.join("a")  # the same incarnation again
    assert codes(w.facts)[-1] == Reason.AGENT_RECONNECTED
    host = w.cluster.hosts[a]
    w.commit(lc.control(w.cluster, w.cfg, 1.0, "admin", host, AdminAction.CLOSE))
    assert w.cluster.hosts[a].history[-1].code == Reason.ADMIN_CLOSED
    w.commit(lc.control(w.cluster, w.cfg, 2.0, "admin", w.cluster.hosts[a], AdminAction.OPEN))
    assert w.cluster.hosts[a].history[-1].code == Reason.ADMIN_OPENED
    w.run("a")
    start = len(w.facts)
    w.commit(
        lc.control(
            w.cluster, w.cfg, 3.0, "admin", w.cluster.hosts[a], AdminAction.DECOMMISSION,
            drain_timeout=5.0, policy="kill",
        )
    )  # fmt: skip
    w.tick(9.0)
    got = [(f.kind, f.data.get("code")) for f in w.facts[start:]]
    assert got == [
        ("drain", Reason.DECOMMISSION_REQUESTED),
        ("job_killed", Reason.DRAIN_TIMEOUT_KILLED),
        ("state", Reason.DRAIN_TIMEOUT_KILLED),
    ]
    assert w.cluster.hosts[a].history[-1].code == Reason.DRAIN_TIMEOUT_KILLED


@pytest.mark.parametrize(
    ("policy", "jobs", "code"),
    [("requeue", True, Reason.DRAIN_TIMEOUT_REQUEUED), ("requeue", False, Reason.DRAINED)],
)
def test_drain_outcomes(policy: str, jobs: bool, code: Reason) -> None:
    w = World()
    a = w.join("a")
    if jobs:
        w.run("a")
    w.commit(
        lc.control(
            w.cluster, w.cfg, 1.0, "admin", w.cluster.hosts[a], AdminAction.DECOMMISSION,
            drain_timeout=5.0, policy=DrainPolicy(policy).value,
        )
    )  # fmt: skip
    w.tick(7.0)
    assert w.cluster.hosts[a].history[-1].code == code


def test_loss_requeues_with_the_loss_code_and_return_after() -> None:
    w = World()
    a = w.join("a")
    job = w.run("a")
    w.commit(deadlines.host_due(w.cluster, w.cfg, 5000.0, w.cluster.hosts[a], 0.0))
    assert w.cluster.hosts[a].history[-1].code == Reason.HEARTBEAT_LOST
    requeue = [f for f in w.facts if f.kind == "job_requeued" and f.data["id"] == job]
    assert codes(requeue) == [Reason.JOB_REQUEUED_HOST_LOST] and requeue[0].data["key"] == a


def test_notices_carry_their_kind() -> None:
    w = World()
    a = w.join("a")
    w.run("a")
    w.notice(a, NoticeKind.PREEMPTION, deadline=120.0)
    assert w.cluster.hosts[a].history[-1].code == Reason.NOTICE_PREEMPTION
    w.tick(110.0)
    assert codes(w.facts, "job_requeued") == [Reason.JOB_REQUEUED_NOTICE]
    b = w.join("b")
    w.notice(b, NoticeKind.REBALANCE)
    assert w.cluster.hosts[b].history[-1].code == Reason.NOTICE_REBALANCE
    w.tick(420.0)
    assert w.cluster.hosts[b].history[-1].code == Reason.NOTICE_LAPSED


def test_refusals_carry_their_code() -> None:
    w = World()
    a = w.join("a")
    w.commit(
        lc.control(w.cluster, w.cfg, 1.0, "admin", w.cluster.hosts[a], AdminAction.DECOMMISSION)
    )
    w.tick(2.0)
    with pytest.raises(lc.Refused) as refused:
        joining.join(w.cluster, w.cfg, 3.0, lc.JoinRequest(name="a"))
    assert refused.value.code is Reason.REFUSED_DECOMMISSIONED
