"""What a new operator's walk found: a second close recorded, a requeued job's stale note."""

from __future__ import annotations

from tests.unit.test_lifecycle import World
from xce_controller.core import lifecycle as lc
from xce_controller.core.model import AdminAction, HostState


def test_closing_a_closed_host_records_nothing() -> None:
    """Before: a second, identical `state` fact and history entry."""
    w = World()
    key = w.join("node1")
    for _ in range(2):
        w.commit(
            lc.control(w.cluster, w.cfg, w.now, "admin", w.cluster.hosts[key], AdminAction.CLOSE)
        )
    host = w.cluster.hosts[key]
    assert host.state is HostState.CLOSED
    assert [c.state for c in host.history] == [HostState.OPEN, HostState.CLOSED]
    opened = lc.control(w.cluster, w.cfg, w.now, "admin", host, AdminAction.OPEN)
    assert len(opened) == 1 and w.commit(opened)
    again = lc.control(w.cluster, w.cfg, w.now, "admin", w.cluster.hosts[key], AdminAction.OPEN)
    assert again == []


def test_a_requeued_job_running_elsewhere_drops_the_old_hosts_note() -> None:
    """Before: it kept "host node1 lost" while it ran on node2."""
    w = World()
    w.join("node1")
    job = w.submit()
    w.join("node2")
    w.seen["host:node2"] = 29.0
    w.tick(30.1)  # node1 is lost, node2 heard from
    assert w.state("host:node1") is HostState.LOST
    placed = w.cluster.jobs[job]
    assert placed.assigned == "host:node2" and placed.requeues == 1
    assert placed.note == ""
