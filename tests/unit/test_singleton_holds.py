"""A singleton's lease hold as `xce-agent status` shows it: saved with the state, one line."""

from __future__ import annotations

import json
from pathlib import Path

from xce_agent.core.singleton_holds import SingletonHold, from_json
from xce_agent.operator.status import render_status
from xce_agent.state import AgentState, ComponentRecord, Lifecycle, StateStore

PROV = ComponentRecord(name="prov", role="provisioner", phase="running", pid=42)
WAITING = SingletonHold(
    "prov",
    "provisioner",
    "seeking",
    0,
    "HTTP 409 lease_held: lease provisioner is held by n2 (token 4) for 9.0s more",
    "refused_lease_held",
)


def test_each_phase_says_where_this_host_stands() -> None:
    holding = SingletonHold("prov", "provisioner", "holding", 5, "held", "lease_granted")
    view = render_status(AgentState(components=(PROV,), singletons=(holding,)), 0.0)
    assert "  lease: provisioner: held by this host, token 5 [lease_granted]" in view
    stopped = ComponentRecord(name="prov", role="provisioner", phase="stopped")
    view = render_status(AgentState(components=(stopped,), singletons=(WAITING,)), 0.0)
    assert (
        "  lease: provisioner: waiting for it (no grant yet): HTTP 409 lease_held: lease"
        " provisioner is held by n2 (token 4) for 9.0s more [refused_lease_held]"
    ) in view
    lost = SingletonHold(
        "prov", "provisioner", "seeking", 3, "lease provisioner not renewed", "lease_not_renewed"
    )
    view = render_status(AgentState(components=(stopped,), singletons=(lost,)), 0.0)
    assert "lease: provisioner: lost (token 3), asking again: lease provisioner not" in view
    idle = SingletonHold("prov", "provisioner", "idle", 3, "", "lease_released")
    view = render_status(AgentState(components=(stopped,), singletons=(idle,)), 0.0)
    assert "lease: provisioner: not asked for (token 3) [lease_released]" in view
    assert "lease:" not in render_status(AgentState(components=(PROV,)), 0.0)
    stale = render_status(AgentState(components=(PROV,), singletons=(holding,)), 0.0, live=False)
    assert "token 5 [lease_granted] (as last saved: the agent is not running)" in stale


def test_saved_with_the_state_and_bad_entries_dropped(tmp_path: Path) -> None:
    state = AgentState(lifecycle=Lifecycle.RUNNING, components=(PROV,), singletons=(WAITING,))
    store = StateStore(tmp_path)
    store.save(state)
    loaded = store.load()
    assert loaded is not None and loaded.singletons == (WAITING,)
    saved = json.loads((tmp_path / "state.json").read_text())["singletons"]
    assert saved[0]["lease"] == "provisioner" and saved[0]["phase"] == "seeking"
    bad = [{"component": "x"}, "y", {**WAITING.to_json(), "token": "7"}, None]
    assert from_json(bad) == () and from_json("nope") == ()


def test_no_control_characters_from_an_answer() -> None:
    hostile = SingletonHold("prov", "provisioner", "seeking", 0, "held\x1b[2J\nby", "")
    view = render_status(AgentState(components=(PROV,), singletons=(hostile,)), 0.0)
    assert "\x1b" not in view and "held?[2J?by" in view
