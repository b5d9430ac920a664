"""The agent's singleton metrics: a hold's phase, code and token, holds begun, renewals that
failed and holds lost, counted from the lease holder machine's steps and rendered as valid
exposition text; the join deadline while it is pending."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from xce_agent.core import lease_holder as lh
from xce_agent.metrics.file import Tally, render, sample
from xce_agent.metrics.leases import LeaseCounts, SingletonSample, count
from xce_agent.state import AgentState

TERMS = lh.Terms("prov", ttl=3.0, margin=0.8)


def drive(*events: tuple[float, lh.Event]) -> tuple[lh.HolderState, LeaseCounts]:
    state, counts = lh.HolderState(), LeaseCounts()
    for now, event in events:
        after, _ = lh.step(TERMS, state, event, now)
        counts = count(counts, state, event, after)
        state = after
    return state, counts


def text(state: lh.HolderState, counts: LeaseCounts, **kw: object) -> str:
    one = SingletonSample(
        "cloud-provisioner", "prov", state.phase.value, state.code, state.token, counts
    )
    s = sample(AgentState(instance_id="i-1"), Tally(), {}, True, False, singletons=(one,), **kw)  # type: ignore[arg-type]
    return render(s)


def test_a_hold_that_is_not_renewed_counts_its_failures_and_one_loss() -> None:
    state, counts = drive(
        (0.0, lh.Want("role started")),
        (0.05, lh.Granted(0.0, 4)),
        (0.1, lh.ComponentUp()),
        (1.0, lh.Tick()),
        (1.2, lh.Failed(0.0, "an answer nobody waits for")),  # not counted: not in flight
        (1.5, lh.Failed(1.0, "controller unreachable")),
        (1.65, lh.Tick()),
        (2.2, lh.Failed(1.65, "timed out")),
    )
    assert state.phase is lh.Phase.SEEKING and state.code == "lease_not_renewed"
    assert counts == LeaseCounts(holds=1, renew_failures=2, losses=(("lease_not_renewed", 1),))
    out = text(state, counts)
    labels = 'component="cloud-provisioner",lease="prov"'
    assert f"xce_agent_singleton_holding{{{labels}}} 0" in out
    assert f"xce_agent_singleton_token{{{labels}}} 4" in out
    assert f"xce_agent_lease_holds_total{{{labels}}} 1" in out
    assert f"xce_agent_lease_renew_failures_total{{{labels}}} 2" in out
    assert f'xce_agent_lease_losses_total{{code="lease_not_renewed",{labels}}} 1' in out
    assert f'xce_agent_lease_losses_total{{code="lease_lost",{labels}}} 0' in out
    assert (
        f'xce_agent_singleton_state{{code="lease_not_renewed",{labels},phase="seeking"}} 1' in out
    )


def test_a_renewal_whose_failure_comes_after_the_deadline_still_counts() -> None:
    state, counts = drive(
        (0.0, lh.Want("x")),
        (0.05, lh.Granted(0.0, 1)),
        (1.0, lh.Tick()),  # the renewal goes out; its answer never comes in time
        (2.2, lh.Tick()),  # the deadline: stopped before the request gives up
        (2.25, lh.Failed(1.0, "timed out")),
    )
    assert state.phase is lh.Phase.SEEKING
    assert counts == LeaseCounts(holds=1, renew_failures=1, losses=(("lease_not_renewed", 1),))
    _, counts = drive((0.0, lh.Want("x")), (0.5, lh.Failed(0.0, "not joined yet")))
    assert counts.renew_failures == 0  # asking for the lease is not renewing it


def test_a_hold_taken_by_another_holder_is_a_loss_and_a_release_is_not() -> None:
    state, counts = drive(
        (0.0, lh.Want("x")),
        (0.05, lh.Granted(0.0, 1)),
        (1.0, lh.Tick()),
        (1.1, lh.Denied(1.0, "held by h2")),
    )
    assert state.code == "lease_lost" and counts.losses == (("lease_lost", 1),)
    state, counts = drive(
        (0.0, lh.Want("x")),
        (0.05, lh.Granted(0.0, 1)),
        (0.1, lh.ComponentUp()),
        (0.2, lh.Unwant("xce-agent stop")),
        (0.3, lh.ComponentDown()),
    )
    assert state.phase is lh.Phase.IDLE and state.code == "lease_released"
    assert counts == LeaseCounts(holds=1)


def test_holding_and_waiting_behind_another_host() -> None:
    state, counts = drive((0.0, lh.Want("x")), (0.05, lh.Granted(0.0, 7)))
    out = text(state, counts)
    assert 'xce_agent_singleton_holding{component="cloud-provisioner",lease="prov"} 1' in out
    state, _ = drive((0.0, lh.Want("x")), (0.05, lh.Denied(0.0, "held by h2", 1.0)))
    assert state.phase is lh.Phase.SEEKING and state.code == "refused_lease_held"


def test_no_singletons_no_families_and_the_join_deadline_only_when_configured() -> None:
    plain = render(sample(AgentState(instance_id="i-1"), Tally(), {}, True, False))
    assert "singleton" not in plain and "lease" not in plain and "join" not in plain
    state, counts = drive()
    waiting = text(state, counts, join=(1.7e9, False))
    assert "xce_agent_join_deadline_timestamp_seconds 1700000000" in waiting
    assert "xce_agent_join_gave_up 0" in waiting
    gave_up = text(state, counts, join=(None, True))
    assert "xce_agent_join_deadline_timestamp" not in gave_up
    assert "xce_agent_join_gave_up 1" in gave_up


def test_promtool_accepts_the_singleton_families() -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (Debian package prometheus; make e2e-deps)")
    state, counts = drive((0.0, lh.Want("x")), (0.05, lh.Granted(0.0, 2)))
    out = subprocess.run(
        [promtool, "check", "metrics"],
        input=text(state, counts, join=(1.7e9, False)),
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stdout + out.stderr
