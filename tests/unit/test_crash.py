"""A worker's crash loop reported in a heartbeat: the host closed, or drained and returned."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from tests.unit.test_lifecycle import CFG, World
from xce_controller.core import crash
from xce_controller.core import lifecycle as lc
from xce_controller.core.model import AdminAction, HostState


def report(state: str, role: str = "worker") -> dict[str, Any]:
    return {
        "components": [
            {"name": "xce-worker", "role": role, "state": state, "last_exit": "exited with code 1"},
            {"name": "prov", "role": "provisioner", "state": "running"},
        ]
    }


def joined(policy: str = "close") -> tuple[World, str]:
    w = World(replace(CFG, on_worker_fatal=policy))
    w.expect("i-1", expected_name="h1")
    key = w.join("h1", "i-1")
    return w, key


def heartbeat(w: World, key: str, rep: dict[str, Any]) -> None:
    w.commit(crash.on_report(w.cluster, w.cfg, w.now, w.cluster.hosts[key], rep))


def test_close_then_reopen_when_the_worker_runs_again() -> None:
    w, key = joined()
    heartbeat(w, key, report("fatal"))
    host = w.cluster.hosts[key]
    assert host.state is HostState.CLOSED
    assert host.reason == "worker crash loop: xce-worker gave up (exited with code 1)"
    heartbeat(w, key, report("fatal"))  # said again: nothing more
    assert len(w.cluster.hosts[key].history) == len(host.history)
    heartbeat(w, key, report("backoff"))  # not yet running: still closed
    assert w.state(key) is HostState.CLOSED
    heartbeat(w, key, report("running"))
    assert w.state(key) is HostState.OPEN
    assert w.cluster.hosts[key].reason == "worker recovered: xce-worker running again"
    codes = [c.code for c in w.cluster.hosts[key].history[-2:]]
    assert codes == ["worker_fatal_closed", "worker_recovered"]


def test_an_admin_close_is_not_undone() -> None:
    w, key = joined()
    w.commit(lc.control(w.cluster, w.cfg, w.now, "admin", w.cluster.hosts[key], AdminAction.CLOSE))
    heartbeat(w, key, report("fatal"))
    heartbeat(w, key, report("running"))
    assert w.state(key) is HostState.CLOSED
    assert w.cluster.hosts[key].history[-1].by == "admin"


def test_replace_drains_and_lists_the_instance_for_return_with_the_reason() -> None:
    w, key = joined("replace")
    heartbeat(w, key, report("fatal"))
    assert w.state(key) is HostState.DRAINING
    assert [c.state for c in w.cluster.hosts[key].history[-2:]] == ["closed", "draining"]
    codes = [c.code for c in w.cluster.hosts[key].history[-2:]]
    assert codes == ["worker_fatal_closed", "worker_fatal_replaced"]
    w.tick(1.0)
    assert w.state(key) is HostState.DECOMMISSIONED
    returned = lc.to_return(w.cluster)
    assert [h.key for h in returned] == [key]
    assert returned[0].reason.startswith("worker crash loop: xce-worker gave up")
    heartbeat(w, key, report("running"))  # too late: a decommission is final
    assert w.state(key) is HostState.DECOMMISSIONED


def test_other_roles_and_other_states_change_nothing() -> None:
    w, key = joined("replace")
    reports: list[dict[str, Any]] = [
        report("fatal", role="provisioner"),
        report("running"),
        {"components": []},
        {},
    ]
    for rep in reports:
        heartbeat(w, key, rep)
    assert w.state(key) is HostState.OPEN


def test_a_loss_in_between_does_not_keep_the_host_closed_for_ever() -> None:
    # Closed for the crash loop, then lost (the host rebooted while the operator fixed the
    # worker, or the network dropped longer than the grace): heard again it is closed with
    # "heartbeat resumed", and the worker that runs again must still open it.
    w, key = joined()
    heartbeat(w, key, report("fatal"))
    w.tick(w.now + w.cfg.host_loss_grace + 1)
    assert w.state(key) is HostState.LOST
    w.heartbeat(key)
    assert w.state(key) is HostState.CLOSED
    assert w.cluster.hosts[key].history[-1].code == "heartbeat_resumed"
    heartbeat(w, key, report("running"))
    assert w.state(key) is HostState.OPEN
    assert w.cluster.hosts[key].history[-1].code == "worker_recovered"


def test_an_admin_close_that_names_the_crash_loop_is_still_the_admins() -> None:
    # The admin's reason is free text: one that starts as the controller's own did made the
    # worker's recovery open a host the admin had closed.
    w, key = joined()
    heartbeat(w, key, report("fatal"))
    host = w.cluster.hosts[key]
    why = "worker crash loop: looking into it"
    w.commit(lc.control(w.cluster, w.cfg, w.now, "admin", host, AdminAction.CLOSE, why=why))
    heartbeat(w, key, report("running"))
    assert w.state(key) is HostState.CLOSED
    assert w.cluster.hosts[key].history[-1].by == "admin"


def test_an_admin_who_opens_a_host_whose_worker_is_still_fatal_sees_it_closed_again() -> None:
    w, key = joined()
    heartbeat(w, key, report("fatal"))
    w.commit(lc.control(w.cluster, w.cfg, w.now, "admin", w.cluster.hosts[key], AdminAction.OPEN))
    assert w.state(key) is HostState.OPEN
    heartbeat(w, key, report("fatal"))
    assert w.state(key) is HostState.CLOSED
    assert w.cluster.hosts[key].history[-1].code == "worker_fatal_closed"
