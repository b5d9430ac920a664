"""Lifecycle timelines under faults: losses and returns, controller downtime, removed
templates, jobs no host can take. Each reproduces a defect the live controller had."""

from __future__ import annotations

from dataclasses import replace

from tests.unit.test_lifecycle import CFG, World
from xce_controller.core import deadlines
from xce_controller.core import jobs as jobmodel
from xce_controller.core import lifecycle as lc
from xce_controller.core.config import Template
from xce_controller.core.model import AdminAction, HostState, JobEvent, JobState


def _draining_with_a_job(w: World) -> int:
    w.expect("i-1")
    w.join("node1", "i-1")
    job = w.submit()
    w.commit(jobmodel.job_report(w.cluster, 1.0, w.cluster.hosts["i-1"], job, JobEvent.STARTED))
    w.decommission("i-1", policy="wait")
    assert w.state("i-1") is HostState.DRAINING
    return job


def test_a_draining_host_lost_and_heard_again_completes_its_decommission() -> None:
    w = World()
    job = _draining_with_a_job(w)
    w.tick(30.1)
    assert w.state("i-1") is HostState.LOST
    assert w.cluster.jobs[job].state is JobState.PENDING  # requeued with the loss
    w.now = 40.0
    w.heartbeat("i-1")
    host = w.cluster.hosts["i-1"]
    # Before: "open", reason "heartbeat resumed after loss", and new jobs landed on it.
    assert host.state is HostState.DECOMMISSIONED
    assert [c.state for c in host.history][-3:] == ["lost", "draining", "decommissioned"]
    assert w.cluster.jobs[job].assigned == ""


def test_a_draining_host_lost_and_rejoined_resumes_its_drain_then_completes_it() -> None:
    w = World()
    _draining_with_a_job(w)
    w.tick(30.1)
    w.now = 35.0
    w.join("node1", "i-1", boot_id="rebooted")
    host = w.cluster.hosts["i-1"]
    assert host.state is HostState.DRAINING  # not open: the decommission is remembered
    assert host.drain is not None and host.drain.policy.value == "wait"
    assert w.submit() and not w.cluster.active.get("i-1")  # nothing new lands on it
    w.tick(35.0)  # its job went back to the queue at the loss: nothing left to wait for
    assert w.state("i-1") is HostState.DECOMMISSIONED


def test_a_closed_host_lost_returns_closed_and_an_open_one_open() -> None:
    w = World()
    w.join("a")
    w.join("b")
    w.commit(lc.control(w.cluster, CFG, 0.0, "admin", w.cluster.hosts["host:a"], AdminAction.CLOSE))
    w.tick(30.1)
    assert (w.state("host:a"), w.state("host:b")) == (HostState.LOST, HostState.LOST)
    w.now = 31.0
    w.heartbeat("host:a")
    w.join("b")
    assert (w.state("host:a"), w.state("host:b")) == (HostState.CLOSED, HostState.OPEN)


def test_a_lost_provisioned_host_that_joins_again_is_open_and_stays_open() -> None:
    w = World()
    w.expect("i-1")
    w.join("node1", "i-1")
    w.tick(30.1)
    assert w.state("i-1") is HostState.LOST
    w.now = 50.0
    w.join("node1", "i-1")
    w.tick(50.0)  # before: the join was answered "accepted" with state lost, and it stayed
    assert w.state("i-1") is HostState.OPEN
    w.tick(79.9)
    assert w.state("i-1") is HostState.OPEN  # a fresh grace from the join
    w.tick(80.1)
    assert w.state("i-1") is HostState.LOST


def test_controller_downtime_does_not_count_against_hosts() -> None:
    w = World()
    w.expect("i-1")
    w.join("node1", "i-1")
    job = w.submit()
    w.expect("i-2", deadline=50.0)
    w.now = 10.0
    w.heartbeat("i-1")
    w.restart(at=500.0)  # down from 10 s to 500 s, far past the 30 s grace and i-2's deadline
    w.tick(500.0)
    # Before: every host lost at the first sweep, its jobs requeued to run twice.
    assert w.state("i-1") is HostState.OPEN
    assert w.state("i-2") is HostState.EXPECTED
    assert w.cluster.jobs[job].state is JobState.ASSIGNED
    assert lc.to_return(w.cluster) == []
    assert deadlines.next_due(w.cluster.hosts["i-1"], CFG, None, 500.0) == 530.001
    w.tick(529.9)
    assert w.state("i-1") is HostState.OPEN
    w.tick(530.1)  # no heartbeat within a grace of the start: lost now
    assert (w.state("i-1"), w.state("i-2")) == (HostState.LOST, HostState.OVERDUE)


def test_a_host_heard_after_the_restart_keeps_its_job() -> None:
    w = World()
    w.join("node1")
    job = w.submit()
    w.restart(at=1000.0)
    w.now = 1020.0
    w.heartbeat("host:node1")
    w.tick(1045.0)
    assert w.state("host:node1") is HostState.OPEN
    assert w.cluster.jobs[job].requeues == 0


