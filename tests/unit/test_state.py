"""Local state: atomic, versioned, private, and a corrupt file never stops the agent."""

from __future__ import annotations

import json
import os
import stat
import time
from dataclasses import replace
from pathlib import Path

import pytest

from xce_agent.core.membership import MembershipState, Standing
from xce_agent.errors import StateError
from xce_agent.operator.demo import install_hint
from xce_agent.operator.status import render_status
from xce_agent.operator.status_line import status_line
from xce_agent.state import AgentState, ComponentRecord, Lifecycle, StateStore
from xce_agent.system import single_agent


def sample() -> AgentState:
    return AgentState(
        lifecycle=Lifecycle.RUNNING,
        instance_id="i-1",
        roles=("worker",),
        components=(ComponentRecord("w", "worker", "running", pid=42, restarts=2),),
    )


def test_round_trip_and_mode_0600(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    store.save(sample())
    assert stat.S_IMODE(os.stat(store.path).st_mode) == 0o600
    assert store.load() == sample()
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]  # no temp file left


HUGE = b"1" + b"0" * 400  # an integer no float holds: OverflowError, not ValueError


@pytest.mark.parametrize(
    "content",
    [
        *(b"{not json", b'{"version": 99, "lifecycle": "x"}', b"[]", b'{"version": 1}'),
        b'{"version": 1, "lifecycle": "running", "updated_at": ' + HUGE + b"}",
        b'{"version": 1, "lifecycle": "running", "controller": {"since": ' + HUGE + b"}}",
        b'{"version": 1, "lifecycle": "running", "tombstone": '
        b'{"instance_id": "i-1", "reason": "r", "at": ' + HUGE + b"}}",
    ],
)
def test_corrupt_state_is_moved_aside(
    tmp_path: Path, content: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    store = StateStore(tmp_path)
    store.path.write_bytes(content)
    assert store.load() is None
    assert not store.path.exists()
    aside = [p.name for p in tmp_path.iterdir()]
    assert len(aside) == 1 and aside[0].startswith("state.json.corrupt-")
    assert "corrupt state moved aside" in caplog.text


@pytest.mark.parametrize(
    "agent",
    [
        {"start_ticks": 10**400},  # the live-agent check divided it: OverflowError
        {"create_time": "0", "start_ticks": "5"},  # TypeError there
        {"boot_id": 3},
        {"pid": True},
    ],
)
def test_a_malformed_agent_record_is_ignored_not_fatal(agent: dict[str, object]) -> None:
    record = {"pid": 1, "create_time": 0.0, "boot_id": "b", "started_at": 0.0, "config": ""}
    data = {"version": 1, "lifecycle": "running", "agent": {**record, **agent}}
    state = AgentState.from_json(data)
    assert state.agent is None
    assert not single_agent.live_agent(state.agent)
    assert AgentState.from_json({**data, "agent": record}).agent is not None


def test_status_read_does_not_move_a_corrupt_file(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    store.path.write_bytes(b"garbage")
    with pytest.raises(StateError, match="unreadable state"):
        store.read_only()
    assert store.path.exists()


def test_failed_write_leaves_the_old_state_intact(tmp_path: Path) -> None:
    store = StateStore(tmp_path)
    store.save(sample())

    class Boom(AgentState):
        def to_json(self) -> dict[str, object]:
            return {"bad": object()}

    with pytest.raises(TypeError):
        store.save(Boom())
    assert store.load() == sample()
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_status_line_and_view() -> None:
    state = sample()
    assert status_line(state) == "worker: w running pid 42; no controller configured"
    view = render_status(state, 0.0)
    assert "w                  worker     running           42       -        2" in view
    gone = MembershipState(Standing.DECOMMISSIONED, 1.0, "n1", "reclaimed by provider", "i-1")
    tomb = AgentState(membership=gone)
    assert status_line(tomb) == "decommissioned: reclaimed by provider"


def test_status_shows_refusals_retry_after_and_each_exit_once() -> None:
    refused = MembershipState(
        Standing.REFUSED, 3600.0, "n1", "HTTP 403 unmatched: no such instance", "i-1", 7200.0
    )
    crashing = ComponentRecord(
        "w",
        "worker",
        "backoff",
        last_exit="exited with code 1",
        reason="exited with code 1; restart in 0.20s",
    )
    state = replace(sample(), membership=refused, components=(crashing,))
    line = status_line(state)
    assert "refused by the controller" in line and "HTTP 403 unmatched" in line
    assert "waiting out Retry-After until" in line
    view = render_status(state, 3700.0)
    assert "retry-after: waiting until" in view
    assert view.count("exited with code 1") == 1


@pytest.mark.parametrize(
    ("where", "hint"),
    [
        ("/usr/lib/python3/dist-packages/xce_agent/demo_launcher.py", "apt install xce-controller"),
        ("/usr/lib/python3.9/site-packages/xce_agent/demo_launcher.py", "dnf install"),
        ("/home/me/src/xce_agent/demo_launcher.py", "pip install"),
    ],
)
def test_demo_hint_fits_how_the_agent_was_installed(where: str, hint: str) -> None:
    assert hint in install_hint(where)


def test_status_shows_uptime_next_retry_note_tail_and_staleness() -> None:
    comps = (
        ComponentRecord("up", "worker", "running", pid=7, started=1000.0, tail=("a", "b")),
        ComponentRecord(
            "later", "worker", "backoff", next_retry=2000.0, note="restarting: command changed"
        ),
    )
    state = AgentState(
        lifecycle=Lifecycle.RUNNING, components=comps, containment="process groups: x"
    )
    view = render_status(state, 1090.0)
    assert "  90s " in view and "  | a\n  | b" in view
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(2000.0))
    assert f"next retry at {stamp}" in view
    assert "note: restarting: command changed" in view
    assert "containment: process groups: x" in view
    stale = render_status(state, 1090.0, live=False)
    assert stale.startswith("STALE: the agent is not running")
    assert "lifecycle:   running (stale)" in stale and " gone " in stale


def test_the_files_the_agent_writes_mark_its_own_state_directory(tmp_path: Path) -> None:
    """A restart finds what the last run left (the host credential of its join among it) and
    takes the directory as its own; one foreign file still refuses it."""
    from xce_agent.controller.credential import CREDENTIAL_FILE

    for name in ("state.json", "template.json", CREDENTIAL_FILE, ".credential.json.x1"):
        (tmp_path / name).write_text("{}")
    StateStore(tmp_path).ensure_directory()
    (tmp_path / "postgresql").mkdir()
    with pytest.raises(StateError, match="postgresql"):
        StateStore(tmp_path).ensure_directory()


def test_a_record_named_out_of_its_cgroup_is_ignored_and_the_rest_kept(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A component's name becomes cgroup, scope and pipe paths: a forged record named
    `w/../../victim.service` made `xce-agent stop` kill that service's cgroup, and the agent
    exit 1 at every start (its output pipe could not be created there)."""
    store = StateStore(tmp_path)
    store.save(sample())
    data = json.loads(store.path.read_text())
    good = data["components"][0]
    forged = [{**good, "name": n} for n in ("w/../../victim.service", "w\n", "", 5, None)]
    data["components"] += forged
    store.path.write_text(json.dumps(data))
    loaded = store.load()
    assert loaded is not None and loaded.components == sample().components
    ignored = [r.message for r in caplog.records if "ignored a component record" in r.message]
    assert len(ignored) == len(forged)
    assert "'w/../../victim.service'" in ignored[0]
