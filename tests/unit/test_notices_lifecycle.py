"""Notices as planned drains, stepped with a fake clock: close, requeue at deadline - margin,
rebalance lapsing, maintenance ending with a reboot, weaker warnings recorded only."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from xce_controller.core import credentials, deadlines, joining, notices
from xce_controller.core import jobs as jobmodel
from xce_controller.core import lifecycle as lc
from xce_controller.core.codec import host_from_json, host_to_json
from xce_controller.core.config import ClusterConfig, Template, load_cluster_config
from xce_controller.core.facts import apply
from xce_controller.core.model import AdminAction, Cluster, Fact, HostState, JobEvent, JobState
from xce_controller.core.notice_config import NoticeSettings
from xce_protocol.errors import ConfigError
from xce_protocol.notices import Impact, Notice, NoticeKind, NoticeState

CFG = ClusterConfig(
    templates={"default": Template("default", slots=2)},
    heartbeat_interval=5.0,
    host_loss_grace=1000.0,
    notices=NoticeSettings(margin=10.0, rebalance_reopen=300.0),
)


class World:
    def __init__(self, cfg: ClusterConfig = CFG) -> None:
        self.cfg = cfg
        self.cluster = Cluster()
        self.facts: list[Fact] = []
        self.now = 0.0
        self.credentials: dict[str, str] = {}  # host name -> the credential its last join issued

    def commit(self, facts: list[Fact]) -> None:
        for fact in facts:
            apply(self.cluster, fact)
            self.facts.append(fact)

    def tick(self, to: float) -> None:
        self.now = to
        for host in list(self.cluster.hosts.values()):
            self.commit(deadlines.host_due(self.cluster, self.cfg, to, host, to))
        self.commit(jobmodel.place(self.cluster, self.cfg, to))

    def join(self, name: str, boot: str = "b1") -> str:
        """Join as an agent does: again with the credential the last join issued."""
        before = self.cluster.host_by_name(name)
        secret = credentials.mint()
        req = lc.JoinRequest(
            name=name,
            boot_id=boot,
            token=self.credentials.get(name, ""),
            issue=credentials.seal(secret),
        )
        host, facts = joining.join(self.cluster, self.cfg, self.now, req)
        self.credentials[name] = secret
        self.commit(facts)
        self.commit(
            notices.after_join(
                self.now, self.cluster.hosts[host.key], before.boot_id if before else ""
            )
        )
        return host.key

    def run(self, host: str) -> int:
        job_id = self.cluster.next_job
        self.commit(jobmodel.submit(self.cluster, self.now, "admin", ["x"], 1, host))
        self.commit(jobmodel.place(self.cluster, self.cfg, self.now))
        key = self.cluster.jobs[job_id].assigned
        self.commit(
            jobmodel.job_report(
                self.cluster, self.now, self.cluster.hosts[key], job_id, JobEvent.STARTED
            )
        )
        return job_id

    def notice(self, key: str, kind: NoticeKind, **kw: object) -> None:
        kw.setdefault("deadline", None)
        n = Notice(kind, str(kw.pop("provider", "aws")), str(kw.pop("event_id", kind.value)), **kw)  # type: ignore[arg-type]
        self.commit(notices.receive(self.cluster, self.cfg, self.now, self.cluster.hosts[key], n))

    def state(self, key: str) -> HostState:
        return self.cluster.hosts[key].state

    def job(self, job_id: int) -> JobState:
        return self.cluster.jobs[job_id].state


def test_preemption_closes_and_requeues_what_still_runs_at_deadline_minus_margin() -> None:
    w = World()
    a = w.join("a")
    job = w.run("a")
    w.notice(a, NoticeKind.PREEMPTION, deadline=120.0)
    assert w.state(a) is HostState.CLOSED
    assert "preemption notice (aws), platform acts at" in w.cluster.hosts[a].reason
    assert notices.next_due(w.cluster.hosts[a]) == 110.0
    assert deadlines.next_due(w.cluster.hosts[a], w.cfg, 0.0) == 110.0
    w.tick(109.9)
    assert w.job(job) is JobState.RUNNING
    w.tick(110.0)
    assert w.job(job) is JobState.PENDING and w.cluster.jobs[job].requeues == 1
    assert "preemption notice" in w.cluster.jobs[job].note
    acted = w.cluster.hosts[a].notice
    assert acted is not None and acted.acted
    assert notices.drained(w.cluster, w.cluster.hosts[a])
    w.tick(111.0)  # closed: the requeued job is not placed back on the doomed host
    assert w.job(job) is JobState.PENDING


def test_a_job_that_finishes_before_the_margin_is_not_requeued() -> None:
    w = World()
    a = w.join("a")
    job = w.run("a")
    w.notice(a, NoticeKind.PREEMPTION, deadline=120.0)
    w.commit(jobmodel.job_report(w.cluster, 50.0, w.cluster.hosts[a], job, JobEvent.FINISHED, 0))
    w.tick(110.0)
    assert w.job(job) is JobState.DONE and w.cluster.jobs[job].requeues == 0


@pytest.mark.parametrize(
    ("kind", "cfg"),
    [
        (NoticeKind.SHUTDOWN, CFG),
        (NoticeKind.PREEMPTION, replace(CFG, notices=NoticeSettings(requeue_at_once=True))),
        (NoticeKind.TERMINATION, replace(CFG, notices=NoticeSettings(requeue_at_once=True))),
    ],
)
def test_requeued_at_once(kind: NoticeKind, cfg: ClusterConfig) -> None:
    w = World(cfg)
    a = w.join("a")
    job = w.run("a")
    w.notice(a, kind, deadline=120.0)
    w.tick(0.0)  # what the live controller settles right after the commit
    assert w.cluster.jobs[job].requeues == 1
    assert w.cluster.jobs[job].assigned != a


def test_rebalance_closes_then_reopens_by_itself_if_no_preemption_follows() -> None:
    w = World()
    a = w.join("a")
    job = w.run("a")
    w.notice(a, NoticeKind.REBALANCE)
    assert w.state(a) is HostState.CLOSED
    w.tick(299.0)
    assert w.state(a) is HostState.CLOSED and w.job(job) is JobState.RUNNING  # advice only
    w.tick(300.0)
    assert w.state(a) is HostState.OPEN and w.cluster.hosts[a].notice is None
    assert w.cluster.hosts[a].reason == "rebalance advice lapsed: no preemption followed"


def test_rebalance_then_preemption_does_not_reopen() -> None:
    w = World()
    a = w.join("a")
    w.notice(a, NoticeKind.REBALANCE, event_id="aws-rebalance")
    w.now = 60.0
    w.notice(a, NoticeKind.PREEMPTION, event_id="aws-spot", deadline=180.0)
    w.tick(400.0)
    assert w.state(a) is HostState.CLOSED
    notice = w.cluster.hosts[a].notice
    assert notice is not None and notice.kind == "preemption"


def test_a_host_the_admin_closed_is_not_reopened_by_a_lapsed_notice() -> None:
    w = World()
    a = w.join("a")
    w.commit(lc.control(w.cluster, w.cfg, 0.0, "admin", w.cluster.hosts[a], AdminAction.CLOSE))
    w.notice(a, NoticeKind.REBALANCE)
    w.tick(300.0)
    assert w.state(a) is HostState.CLOSED and w.cluster.hosts[a].notice is None


@pytest.mark.parametrize("end", ["lapse", "withdrawn"])
def test_an_admin_close_while_a_notice_has_the_host_closed_holds_after_the_notice(
    end: str,
) -> None:
    w = World()
    a = w.join("a")
    w.notice(a, NoticeKind.REBALANCE)
    w.now = 10.0
    host = w.cluster.hosts[a]
    w.commit(lc.control(w.cluster, w.cfg, w.now, "admin", host, AdminAction.CLOSE))
    w.commit(notices.after_admin_close(w.now, "admin", host))
    if end == "lapse":
        w.tick(300.0)
    else:
        w.notice(a, NoticeKind.REBALANCE, state=NoticeState.ENDED)
    assert w.state(a) is HostState.CLOSED and w.cluster.hosts[a].notice is None


def test_maintenance_reboot_drains_before_not_before_and_reopens_after_the_reboot() -> None:
    w = World()
    a = w.join("a", boot="b1")
    job = w.run("a")
    w.notice(a, NoticeKind.MAINTENANCE, event_id="ev-1", deadline=900.0, impact=Impact.REBOOT)
    assert w.state(a) is HostState.CLOSED
    w.tick(890.0)
    assert w.job(job) is JobState.PENDING
    w.now = 950.0
    w.join("a", boot="b1")  # the agent restarted, the host did not: still maintenance
    assert w.state(a) is HostState.CLOSED
    w.join("a", boot="b2")  # back from the reboot
    assert w.state(a) is HostState.OPEN and w.cluster.hosts[a].notice is None
    assert "rejoined after the maintenance notice" in w.cluster.hosts[a].reason


def test_maintenance_withdrawn_reopens() -> None:
    w = World()
    a = w.join("a")
    w.notice(a, NoticeKind.MAINTENANCE, event_id="ev-1", deadline=900.0)
    w.notice(a, NoticeKind.MAINTENANCE, event_id="ev-1", deadline=900.0, state=NoticeState.ENDED)
    assert w.state(a) is HostState.OPEN and w.cluster.hosts[a].notice is None


def test_pause_maintenance_is_recorded_but_closes_nothing() -> None:
    w = World()
    a = w.join("a")
    job = w.run("a")
    w.notice(a, NoticeKind.MAINTENANCE, event_id="gce", impact=Impact.PAUSE)
    w.tick(1000.0)
    assert w.state(a) is HostState.OPEN and w.job(job) is JobState.RUNNING
    assert w.cluster.hosts[a].notice is not None


def test_a_weaker_or_foreign_notice_is_recorded_only() -> None:
    w = World()
    a = w.join("a")
    w.notice(a, NoticeKind.PREEMPTION, event_id="spot", deadline=120.0)
    w.notice(a, NoticeKind.REBALANCE, event_id="reb")
    w.notice(a, NoticeKind.MAINTENANCE, event_id="other", state=NoticeState.ENDED)
    notice = w.cluster.hosts[a].notice
    assert notice is not None and notice.event_id == "spot"
    received = [
        f.data["received"]["event_id"]
        for f in w.facts
        if f.kind == "notice" and "received" in f.data
    ]
    assert received == ["spot", "reb", "other"]


def test_replaying_the_facts_rebuilds_the_notices() -> None:
    w = World()
    a = w.join("a")
    w.run("a")
    w.notice(a, NoticeKind.PREEMPTION, deadline=120.0, raw='{"action": "stop"}')
    w.tick(110.0)
    replayed = Cluster()
    for fact in w.facts:
        apply(replayed, fact)
    assert replayed.hosts[a] == w.cluster.hosts[a]


def test_notices_config_section(tmp_path: Path) -> None:
    path = tmp_path / "cluster.yaml"
    path.write_text(
        "version: 1\ntemplates: {default: {}}\nnotices:\n  margin: 15s\n"
        "  requeue_at_once: true\n  rebalance_reopen: 5m\n"
    )
    assert load_cluster_config(path).notices == NoticeSettings(15.0, True, 300.0)
    path.write_text(
        "version: 1\ntemplates: {default: {}}\nnotices:\n  margin: soon\n"
        "  requeue_at_once: 'yes'\n  rebalance_reopen: 0\n  grace: 1\n"
    )
    with pytest.raises(ConfigError) as info:
        load_cluster_config(path)
    assert sorted(p.split(":")[0] for p in info.value.problems) == [
        "notices.grace",
        "notices.margin",
        "notices.rebalance_reopen",
        "notices.requeue_at_once",
    ]
    assert f"notices.requeue_at_once: expected true or false, got 'yes' ({path} line 5)" in (
        info.value.problems
    )


def test_rebalance_withdrawn_reopens_at_once() -> None:
    w = World()
    a = w.join("a")
    w.notice(a, NoticeKind.REBALANCE, event_id="aws-rebalance")
    w.now = 30.0
    w.notice(a, NoticeKind.REBALANCE, event_id="aws-rebalance", state=NoticeState.ENDED)
    assert w.state(a) is HostState.OPEN and w.cluster.hosts[a].notice is None
    assert w.cluster.hosts[a].reason == "rebalance notice withdrawn by aws"


def test_a_lapsed_rebalance_read_again_after_an_agent_restart_does_not_close_the_host() -> None:
    w = World()
    a = w.join("a")
    w.notice(a, NoticeKind.REBALANCE, event_id="aws-rebalance")
    w.tick(300.0)
    assert w.state(a) is HostState.OPEN
    received = len(w.facts)
    w.now = 400.0
    w.notice(a, NoticeKind.REBALANCE, event_id="aws-rebalance")  # the new agent reads it again
    assert len(w.facts) == received + 1 and w.facts[-1].data["received"]["kind"] == "rebalance"
    assert w.state(a) is HostState.OPEN and w.cluster.hosts[a].notice is None
    # ... and a real warning still acts.
    w.notice(a, NoticeKind.PREEMPTION, event_id="aws-spot", deadline=600.0)
    assert w.state(a) is HostState.CLOSED


def test_a_maintenance_notice_read_again_after_its_reboot_does_not_close_the_host() -> None:
    w = World()
    a = w.join("a", boot="b1")
    w.notice(a, NoticeKind.MAINTENANCE, event_id="ev-1", deadline=900.0, impact=Impact.REBOOT)
    w.now = 950.0
    w.join("a", boot="b2")
    assert w.state(a) is HostState.OPEN
    w.notice(a, NoticeKind.MAINTENANCE, event_id="ev-1", deadline=900.0, impact=Impact.REBOOT)
    assert w.state(a) is HostState.OPEN
    w.notice(a, NoticeKind.MAINTENANCE, event_id="ev-2", deadline=2000.0, impact=Impact.REBOOT)
    assert w.state(a) is HostState.CLOSED  # the next event is a new one


def test_the_notices_that_are_over_survive_a_replay_and_stay_few() -> None:
    w = World()
    a = w.join("a")
    for i in range(12):
        w.notice(a, NoticeKind.MAINTENANCE, event_id=f"ev-{i}", deadline=900.0)
        w.notice(a, NoticeKind.MAINTENANCE, event_id=f"ev-{i}", state=NoticeState.ENDED)
    done = w.cluster.hosts[a].done_notices
    assert done == tuple((f"ev-{i}", 900.0) for i in range(4, 12))
    replayed = Cluster()
    for fact in w.facts:
        apply(replayed, fact)
    assert replayed.hosts[a] == w.cluster.hosts[a]
    assert host_from_json(host_to_json(w.cluster.hosts[a])) == w.cluster.hosts[a]  # snapshot


def test_an_event_read_again_after_its_reboot_with_its_time_passed_does_not_act() -> None:
    """Azure lists an event as Started (no NotBefore) while it happens: the agent after the
    reboot takes the time it saw it as the deadline, which is another time, but no later."""
    w = World()
    a = w.join("a", boot="b1")
    ev = "0a1b2c3d-azure-event"
    w.notice(a, NoticeKind.MAINTENANCE, provider="azure", event_id=ev, deadline=900.0)
    w.now = 950.0
    w.join("a", boot="b2")
    job = w.run("a")
    w.now = 960.0
    w.notice(a, NoticeKind.MAINTENANCE, provider="azure", event_id=ev, deadline=958.0)
    assert w.state(a) is HostState.OPEN and w.cluster.hosts[a].notice is None
    w.tick(970.0)
    assert w.job(job) is JobState.RUNNING


@pytest.mark.parametrize(
    ("provider", "event_id", "kind"),
    [
        ("aws", "aws-spot", NoticeKind.PREEMPTION),  # a spot instance stopped, then started
        ("gce", "gce-preempted", NoticeKind.PREEMPTION),  # a spot VM stopped, then started
        ("gce", "gce-maintenance-terminate_on_host_maintenance", NoticeKind.MAINTENANCE),
    ],
)
def test_a_new_event_under_a_reused_id_still_acts(
    provider: str, event_id: str, kind: NoticeKind
) -> None:
    """AWS names every spot interruption "aws-spot", GCE every preemption and maintenance of a
    kind alike: the next one announces another time, and must close the host again."""
    w = World()
    a = w.join("a", boot="b1")
    w.notice(a, kind, provider=provider, event_id=event_id, deadline=120.0)
    assert w.state(a) is HostState.CLOSED
    w.now = 200.0
    w.join("a", boot="b2")  # back after the stop: the notice is over
    assert w.state(a) is HostState.OPEN and w.cluster.hosts[a].notice is None
    w.now = 5000.0
    job = w.run("a")
    w.notice(a, kind, provider=provider, event_id=event_id, deadline=5120.0)
    assert w.state(a) is HostState.CLOSED
    w.tick(5110.0)
    assert w.job(job) is JobState.PENDING  # requeued before the platform acts
