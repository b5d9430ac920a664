"""A planned stop, decided: whether the agent drains, what the controller's answer means, what
the control socket's request says; and the controller's side stepped with a fake clock: closed
and drained, never lost by its silence, reopened when its agent runs again (an admin's close
kept), jobs still running at the bound requeued."""

from __future__ import annotations

import math

import pytest

from tests.unit.test_notices_lifecycle import World
from xce_agent.core import planned_stop as ps
from xce_agent.core.membership import MembershipState, Standing
from xce_controller.core import deadlines, notices
from xce_controller.core import jobs as jobmodel
from xce_controller.core import lifecycle as lc
from xce_controller.core.model import AdminAction, HostState, JobEvent, JobState
from xce_protocol.notices import NoticeKind
from xce_protocol.protocol import Outcome

JOINED = MembershipState(Standing.CONNECTED)


@pytest.mark.parametrize(
    ("requested", "configured", "expected"),
    [
        (None, 60.0, 60.0),
        (5.0, 60.0, 5.0),
        (0.0, 60.0, 0.0),
        (-1.0, 60.0, 0.0),
        (math.nan, 60.0, 0.0),
    ],
)
def test_the_bound_is_the_operators_else_the_configs(
    requested: float | None, configured: float, expected: float
) -> None:
    assert ps.bound(requested, configured) == expected


@pytest.mark.parametrize(
    ("member", "seconds", "why"),
    [
        (JOINED, 30.0, ""),
        (JOINED, 0.0, "no drain asked for"),
        (MembershipState(Standing.NOT_CONFIGURED), 30.0, "no controller configured"),
        (MembershipState(Standing.DECOMMISSIONED), 30.0, "the host is decommissioned"),
        (MembershipState(Standing.UNREACHABLE), 30.0, "the controller is unreachable"),
        (MembershipState(Standing.WAITING), 30.0, "the controller is waiting"),
        (MembershipState(Standing.REFUSED), 30.0, "the controller is refused"),
    ],
)
def test_only_a_joined_agent_drains(member: MembershipState, seconds: float, why: str) -> None:
    assert ps.why_not_drain(member, seconds) == why


OURS = "agent-stop-1.000"


@pytest.mark.parametrize(
    ("outcome", "body", "verdict"),
    [
        (Outcome.ACCEPTED, {"notice": {"event_id": OURS, "drained": True}}, ps.Verdict.DRAINED),
        (Outcome.ACCEPTED, {"notice": {"event_id": OURS, "drained": False}}, ps.Verdict.WAIT),
        (Outcome.ACCEPTED, {"notice": {"event_id": OURS, "drained": "yes"}}, ps.Verdict.WAIT),
        # the host acts on a stronger notice, or the answer names none: nothing to wait for
        (
            Outcome.ACCEPTED,
            {"notice": {"event_id": "aws-spot", "drained": False}},
            ps.Verdict.STOP_NOW,
        ),
        (Outcome.ACCEPTED, {"notice": None}, ps.Verdict.STOP_NOW),
        (Outcome.ACCEPTED, {}, ps.Verdict.STOP_NOW),
        # an older controller (422: no stop kind), a refusal, a failure: the stop goes on now
        (Outcome.REFUSED, {"error": "bad_request"}, ps.Verdict.STOP_NOW),
        (Outcome.RETRY, {}, ps.Verdict.STOP_NOW),
        (Outcome.INCOMPATIBLE, {}, ps.Verdict.STOP_NOW),
        (Outcome.DECOMMISSIONED, {}, ps.Verdict.STOP_NOW),
    ],
)
def test_what_the_answer_to_the_stop_notice_means(
    outcome: Outcome, body: dict[str, object], verdict: ps.Verdict
) -> None:
    assert ps.verdict(outcome, body, OURS) is verdict


@pytest.mark.parametrize("seconds", [None, 0.0, 2.5, 60.0])
def test_the_socket_request_says_the_drain(seconds: float | None) -> None:
    assert ps.parse_request(ps.request_text(seconds)) == seconds


@pytest.mark.parametrize("text", ["drain", "drain=", "drain=-1", "drain=nan", "drain=inf", "x"])
def test_a_bad_socket_request_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a drain"):
        ps.parse_request(text)


# --- the controller's side ---------------------------------------------------------------


def stopped(w: World, key: str, bound: float | None = 60.0) -> None:
    deadline = None if bound is None else w.now + bound
    w.notice(key, NoticeKind.STOP, provider="agent", event_id="agent-stop-1", deadline=deadline)


def test_a_planned_stop_closes_the_host_and_its_silence_is_no_loss() -> None:
    w = World()
    a = w.join("a")
    stopped(w, a)
    host = w.cluster.hosts[a]
    assert host.state is HostState.CLOSED and host.reason.startswith(notices.STOPPED)
    assert notices.drained(w.cluster, host)  # no job: the agent may stop its worker now
    later = 10 * w.cfg.host_loss_grace  # no heartbeat for ten graces
    due = deadlines.host_due(w.cluster, w.cfg, later, w.cluster.hosts[a], last_seen=0.0)
    assert [f.kind for f in due] == ["notice"]  # its drain's end (no job left), no loss
    w.commit(due)
    assert w.state(a) is HostState.CLOSED
    assert lc.to_return(w.cluster) == []
    assert deadlines.next_due(w.cluster.hosts[a], w.cfg, 0.0) is None


