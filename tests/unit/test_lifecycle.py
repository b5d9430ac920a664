"""The controller lifecycle, stepped with a fake clock through every transition and policy."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from xce_agent.errors import ConfigError
from xce_controller.core import credentials, deadlines, joining
from xce_controller.core import jobs as jobmodel
from xce_controller.core import lifecycle as lc
from xce_controller.core.config import ClusterConfig, Template, load_cluster_config
from xce_controller.core.facts import apply
from xce_controller.core.model import (
    AdminAction,
    Cluster,
    DrainPolicy,
    Fact,
    HostState,
    JobEvent,
    JobState,
    UnmatchedJoins,
)

CFG = ClusterConfig(
    templates={"default": Template("default", slots=2), "gpu": Template("gpu", slots=1)},
    join_deadline=100.0,
    drain_timeout=50.0,
    heartbeat_interval=5.0,
    host_loss_grace=30.0,
)


class World:
    def __init__(self, cfg: ClusterConfig = CFG) -> None:
        self.cfg = cfg
        self.cluster = Cluster()
        self.now = 0.0
        self.seen: dict[str, float] = {}
        self.alive_since = 0.0  # when the (simulated) controller process started
        self.credentials: dict[str, str] = {}  # instance id or name -> last issued credential

    def commit(self, facts: list[Fact]) -> list[Fact]:
        for fact in facts:
            apply(self.cluster, fact)
        return facts

    def state(self, key: str) -> HostState:
        return self.cluster.hosts[key].state

    def tick(self, to: float) -> None:
        self.now = to
        for host in list(self.cluster.hosts.values()):
            seen = self.seen.get(host.key)
            self.commit(
                deadlines.host_due(self.cluster, self.cfg, to, host, seen, self.alive_since)
            )
        self.commit(jobmodel.place(self.cluster, self.cfg, to))

    def expect(self, iid: str, **kw: object) -> None:
        self.commit(
            lc.expect(
                self.cluster,
                self.cfg,
                self.now,
                "prov",
                iid,
                str(kw.pop("template", "default")),
                **kw,  # type: ignore[arg-type]
            )
        )

    def heartbeat(self, key: str) -> None:
        self.seen[key] = self.now
        self.commit(lc.heartbeat(self.cluster, self.now, self.cluster.hosts[key]))
        self.tick(self.now)

    def restart(self, at: float) -> None:
        """The controller process starts again at `at`: what it knew of heartbeats is gone."""
        self.now = self.alive_since = at
        self.seen = {}

    def join(self, name: str, iid: str = "", **kw: object) -> str:
        """Join as an agent does: again with the credential the last join issued."""
        kw.setdefault("token", self.credentials.get(iid or name, ""))
        secret = credentials.mint()
        req = lc.JoinRequest(
            name=name,
            instance_id=iid,
            issue=credentials.seal(secret),
            **kw,  # type: ignore[arg-type]
        )
        host, facts = joining.join(self.cluster, self.cfg, self.now, req)
        self.commit(facts)
        self.seen[host.key] = self.now
        self.credentials[iid or name] = secret
        return host.key

    def submit(self, slots: int = 1, host: str = "") -> int:
        job_id = self.cluster.next_job
        self.commit(jobmodel.submit(self.cluster, self.now, "admin", ["sleep", "9"], slots, host))
        self.commit(jobmodel.place(self.cluster, self.cfg, self.now))
        return job_id

    def decommission(
        self,
        key: str,
        policy: str | None = None,
        drain_timeout: float | None = None,
        why: str = "",
    ) -> None:
        host = self.cluster.hosts[key]
        self.commit(
            lc.control(
                self.cluster,
                self.cfg,
                self.now,
                "admin",
                host,
                AdminAction.DECOMMISSION,
                drain_timeout=drain_timeout,
                policy=policy,
                why=why,
            )
        )
        self.tick(self.now)


def test_expected_host_goes_overdue_at_its_deadline_and_is_listed_for_return() -> None:
    w = World()
    w.expect("i-1")
    w.tick(99.9)
    assert w.state("i-1") is HostState.EXPECTED
    w.tick(100.0)
    assert w.state("i-1") is HostState.OVERDUE
    assert [h.key for h in lc.to_return(w.cluster)] == ["i-1"]
    w.commit(lc.ack_return(w.cluster, 101.0, "prov", "i-1"))
    assert w.state("i-1") is HostState.RETURNED
    assert lc.to_return(w.cluster) == []
    with pytest.raises(lc.Refused) as info:
        w.join("node1", "i-1")
    assert info.value.kind == "decommissioned"


def test_join_matches_by_instance_id_name_and_address() -> None:
    w = World()
    w.expect("i-1", template="gpu")
    w.expect("i-2", expected_name="node2")
    w.expect("i-3", expected_address="10.0.0.3")
    assert w.join("anything", "i-1") == "i-1"
    assert w.join("node2", "i-2") == "i-2"
    assert w.join("node3", "i-3", addresses=("127.0.0.1", "10.0.0.3")) == "i-3"
    one = w.cluster.hosts["i-1"]
    assert one.state is HostState.OPEN and one.provisioned and one.template == "gpu"
    assert one.history[-1].why == "joined as provisioned instance"


def test_unmatched_join_accepted_with_default_or_refused() -> None:
    w = World()
    key = w.join("stray")
    host = w.cluster.hosts[key]
    assert (host.state, host.provisioned, host.template) == (HostState.OPEN, False, "default")
    strict = World(replace(CFG, unmatched_joins=UnmatchedJoins.REFUSE))
    with pytest.raises(lc.Refused) as info:
        strict.join("stray", "i-404")
    assert (info.value.kind, info.value.status) == ("unmatched", 403)


def test_second_host_claiming_a_matched_instance_is_refused() -> None:
    w = World()
    w.expect("i-1")
    w.join("node1", "i-1", boot_id="boot-1")
    with pytest.raises(lc.Refused) as info:
        w.join("node-impostor", "i-1")
    assert info.value.kind == "duplicate" and info.value.status == 409
    assert w.join("node1", "i-1", boot_id="boot-1") == "i-1"  # the same boot, answer lost
    assert w.cluster.hosts["i-1"].incarnation == 2


def test_per_instance_token_is_checked() -> None:
    w = World()
    w.expect("i-1", token="t0k-0123456789ab")
    with pytest.raises(lc.Refused) as info:
        w.join("node1", "i-1", token="wrong")
    assert info.value.kind == "unauthorized"
    w.join("node1", "i-1", token="t0k-0123456789ab")


def test_decommission_of_an_idle_host_is_immediate_and_rejoin_is_refused() -> None:
    w = World()
    w.expect("i-1")
    w.join("node1", "i-1")
    w.decommission("i-1", why="reclaim")
    host = w.cluster.hosts["i-1"]
    assert host.state is HostState.DECOMMISSIONED
    assert [c.state for c in host.history] == ["expected", "open", "draining", "decommissioned"]
    with pytest.raises(lc.Refused) as info:
        w.join("node1", "i-1")
    refusal = info.value
    assert (refusal.kind, refusal.status) == ("decommissioned", 410)
    assert refusal.details == {"host": "node1", "instance_id": "i-1", "reason": "reclaim"}
    with pytest.raises(lc.Refused):
        joining.speaker(w.cluster, 0.0, "node1", "i-1")


def test_drain_waits_for_running_jobs() -> None:
    w = World()
    w.join("node1")
    job = w.submit()
    w.commit(
        jobmodel.job_report(w.cluster, 1.0, w.cluster.hosts["host:node1"], job, JobEvent.STARTED)
    )
    w.decommission("host:node1", policy="requeue", drain_timeout=50.0)
    assert w.state("host:node1") is HostState.DRAINING
    w.tick(20.0)
    assert w.state("host:node1") is HostState.DRAINING
    w.commit(
        jobmodel.job_report(w.cluster, 21.0, w.cluster.hosts["host:node1"], job, JobEvent.FINISHED)
    )
    w.seen["host:node1"] = 21.0
    w.tick(21.0)
    assert w.state("host:node1") is HostState.DECOMMISSIONED
    assert w.cluster.jobs[job].state is JobState.DONE


@pytest.mark.parametrize(
    ("policy", "job_state"), [("requeue", JobState.ASSIGNED), ("kill", JobState.KILLED)]
)
def test_drain_timeout_applies_the_policy(policy: str, job_state: JobState) -> None:
    w = World()
    w.join("node1")
    w.join("node2")
    w.commit(
        lc.control(w.cluster, CFG, 0.0, "admin", w.cluster.hosts["host:node2"], AdminAction.CLOSE)
    )
    job = w.submit(host="node1")
    w.decommission("host:node1", policy=policy, drain_timeout=10.0)
    w.commit(
        lc.control(w.cluster, CFG, 0.0, "admin", w.cluster.hosts["host:node2"], AdminAction.OPEN)
    )
    w.seen.update({"host:node1": 9.0, "host:node2": 9.0})
    w.tick(9.9)
    assert w.state("host:node1") is HostState.DRAINING
    w.seen.update({"host:node1": 10.0, "host:node2": 10.0})
    w.tick(10.0)
    assert w.state("host:node1") is HostState.DECOMMISSIONED
    assert "drain timed out after 10s" in w.cluster.hosts["host:node1"].reason
    final = w.cluster.jobs[job]
    if policy == "requeue":
        assert final.requeues == 1 and final.assigned == ""  # pinned to node1: stays queued
        assert final.state is JobState.PENDING
    else:
        assert final.state is job_state


def test_requeued_job_runs_elsewhere() -> None:
    w = World()
    w.join("node1")
    job = w.submit()
    w.join("node2")
    w.decommission("host:node1", policy="requeue", drain_timeout=5.0)
    w.seen.update({"host:node1": 5.0, "host:node2": 5.0})
    w.tick(5.0)
    assert w.cluster.jobs[job].assigned == "host:node2"


def test_wait_policy_has_no_deadline() -> None:
    w = World()
    w.join("node1")
    w.submit()
    w.decommission("host:node1", policy="wait", drain_timeout=1.0)
    host = w.cluster.hosts["host:node1"]
    assert host.drain is not None and host.drain.policy is DrainPolicy.WAIT
    assert host.drain.deadline is None
    w.seen["host:node1"] = 1000.0
    w.tick(1000.0)
    assert w.state("host:node1") is HostState.DRAINING


def test_missed_heartbeats_past_grace_make_the_host_lost_and_requeue_jobs() -> None:
    w = World()
    w.expect("i-1")
    w.join("node1", "i-1")
    job = w.submit()
    w.tick(30.0)
    assert w.state("i-1") is HostState.OPEN
    w.tick(30.1)
    assert w.state("i-1") is HostState.LOST
    assert w.cluster.jobs[job].state is JobState.PENDING
    assert [h.key for h in lc.to_return(w.cluster)] == ["i-1"]
    w.commit(lc.heartbeat(w.cluster, 31.0, w.cluster.hosts["i-1"]))
    assert w.state("i-1") is HostState.OPEN
    assert w.cluster.hosts["i-1"].reason == "heartbeat resumed after loss (open again)"


def test_closed_host_takes_no_work_and_fifo_fills_free_slots() -> None:
    w = World()
    w.join("a")
    w.join("b")
    w.commit(lc.control(w.cluster, CFG, 0.0, "admin", w.cluster.hosts["host:b"], AdminAction.CLOSE))
    jobs = [w.submit() for _ in range(3)]
    assigned = [w.cluster.jobs[j].assigned for j in jobs]
    assert assigned == ["host:a", "host:a", ""]  # a has 2 slots, b is closed
    w.commit(lc.control(w.cluster, CFG, 0.0, "admin", w.cluster.hosts["host:b"], AdminAction.OPEN))
    w.tick(1.0)
    assert w.cluster.jobs[jobs[2]].assigned == "host:b"


@pytest.mark.parametrize(
    ("action", "reason"),
    [(AdminAction.CLOSE, "closed by admin"), (AdminAction.OPEN, "opened by admin")],
)
def test_an_admin_action_without_a_reason_says_what_was_done(
    action: AdminAction, reason: str
) -> None:
    w = World()
    w.join("a")
    if action is AdminAction.OPEN:
        w.commit(
            lc.control(w.cluster, CFG, 0.0, "admin", w.cluster.hosts["host:a"], AdminAction.CLOSE)
        )
    w.commit(lc.control(w.cluster, CFG, 0.0, "admin", w.cluster.hosts["host:a"], action))
    assert w.cluster.hosts["host:a"].reason == reason


def test_admin_can_decommission_an_expected_instance() -> None:
    w = World()
    w.expect("i-9")
    w.decommission("i-9")
    assert w.state("i-9") is HostState.DECOMMISSIONED
    with pytest.raises(lc.Refused):
        w.decommission("i-9")


def test_every_transition_records_who_and_why() -> None:
    w = World()
    w.expect("i-1")
    w.join("node1", "i-1")
    w.decommission("i-1", why="spot reclaim")
    by = [(c.state, c.by) for c in w.cluster.hosts["i-1"].history]
    assert by == [
        ("expected", "prov"),
        ("open", "node1"),
        ("draining", "admin"),
        ("decommissioned", "controller"),
    ]
    assert all(c.why for c in w.cluster.hosts["i-1"].history)


def test_grace_must_exceed_agent_backoff_plus_rejoin(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(
        "version: 1\nhost_loss_grace: 30s\nagent_max_restart_backoff: 30s\n"
        "templates:\n  default: {slots: 2}\n"
    )
    with pytest.raises(ConfigError) as info:
        load_cluster_config(path)
    assert info.value.problems == [
        "host_loss_grace: expected a duration longer than agent_max_restart_backoff + "
        "rejoin_allowance (40s), so a restarting worker is not taken for lost, got '30s' "
        f"({path} line 2)"
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "version: 1\ntemplates:\n  gpu: {slots: 0}\n",
            "templates.gpu.slots: expected an integer from 1 to 4096, got 0 (F line 3)",
        ),
        (
            "version: 1\ntemplates:\n  default: {slot: 2}\n",
            "templates.default.slot: expected one of the keys dispatch_windows, host_groups, "
            "model, resources, roles, slots, type, got unknown key 'slot' (F line 3)",
        ),
        (
            "version: 1\ntemplates:\n  gpu: {}\n",
            "templates.default: expected a default template (unmatched_joins is accept), got "
            "nothing (F line 2)",
        ),
        (
            "version: 1\ndefaults: {drain_policy: nuke}\ntemplates:\n  default: {}\n",
            "defaults.drain_policy: expected one of requeue, kill, wait, got 'nuke' (F line 2)",
        ),
        (
            "version: 1\ntemplates:\n  default: {dispatch_windows: [always]}\n",
            "templates.default.dispatch_windows[0]: expected a window like 'Mon-Fri 08:00-18:00' "
            "or '22:00-06:00', got 'always' (F line 3)",
        ),
    ],
)
def test_bad_cluster_config(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_cluster_config(path)
    assert message in [p.replace(str(path), "F") for p in info.value.problems]


def test_a_hosts_record_keeps_its_newest_changes_and_the_facts_keep_them_all() -> None:
    from xce_controller.core.facts import HISTORY_KEPT

    w = World()
    key = w.join("flappy")
    before = w.cluster.hosts[key].history
    facts: list[Fact] = []
    for i in range(2 * HISTORY_KEPT):
        action = AdminAction.CLOSE if i % 2 == 0 else AdminAction.OPEN
        host = w.cluster.hosts[key]
        facts += w.commit(lc.control(w.cluster, w.cfg, float(i + 1), "admin", host, action))
    history = w.cluster.hosts[key].history
    assert len(history) == HISTORY_KEPT
    assert history[-1].at == float(2 * HISTORY_KEPT) and history[-1].state is HostState.OPEN
    assert sum(1 for f in facts if f.kind == "state") == 2 * HISTORY_KEPT  # nothing lost
    assert before and before[0] not in history
