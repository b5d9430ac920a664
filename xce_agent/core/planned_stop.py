"""A planned stop (`xce-agent stop`) as pure decisions: whether to drain, what an answer means.

A joined agent asked to stop tells the controller first, with a `stop` notice whose deadline
is the drain's bound: the host is closed, its jobs may finish, and the controller says when it
runs nothing (the answer's `notice.drained`). The worker is stopped once drained, or when the
bound has passed, whichever comes first. Nothing the controller says or fails to say holds the
stop past the bound, and nothing it answers is taken as a refusal to stop: an answer that is
not an acceptance (an older controller without the `stop` kind answers 422, an unreachable
one fails) ends the wait at once, and the components stop as before.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from xce_agent.core.membership import MembershipState, Standing
from xce_protocol.protocol import Outcome


class Verdict(str, enum.Enum):
    DRAINED = "drained"  # the host runs nothing: stop the components now
    WAIT = "wait"  # taken: wait for the drain, up to the bound
    STOP_NOW = "stop now"  # not taken (or no usable answer): stop the components now


def bound(requested: float | None, configured: float) -> float:
    """The drain's bound in seconds: the operator's `--drain-timeout` (0 with `--no-drain`),
    else the config's `controller.drain_on_stop`; never negative, never NaN."""
    value = configured if requested is None else requested
    if not math.isfinite(value) or value < 0:
        return 0.0
    return value


def why_not_drain(member: MembershipState, seconds: float) -> str:
    """ "" when a planned stop drains first, else why it does not (for the log)."""
    if seconds <= 0:
        return "no drain asked for"
    if member.standing is Standing.NOT_CONFIGURED:
        return "no controller configured"
    if member.decommissioned:
        return "the host is decommissioned"
    if member.standing is not Standing.CONNECTED:
        return f"the controller is {member.standing.value}"
    return ""


def verdict(outcome: Outcome, body: Mapping[str, Any], event_id: str) -> Verdict:
    """What the answer to the stop notice means for the wait."""
    if outcome is not Outcome.ACCEPTED:
        return Verdict.STOP_NOW
    notice = body.get("notice")
    if not isinstance(notice, dict) or notice.get("event_id") != event_id:
        # Accepted, but the host acts on another notice (a stronger one, say a preemption):
        # the controller drains it for that one; there is nothing of ours to wait for.
        return Verdict.STOP_NOW
    return Verdict.DRAINED if notice.get("drained") is True else Verdict.WAIT


def parse_request(text: str) -> float | None:
    """The drain a stop request over the control socket asks for: "" the config's,
    "no-drain" none, "drain=SECONDS" that long; ValueError for anything else."""
    if text == "":
        return None
    if text == "no-drain":
        return 0.0
    try:
        seconds = float(text[len("drain=") :]) if text.startswith("drain=") else math.nan
    except ValueError:
        seconds = math.nan
    if math.isfinite(seconds) and seconds >= 0:
        return seconds
    raise ValueError(f"not a drain: {text!r} (expected no-drain or drain=SECONDS)")


def request_text(seconds: float | None) -> str:
    """The inverse of `parse_request`, for the CLI."""
    if seconds is None:
        return ""
    return "no-drain" if seconds <= 0 else f"drain={seconds:g}"


@dataclass(frozen=True)
class Draining:
    """A planned stop's drain under way, as the state saves it and `status` shows it: since
    when (wall clock), its bound in seconds, the notice's event id, who asked."""

    since: float
    bound: float
    event_id: str = ""
    reason: str = ""

    @property
    def deadline(self) -> float:
        """When the worker stops at the latest (the notice's deadline)."""
        return self.since + self.bound

    def to_json(self) -> dict[str, Any]:
        return {
            "since": self.since,
            "bound": self.bound,
            "deadline": self.deadline,
            "event_id": self.event_id,
            "reason": self.reason,
        }

    @classmethod
    def from_json(cls, data: Any) -> Draining | None:
        """None for anything that is not one (a state of an older agent has none)."""
        if not isinstance(data, dict):
            return None
        since, bound = data.get("since"), data.get("bound")
        numbers = all(
            isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
            for v in (since, bound)
        )
        if not numbers:
            return None
        return cls(
            float(since),  # type: ignore[arg-type]
            float(bound),  # type: ignore[arg-type]
            str(data.get("event_id", "")),
            str(data.get("reason", "")),
        )