def test_jobs_may_finish_within_the_bound_and_those_still_running_then_are_requeued() -> None:
    w = World()
    a = w.join("a")
    done, late = w.run("a"), w.run("a")
    stopped(w, a, bound=60.0)
    assert not notices.drained(w.cluster, w.cluster.hosts[a])
    w.commit(jobmodel.job_report(w.cluster, 5.0, w.cluster.hosts[a], done, JobEvent.FINISHED, 0))
    w.tick(59.0)
    assert w.job(done) is JobState.DONE and w.job(late) is JobState.RUNNING
    w.tick(60.0)
    assert w.job(late) is JobState.PENDING and w.cluster.jobs[late].requeues == 1
    assert notices.drained(w.cluster, w.cluster.hosts[a])


def test_without_a_bound_the_jobs_are_requeued_at_once() -> None:
    w = World()
    a = w.join("a")
    job = w.run("a")
    stopped(w, a, bound=None)
    w.tick(0.0)
    assert w.job(job) is JobState.PENDING


def test_the_host_reopens_when_its_agent_runs_again_in_the_same_boot() -> None:
    w = World()
    a = w.join("a", boot="b1")
    stopped(w, a)
    w.now = 500.0
    w.join("a", boot="b1")  # the agent started again: its join (or renewing heartbeat)
    host = w.cluster.hosts[a]
    assert host.state is HostState.OPEN and host.notice is None
    assert host.reason == "agent started again after its planned stop"
    later = 500.0 + 2 * w.cfg.host_loss_grace  # and it is watched for loss again
    lost = deadlines.host_due(w.cluster, w.cfg, later, w.cluster.hosts[a], last_seen=500.0)
    assert [f.data.get("state") for f in lost] == [HostState.LOST.value]


def test_an_admins_close_is_kept_after_the_planned_stop() -> None:
    w = World()
    a = w.join("a")
    w.commit(lc.control(w.cluster, w.cfg, 0.0, "admin", w.cluster.hosts[a], AdminAction.CLOSE))
    stopped(w, a)
    w.join("a")
    assert w.state(a) is HostState.CLOSED and w.cluster.hosts[a].notice is None


def test_a_stronger_notice_is_not_replaced_by_the_stop() -> None:
    w = World()
    a = w.join("a")
    w.notice(a, NoticeKind.PREEMPTION, deadline=120.0)
    stopped(w, a)
    notice = w.cluster.hosts[a].notice
    assert notice is not None and notice.kind == NoticeKind.PREEMPTION.value


def test_xcecli_why_tells_a_planned_stop_as_such() -> None:
    from tests.unit.test_story import HOST, ev
    from xce_controller.core.story import story

    notice = {"kind": "stop", "provider": "agent", "deadline": 160.0, "acted": False}
    events = [ev(1, 100, "notice", "n1", key="i-1", notice=notice, code="notice_stop")]
    text = "\n".join(story(HOST, events, now=200))
    assert "planned stop of the agent, its jobs drain for 1m00s [notice_stop]" in text
    assert "cloud notice" not in text


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["stop", "worker", "--no-drain"], "not with NAME"),
        (["stop", "worker", "--drain-timeout", "5s"], "not with NAME"),
        (["stop", "--drain-timeout", "5s", "--no-drain"], "not both"),
    ],
)
def test_the_drain_options_are_for_the_whole_host(args: list[str], said: str) -> None:
    from click.testing import CliRunner

    from xce_agent.cli import main

    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and said in result.output, result.output


def test_a_drain_under_way_is_saved_and_shown_by_status() -> None:
    from xce_agent.operator.status import render_status
    from xce_agent.state import AgentState

    drain = ps.Draining(1000.0, 60.0, "agent-stop-1000.000", "xce-agent stop")
    state = AgentState(planned_stop=drain)
    again = AgentState.from_json(state.to_json())
    assert again.planned_stop == drain and again.planned_stop.deadline == 1060.0
    assert state.to_json()["planned_stop"]["deadline"] == 1060.0
    text = render_status(state, 1010.0)
    assert "planned stop: draining since " in text and "bound 60s" in text
    assert "(in 50s) at the latest" in text
    assert "planned stop" not in render_status(AgentState(), 1010.0)


@pytest.mark.parametrize(
    "data",
    [None, [], {}, {"since": "x", "bound": 1}, {"since": 1, "bound": math.nan}, {"since": True}],
)
def test_a_saved_drain_that_is_none_is_left_out(data: object) -> None:
    assert ps.Draining.from_json(data) is None
