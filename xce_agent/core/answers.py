"""How the link reads the controller's answers: delays, published intervals, versions,
notices and the refusals that mean "join again".

Pure functions of an answer, so what a hostile or confused controller can make the link do
is decided here and tested without threads: a number that is not a finite number, a bool
where an int belongs, or a version that goes down is taken for what it is and no more.
"""

from __future__ import annotations

import math
from typing import Any

from xce_agent.core import membership as ms
from xce_protocol.protocol import Answer, Outcome, template_of

RETRY_AFTER_MAX = 300.0


def retry_delay(attempt: int, rand: float, cap: float, retry_after: float | None) -> float:
    """Jittered exponential delay (1 s doubling, +/-50 %), capped; Retry-After wins if longer."""
    base = min(cap, 2.0 ** min(attempt, 16))
    delay = min(cap, base * (0.5 + rand))
    if retry_after is not None:
        delay = max(delay, min(retry_after, RETRY_AFTER_MAX))
    return delay


def clamp(value: Any, default: float, bounds: tuple[float, float]) -> float:
    """A published interval within bounds; a non-number or non-finite one keeps the default."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return default
    # An int is finite however long (JSON bounds no number): math.isfinite would convert it
    # to a float and raise OverflowError past 1e308.
    if isinstance(value, float) and not math.isfinite(value):
        return default
    low, high = bounds
    return float(min(high, max(low, value)))


def version_of(body: dict[str, Any]) -> int | None:
    """The controller's change counter in an answer, if it is a usable one."""
    version = body.get("version")
    if isinstance(version, int) and not isinstance(version, bool) and version >= 0:
        return version
    return None


def notice_events(body: dict[str, Any]) -> list[ms.Event]:
    """The notice the controller acts on, and whether the host is drained for it (then the
    platform may go ahead)."""
    notice = body.get("notice")
    if not isinstance(notice, dict):
        return []
    event_id, kind = notice.get("event_id"), notice.get("kind")
    if not isinstance(event_id, str) or not event_id:
        return []
    events: list[ms.Event] = []
    if isinstance(kind, str):
        events.append(ms.NoticeHeld(event_id, kind))
    if notice.get("drained") is True:
        events.append(ms.NoticeDrained(event_id))
    return events


def template_doc(body: dict[str, Any], url: str, interval: float) -> dict[str, Any]:
    """What the agent keeps of an accepted join: the host, the template and where from."""
    return {
        "host": body.get("host"),
        "instance_id": body.get("instance_id"),
        "controller_url": url,
        "heartbeat_interval": interval,
        "template": template_of(body),
    }


def unknown(answer: Answer) -> bool:
    """The controller does not know this host or its credential: only a new join helps."""
    if answer.outcome is not Outcome.REFUSED:
        return False
    kinds = ("unknown_credential", "unknown_host")
    kind = answer.body.get("error")
    return kind in kinds if kind is not None else any(k in answer.detail for k in kinds)


def labelled(answer: Answer, which: str) -> Answer:
    """A refusal that says which credential failed (the join token, the host credential)."""
    if answer.outcome is Outcome.REFUSED and which:
        return Answer(answer.outcome, f"{which} refused: {answer.detail}", answer.body)
    return answer
