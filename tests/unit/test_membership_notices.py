"""Notices through the membership machine: relayed while a member, silent once decommissioned,
and an OS shutdown announced to the controller before the components are stopped."""

from __future__ import annotations

from xce_agent.core import membership as ms
from xce_agent.core.membership import MembershipState
from xce_protocol.notices import Notice, NoticeKind

SPOT = Notice(NoticeKind.PREEMPTION, "aws", "aws-spot", 2000.0)


def booted(controller: bool = True) -> MembershipState:
    state, _ = ms.step(MembershipState(), ms.Boot("i-1", "node1", ("worker",), controller), 1.0)
    return state


def decommissioned() -> MembershipState:
    state, _ = ms.step(booted(), ms.Decommissioned("i-1", "reclaimed"), 2.0)
    assert state.decommissioned
    return state


def test_a_notice_goes_to_the_worker_and_the_controller() -> None:
    state = booted()
    after, actions = ms.step(state, ms.Noticed(SPOT), 5.0)
    assert after == state  # nothing to remember: the controller holds the notice
    assert actions == (ms.RelayNotice(SPOT), ms.SendNotice(SPOT))


def test_without_a_controller_only_the_worker_hears_it() -> None:
    _, actions = ms.step(booted(controller=False), ms.Noticed(SPOT), 5.0)
    assert actions == (ms.RelayNotice(SPOT),)


def test_a_decommissioned_host_says_nothing_and_starts_nothing() -> None:
    state = decommissioned()
    for event in (ms.Noticed(SPOT), ms.NoticeDrained("E1"), ms.NoticeHeld("E1", "maintenance")):
        after, actions = ms.step(state, event, 9.0)
        assert after == state and actions == ()


def test_drained_for_an_event_approves_it() -> None:
    _, actions = ms.step(booted(), ms.NoticeDrained("E1"), 5.0)
    assert actions == (ms.ApproveEvent("E1"),)


def test_the_controllers_notice_is_checked_against_what_the_provider_announces() -> None:
    _, actions = ms.step(booted(), ms.NoticeHeld("E1", "maintenance"), 5.0)
    assert actions == (ms.EndStaleNotice("E1", "maintenance"),)


def test_shutdown_is_announced_first_then_the_components_stop() -> None:
    _, actions = ms.step(booted(), ms.ShuttingDown(), 5.0)
    assert actions == (ms.AnnounceShutdown(),)
    _, actions = ms.step(booted(), ms.ShutdownAnnounced(), 6.0)
    assert actions == (ms.StopForShutdown(),)


def test_shutdown_without_anyone_to_tell_stops_at_once() -> None:
    for state in (booted(controller=False), decommissioned()):
        _, actions = ms.step(state, ms.ShuttingDown(), 5.0)
        assert actions == (ms.StopForShutdown(),)
