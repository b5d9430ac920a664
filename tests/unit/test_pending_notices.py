"""Pending cloud notices as `xce-agent status` shows them: folded in, kept across saves, shown."""

from __future__ import annotations

import json
import time
from dataclasses import replace
from pathlib import Path

from xce_agent.core.pending_notices import PendingNotice, from_json, update
from xce_agent.operator.status import render_status
from xce_agent.state import AgentState, Lifecycle, StateStore
from xce_protocol.notices import Impact, Notice, NoticeKind, NoticeState

SPOT = Notice(NoticeKind.PREEMPTION, "aws", "aws-spot", 2120.0)
MAINT = Notice(NoticeKind.MAINTENANCE, "aws", "ev-1", None, impact=Impact.PAUSE)


def test_a_notice_is_added_changed_in_place_keeping_since_and_removed_when_ended() -> None:
    pending = update((), SPOT, 2000.0)
    assert pending == (PendingNotice("preemption", "aws", "aws-spot", 2120.0, 2000.0),)
    pending = update(pending, MAINT, 2001.0)
    pending = update(pending, replace(SPOT, deadline=2130.0), 2005.0)
    assert [(p.event_id, p.deadline, p.since) for p in pending] == [
        ("aws-spot", 2130.0, 2000.0),
        ("ev-1", None, 2001.0),
    ]
    pending = update(pending, replace(SPOT, state=NoticeState.ENDED), 2010.0)
    assert [p.event_id for p in pending] == ["ev-1"]
    assert update(pending, replace(SPOT, state=NoticeState.ENDED), 2011.0) == pending


def test_saved_with_the_state_and_bad_entries_dropped(tmp_path: Path) -> None:
    state = AgentState(lifecycle=Lifecycle.RUNNING, notices=update((), SPOT, 2000.0))
    store = StateStore(tmp_path)
    store.save(state)
    loaded = store.load()
    assert loaded is not None and loaded.notices == state.notices
    assert json.loads((tmp_path / "state.json").read_text())["notices"][0]["deadline"] == 2120.0
    bad = [{"kind": "x"}, "y", {**SPOT.to_wire(), "since": float("nan")}, None]
    assert from_json(bad) == () and from_json("nope") == ()


def test_status_shows_the_notice_with_absolute_times_and_nothing_when_none() -> None:
    now = 2030.0
    assert "notice:" not in render_status(AgentState(), now)
    pending = update(update((), SPOT, 2000.0), MAINT, 2001.0)
    view = render_status(AgentState(notices=pending), now)
    acts = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(2120.0))
    seen = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(2000.0))
    assert (
        f"notice:      preemption [aws aws-spot]: platform acts at {acts} (in 90s),"
        f" seen since {seen} (30s ago)"
    ) in view
    assert "notice:      maintenance (pause) [aws ev-1]: the platform names no time" in view
    late = render_status(AgentState(notices=pending), 2200.0)
    assert f"platform acts at {acts} (80s ago)" in late


def test_status_does_not_print_control_characters_from_an_event_id() -> None:
    hostile = Notice(NoticeKind.PREEMPTION, "azure", "E\x1b[2J\nforged", 2120.0)
    view = render_status(AgentState(notices=update((), hostile, 2000.0)), 2030.0)
    assert "\x1b" not in view and "forged" in view and "\nforged" not in view
