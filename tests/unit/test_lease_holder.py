"""The agent's lease holder machine on a fake clock, alone and against the controller's machine."""

from __future__ import annotations

import heapq
import random
from dataclasses import dataclass, field
from typing import Any

import pytest

from xce_agent.core import lease_holder as lh
from xce_controller.core import leases as ls

TERMS = lh.Terms("prov", ttl=3.0, margin=0.8)  # stop timeout 0.5 + guard 0.3


def run(
    state: lh.HolderState, *events: tuple[float, lh.Event]
) -> tuple[lh.HolderState, list[lh.Action]]:
    actions: list[lh.Action] = []
    for now, event in events:
        state, acts = lh.step(TERMS, state, event, now)
        actions += acts
    return state, actions


def holding(at: float = 0.0) -> lh.HolderState:
    state, actions = run(lh.HolderState(), (at, lh.Want("role started")))
    assert actions == [lh.Ask()] and state.asking == at
    state, actions = run(state, (at + 0.05, lh.Granted(at, 1)))
    assert actions == [lh.Start(1, at + 2.2)] and state.phase is lh.Phase.HOLDING
    state, _ = run(state, (at + 0.1, lh.ComponentUp()))
    return state


def test_grant_starts_and_renewals_every_third_of_the_ttl_extend_from_their_send_time() -> None:
    state = holding()
    assert lh.next_deadline(state) == 1.0
    state, actions = run(state, (1.0, lh.Tick()))
    assert actions == [lh.Ask()]
    state, actions = run(state, (1.4, lh.Granted(1.0, 1)))
    assert actions == [lh.Extend(1, 3.2)]  # 1.0 + 3 - 0.8: the send time counts, not 1.4
    assert lh.next_deadline(state) == 2.0


def test_failed_renewals_retry_fast_and_the_component_stops_at_the_deadline() -> None:
    state = holding()
    state, _ = run(state, (1.0, lh.Tick()))
    state, actions = run(state, (1.5, lh.Failed(1.0, "controller unreachable")))
    assert actions == [] and state.next_at == pytest.approx(1.65)
    state, actions = run(state, (1.65, lh.Tick()))
    assert actions == [lh.Ask()]
    assert lh.request_timeout(TERMS, state, 1.65) == pytest.approx(0.55)  # not past 2.2
    state, actions = run(state, (2.2, lh.Failed(1.65, "timed out")))
    assert isinstance(actions[0], lh.Stop) and "not renewed within 2.2s" in actions[0].reason
    assert actions[1:] == [lh.Ask()] and state.phase is lh.Phase.SEEKING


def test_the_deadline_holds_even_if_an_answer_never_comes() -> None:
    state = holding()
    state, _ = run(state, (1.0, lh.Tick()))  # asked; the answer is lost
    assert lh.next_deadline(state) == 2.2
    state, actions = run(state, (2.2, lh.Tick()))
    assert isinstance(actions[0], lh.Stop) and state.phase is lh.Phase.SEEKING


def test_another_holder_stops_the_component_at_once() -> None:
    state = holding()
    state, _ = run(state, (1.0, lh.Tick()))
    state, actions = run(state, (1.1, lh.Denied(1.0, "held by b", 2.5)))
    assert isinstance(actions[0], lh.Stop) and "held by b" in actions[0].reason
    assert state.phase is lh.Phase.SEEKING and state.next_at == pytest.approx(2.1)


def test_seeking_retries_at_the_expiry_the_controller_gives() -> None:
    state, _ = run(lh.HolderState(), (0.0, lh.Want("x")))
    state, actions = run(state, (0.1, lh.Denied(0.0, "held by b", 0.3)))
    assert actions == [] and state.next_at == pytest.approx(0.4)
    state, actions = run(state, (0.4, lh.Tick()))
    assert actions == [lh.Ask()]


def test_a_late_grant_is_not_run_on() -> None:
    state, _ = run(lh.HolderState(), (0.0, lh.Want("x")))
    state, actions = run(state, (2.5, lh.Granted(0.0, 4)))
    assert actions == [lh.Ask()] and state.phase is lh.Phase.SEEKING  # asks again at once


def test_stale_answers_are_ignored() -> None:
    state = holding()
    after, actions = run(state, (1.5, lh.Granted(0.5, 1)))
    assert after == state and actions == []


def test_a_new_token_while_holding_restarts_the_component() -> None:
    state = holding()
    state, _ = run(state, (1.0, lh.Tick()))
    state, actions = run(state, (1.1, lh.Granted(1.0, 2)))
    assert isinstance(actions[0], lh.Stop) and actions[1:] == [lh.Ask()]
    assert state.phase is lh.Phase.SEEKING
    state, actions = run(state, (1.2, lh.Granted(1.1, 2)))
    assert len(actions) == 1 and isinstance(actions[0], lh.Start) and actions[0].token == 2
    assert actions[0].valid_until == pytest.approx(3.3)


def test_graceful_stop_releases_once_the_component_is_down() -> None:
    state = holding()
    state, actions = run(state, (0.5, lh.Unwant("xce-agent stop")))
    assert actions == [lh.Stop("xce-agent stop")] and state.phase is lh.Phase.RELEASING
    state, actions = run(state, (0.7, lh.ComponentDown()))
    assert actions == [lh.Release()] and state.phase is lh.Phase.IDLE
    assert lh.next_deadline(state) is None


def test_a_grant_after_unwant_is_given_back() -> None:
    state, _ = run(lh.HolderState(), (0.0, lh.Want("x")), (0.1, lh.Unwant("stop")))
    state, actions = run(state, (0.2, lh.Granted(0.0, 3)))
    assert actions == [lh.Release()] and state.phase is lh.Phase.IDLE