def test_a_template_in_use_cannot_leave_the_config() -> None:
    w = World()
    w.expect("i-1", template="gpu")
    w.expect("i-2", template="gpu")
    w.join("stray")
    shrunk = replace(CFG, templates={"default": CFG.templates["default"]})
    assert lc.template_problems(w.cluster, shrunk) == [
        "templates.gpu: expected the template while hosts use it (2: i-1, i-2), got nothing"
    ]
    w.decommission("i-1")
    w.decommission("i-2")
    assert lc.template_problems(w.cluster, shrunk) == []  # decommissioned records do not count


def test_jobs_no_host_can_take_say_why() -> None:
    w = World()
    w.join("node1")
    pinned = w.submit(host="ghost")
    huge = w.submit(slots=64)
    fine = w.submit()
    w.tick(1.0)
    assert w.cluster.jobs[pinned].note == "waiting: no live host named ghost"
    assert (
        w.cluster.jobs[huge].note == "waiting: needs 64 slots; the largest template (default) has 2"
    )
    assert w.cluster.jobs[fine].state is JobState.ASSIGNED and w.cluster.jobs[fine].note == ""
    before = w.cluster.version
    w.tick(2.0)
    assert w.cluster.version == before  # the reason is one fact, not one per pass
    w.join("ghost")
    w.tick(3.0)
    assert w.cluster.jobs[pinned].assigned == "host:ghost"


def test_placement_after_a_join_looks_only_at_the_joined_host() -> None:
    w = World()
    w.join("a")
    w.submit(slots=2)
    w.submit(slots=2)  # a is full: pending
    key = w.join("b")
    facts = jobmodel.place(w.cluster, w.cfg, 0.0, keys=[key])
    assert [(f.kind, f.data["key"]) for f in facts] == [("job_assigned", "host:b")]
    big = replace(w.cfg, templates={**w.cfg.templates, "default": Template("default", slots=9)})
    assert jobmodel.place(w.cluster, big, 0.0, keys=[]) == []


def test_cancel_kills_a_job_and_refuses_a_finished_one() -> None:
    w = World()
    w.join("node1")
    job = w.submit()
    w.commit(jobmodel.cancel(w.cluster, 1.0, "admin", job))
    assert w.cluster.jobs[job].state is JobState.KILLED
    assert w.cluster.jobs[job].note == "cancelled by admin"
    try:
        jobmodel.cancel(w.cluster, 2.0, "admin", job)
    except lc.Refused as exc:
        assert (exc.kind, exc.status) == ("conflict", 409)
    else:
        raise AssertionError("cancel of a killed job was accepted")


def test_a_drain_timeout_that_passed_while_the_controller_was_down_waits_a_grace() -> None:
    w = World()
    w.expect("i-1")
    w.join("node1", "i-1")
    job = w.submit()
    w.commit(jobmodel.job_report(w.cluster, 1.0, w.cluster.hosts["i-1"], job, JobEvent.STARTED))
    w.now = 10.0
    w.decommission("i-1", policy="requeue", drain_timeout=20.0)
    w.restart(at=100.0)  # down from 10 s to 100 s: the 30 s timeout passed meanwhile
    w.tick(100.0)
    # Before: requeued at the start, though the job may have finished while no report could
    # arrive; it would run twice (or, with policy kill, be killed after it succeeded).
    assert w.state("i-1") is HostState.DRAINING
    assert w.cluster.jobs[job].state is JobState.RUNNING
    assert deadlines.next_due(w.cluster.hosts["i-1"], CFG, None, 100.0) == 130.0
    w.now = 105.0
    w.heartbeat("i-1")
    w.commit(jobmodel.job_report(w.cluster, 105.0, w.cluster.hosts["i-1"], job, JobEvent.FINISHED))
    w.tick(105.0)
    assert w.state("i-1") is HostState.DECOMMISSIONED
    assert (w.cluster.jobs[job].state, w.cluster.jobs[job].requeues) == (JobState.DONE, 0)


def test_a_drain_timeout_still_acts_a_grace_after_the_restart() -> None:
    w = World()
    w.expect("i-1")
    w.join("node1", "i-1")
    job = w.submit()
    w.decommission("i-1", policy="kill", drain_timeout=20.0)
    w.restart(at=100.0)
    w.now = 110.0
    w.heartbeat("i-1")  # heard, but the job does not finish
    w.tick(129.9)
    assert w.state("i-1") is HostState.DRAINING
    w.tick(130.0)
    assert w.state("i-1") is HostState.DECOMMISSIONED
    assert w.cluster.jobs[job].state is JobState.KILLED


def test_a_drain_begun_after_the_start_keeps_its_own_timeout() -> None:
    w = World()
    w.restart(at=100.0)
    w.join("node1")
    job = w.submit()
    w.now = 101.0
    w.decommission("host:node1", policy="kill", drain_timeout=2.0)
    w.heartbeat("host:node1")
    w.tick(103.0)  # not held to the start's grace (130 s)
    assert w.cluster.jobs[job].state is JobState.KILLED
