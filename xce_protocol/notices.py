"""Cloud notices on the wire: what the agent tells the controller a provider announced.

A notice says the platform will take the host away (preemption, termination), take it down
for a while (maintenance), advise moving work off it (rebalance), or that the OS is going down
(shutdown), or that its agent is stopped on purpose (stop). The agent derives notices from the
provider's metadata, and the stop from `xce-agent stop`; the controller acts on
them. Both sides build and check the body here, so they agree on every field.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

from xce_protocol.times import parse_time

MAX_RAW_BYTES = 8192  # the provider's event, kept for operators; longer ones are cut
MAX_TEXT = 200


class NoticeKind(str, enum.Enum):
    PREEMPTION = "preemption"  # spot/preemptible capacity reclaimed
    TERMINATION = "termination"  # the instance goes away for another reason (retirement, ...)
    MAINTENANCE = "maintenance"  # the platform takes the host down, then gives it back
    REBALANCE = "rebalance"  # advice: capacity is at risk, move new work elsewhere
    SHUTDOWN = "shutdown"  # the operating system is going down now
    STOP = "stop"  # the agent is stopped on purpose (`xce-agent stop`): a planned stop, 1.3


class Impact(str, enum.Enum):
    """What a maintenance does to running work."""

    REBOOT = "reboot"  # the host restarts: running work is lost
    PAUSE = "pause"  # memory-preserving (live migration, freeze): work survives


class NoticeState(str, enum.Enum):
    ACTIVE = "active"
    ENDED = "ended"  # the provider withdrew it or it is over (cancelled, completed, gone)


@dataclass(frozen=True)
class Notice:
    kind: NoticeKind
    provider: str  # aws, gce, azure or os
    event_id: str  # stable per provider event: a repeat of the same event is not news
    deadline: float | None  # wall-clock time the platform acts; None when it names none
    state: NoticeState = NoticeState.ACTIVE
    impact: Impact = Impact.REBOOT
    raw: str = ""  # the provider's event as it was served

    def to_wire(self) -> dict[str, Any]:
        return {
            "kind": self.kind.value,
            "provider": self.provider,
            "event_id": self.event_id,
            "deadline": self.deadline,
            "state": self.state.value,
            "impact": self.impact.value,
            "raw": self.raw[:MAX_RAW_BYTES],
        }


class BadNotice(ValueError):
    """A notice body that does not follow the protocol; the message names the field."""


def notice_from_wire(body: Any) -> Notice:
    """Check a notice body key by key; BadNotice says what is wrong."""
    if not isinstance(body, dict):
        raise BadNotice("a notice is a JSON object")
    kind = _enum(body, "kind", NoticeKind, None)
    state = _enum(body, "state", NoticeState, NoticeState.ACTIVE)
    impact = _enum(body, "impact", Impact, Impact.REBOOT)
    given = body.get("deadline")
    deadline = parse_time(given)  # RFC 3339 (1.2) or seconds since the epoch (1.1)
    if given is not None and (deadline is None or deadline <= 0):
        raise BadNotice("deadline: expected a time (RFC 3339 or seconds since the epoch) or null")
    provider = _text(body, "provider", "")
    event_id = _text(body, "event_id", "")
    raw = body.get("raw", "")
    if not isinstance(raw, str):
        raise BadNotice("raw: expected a string")
    return Notice(
        kind,
        provider,
        event_id or kind.value,
        None if deadline is None else float(deadline),
        state,
        impact,
        raw[:MAX_RAW_BYTES],
    )


def _enum(body: dict[str, Any], key: str, cls: type[Any], default: Any) -> Any:
    value = body.get(key, default)
    if value is None:
        raise BadNotice(f"{key}: expected one of {', '.join(m.value for m in cls)}")
    try:
        return cls(value)
    except ValueError:
        raise BadNotice(
            f"{key}: expected one of {', '.join(m.value for m in cls)}, got {str(value)[:40]!r}"
        ) from None


def _text(body: dict[str, Any], key: str, default: str) -> str:
    """The field, with anything unprintable as '?': it reaches logs and admins' terminals."""
    value = body.get(key, default)
    if not isinstance(value, str) or len(value) > MAX_TEXT:
        raise BadNotice(f"{key}: expected a string of at most {MAX_TEXT} characters")
    return "".join(c if c.isprintable() else "?" for c in value)