def test_a_component_running_without_the_lease_is_stopped() -> None:
    state, _ = run(lh.HolderState(), (0.0, lh.Want("x")))
    state, actions = run(state, (0.1, lh.ComponentUp()))
    assert isinstance(actions[0], lh.Stop) and "not held" in actions[0].reason


def test_a_restarted_component_gets_its_deadline() -> None:
    state = holding()
    state, actions = run(state, (0.5, lh.ComponentDown()), (0.6, lh.ComponentUp()))
    assert actions == [lh.Extend(1, 2.2)]


# --- the agent machine against the controller machine ----------------------------------


@dataclass
class Agent:
    name: str
    state: lh.HolderState = field(default_factory=lh.HolderState)
    session: str = "run0"
    paused_until: float = 0.0
    fence: float = 0.0  # the deadline its fence last got
    dead_by: float = 0.0  # a stopped component is gone by then; a restart waits for it
    alive: tuple[float, int] | None = None  # the running component's start and token
    intervals: list[tuple[float, float, str, int]] = field(default_factory=list)


STOP_TIMEOUT = 0.5


@pytest.mark.parametrize("seed", range(40))
def test_never_two_against_the_controller_with_delays_drops_pauses_and_restarts(
    seed: int,
) -> None:
    rnd = random.Random(seed)  # noqa: S311 - a reproducible schedule
    agents = {n: Agent(n) for n in "abc"}
    book, started = ls.EMPTY, 0.0
    queue: list[tuple[float, int, str, Any]] = []
    seq = 0

    def at(when: float, kind: str, what: Any) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(queue, (when, seq, kind, what))

    def act(agent: Agent, actions: tuple[lh.Action, ...], now: float) -> None:
        for action in actions:
            if isinstance(action, lh.Ask):
                sent = now
                if rnd.random() < 0.15:  # lost: the client times out
                    timeout = lh.request_timeout(TERMS, agent.state, now)
                    at(now + timeout, "answer", (agent.name, lh.Failed(sent, "timeout")))
                else:
                    at(now + rnd.uniform(0, 0.6), "arrive", (agent.name, agent.session, sent))
            elif isinstance(action, (lh.Start, lh.Extend)):
                agent.fence = max(agent.fence, action.valid_until)
                if isinstance(action, lh.Start) and agent.alive is None:
                    begin = max(now, agent.dead_by) + 0.05  # supervision waits for the exit
                    agent.alive = (begin, action.token)
                    at(begin, "up", agent.name)
            elif isinstance(action, lh.Stop) and agent.alive is not None:
                finish(agent, now)
            elif isinstance(action, lh.Release):
                at(now + rnd.uniform(0, 0.2), "release", (agent.name, agent.session))

    def finish(agent: Agent, now: float) -> None:
        assert agent.alive is not None
        start, token = agent.alive
        agent.intervals.append((start, now + STOP_TIMEOUT, agent.name, token))
        agent.alive = None
        agent.dead_by = now + STOP_TIMEOUT
        at(now + STOP_TIMEOUT, "down", agent.name)

    def deliver(agent: Agent, event: lh.Event, now: float) -> None:
        if now < agent.paused_until:  # a stopped agent handles it when it wakes
            at(agent.paused_until, "answer", (agent.name, event))
            return
        agent.state, actions = lh.step(TERMS, agent.state, event, now)
        act(agent, actions, now)
        when = lh.next_deadline(agent.state)
        if when is not None:
            at(max(when, now), "tick", agent.name)

    def target(now: float) -> Agent:
        holders = [a for a in agents.values() if a.alive is not None]
        return holders[0] if holders and rnd.random() < 0.7 else rnd.choice(list(agents.values()))

    for agent in agents.values():
        deliver(agent, lh.Want("start"), 0.0)
    for _ in range(10):
        at(rnd.uniform(0, 60), "fault", rnd.choice(["pause", "restart-ctl", "restart-agent"]))
    now = 0.0
    while queue and now < 70:
        now, _, kind, what = heapq.heappop(queue)
        for agent in agents.values():  # the fence: no agent needed
            if agent.alive is not None and now >= agent.fence:
                finish(agent, agent.fence)
        if kind == "arrive":
            name, session, sent = what
            book, _, answer = ls.step(book, ls.Acquire("prov", name, session, 3.0, now), now)
            back = (
                lh.Granted(sent, answer.lease.token)
                if isinstance(answer, ls.Held)
                else lh.Denied(sent, answer.why, answer.lease.expires - now)
            )
            at(now + rnd.uniform(0, 0.3), "answer", (name, back))
        elif kind == "release":
            name, session = what
            book, _, _ = ls.step(book, ls.Release("prov", name, session, now), now)
        elif kind == "answer":
            name, event = what
            deliver(agents[name], event, now)
        elif kind == "tick":
            deliver(agents[str(what)], lh.Tick(), now)
        elif kind in ("up", "down"):
            event = lh.ComponentUp() if kind == "up" else lh.ComponentDown()
            deliver(agents[str(what)], event, now)
        elif what == "pause":
            target(now).paused_until = now + rnd.uniform(1, 8)
        elif what == "restart-ctl":
            started = now
            book = ls.restored([ls.from_row(ls.to_row(le)) for le in book.leases.values()], now)
        else:  # the agent dies; its fence keeps the deadline; a new run is a new holder
            agent = target(now)
            agent.session = f"run{seq}"
            agent.state = lh.HolderState()
            deliver(agent, lh.Want("restarted"), now)
    assert started >= 0
    spans = sorted(i for a in agents.values() for i in a.intervals)
    assert len({s[2] for s in spans}) >= 2  # the lease changed hands
    for before, after in zip(spans, spans[1:]):
        assert before[1] <= after[0], f"{before} overlaps {after}"
        assert before[3] <= after[3], f"token went down: {before} then {after}"
