"""The per-host history checker itself: a clean story passes, and each kind of broken history
(a move the state machine has not, a decision made twice, an acknowledged operation lost or
doubled) is named."""

from __future__ import annotations

from typing import Any

from tests.integration import history_checker as history
from xce_controller.core.model import Fact


def f(kind: str, **data: Any) -> Fact:
    return Fact(kind, 0.0, "test", data)


STORY = [
    f("expected", instance_id="i-1", template="default"),
    f("joined", key="i-1"),
    f("job_submitted", id=1),
    f("job_assigned", id=1, key="i-1"),
    f("state", key="i-1", state="lost"),
    f("job_requeued", id=1, key="i-1"),
    f("joined", key="i-1", state="open"),
    f("job_assigned", id=1, key="i-1"),
    f("job_started", id=1),
    f("drain", key="i-1"),
    f("job_finished", id=1, exit_code=0),
    f("state", key="i-1", state="decommissioned"),
    f("state", key="i-1", state="returned"),
    f("expected", instance_id="i-1", template="default"),  # a machine powered on again
    f("joined", key="i-1"),
    f("drain", key="i-1"),
    f("state", key="i-1", state="decommissioned"),
]


def test_the_diagram_is_read() -> None:
    edges = history.host_edges()
    assert ("open", "lost") in edges and (history.START, "expected") in edges
    assert ("decommissioned", "open") not in edges


def test_a_clean_story_has_no_problem() -> None:
    assert history.problems(STORY) == []
    acked = ["i-1"]
    assert len(history.acknowledged(STORY, acked, history.expected_instance)) == 1  # twice
    assert history.acknowledged(STORY[:5], acked, history.expected_instance) == []


def test_each_broken_history_is_named() -> None:
    twice = [*STORY[:12], f("state", key="i-1", state="decommissioned")]
    assert any("decommissioned -> decommissioned" in p for p in history.problems(twice))
    assert any("decided 2 times" in p for p in history.problems(twice))
    back = [*STORY[:12], f("joined", key="i-1")]
    assert any("decommissioned -> open" in p for p in history.problems(back))
    requeued = [*STORY[:6], f("job_requeued", id=1, key="i-1")]
    assert any("job 1 pending -> pending" in p for p in history.problems(requeued))
    resubmitted = [*STORY[:3], f("job_submitted", id=1)]
    assert history.problems(resubmitted) == ["fact 4: job 1 submitted twice"]
    assert history.acknowledged(STORY, ["i-2"], history.expected_instance) == [
        "acknowledged i-2 recorded 0 times"
    ]
