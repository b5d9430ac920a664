"""The event queue applies a re-entrant post after the event being applied, in order."""

from __future__ import annotations

import pytest

from xce_agent.supervision.event_queue import EventQueue


def test_an_event_posted_while_applying_waits_for_the_one_being_applied() -> None:
    seen: list[str] = []

    def apply(name: str, event: str) -> None:
        seen.append(f"begin {event}")
        if event == "start":
            queue.post(name, "spawned")
            queue.post(name, "probe")
        seen.append(f"end {event}")

    queue: EventQueue[str] = EventQueue(apply)
    queue.post("worker", "start")
    assert seen == [
        "begin start",
        "end start",
        "begin spawned",
        "end spawned",
        "begin probe",
        "end probe",
    ]


def test_a_failing_apply_leaves_the_queue_usable() -> None:
    seen: list[str] = []

    def apply(name: str, event: str) -> None:
        if event == "bad":
            raise ValueError(event)
        seen.append(event)

    queue: EventQueue[str] = EventQueue(apply)
    with pytest.raises(ValueError):
        queue.post("worker", "bad")
    queue.post("worker", "good")
    assert seen == ["good"]
