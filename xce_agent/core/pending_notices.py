"""The provider notices pending on this host, as `xce-agent status` shows them.

Pure: `update` folds each notice the watcher reported (new, changed or ended) into the
pending list, keeping when each was first seen. The list lives in the agent's state and is
saved with it; the agent starts it empty, since its watcher reads every item again at start.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from xce_protocol.notices import Notice, NoticeState


@dataclass(frozen=True)
class PendingNotice:
    kind: str
    provider: str
    event_id: str
    deadline: float | None  # wall-clock time the platform acts; None when it names none
    since: float  # wall-clock time the agent first saw it
    impact: str = "reboot"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def update(
    pending: tuple[PendingNotice, ...], notice: Notice, now: float
) -> tuple[PendingNotice, ...]:
    """The pending notices once `notice` is known: added, changed in place, or gone."""
    key = (notice.provider, notice.event_id)
    known = next((p for p in pending if (p.provider, p.event_id) == key), None)
    others = tuple(p for p in pending if (p.provider, p.event_id) != key)
    if notice.state is NoticeState.ENDED:
        return others
    entry = PendingNotice(
        notice.kind.value,
        notice.provider,
        notice.event_id,
        notice.deadline,
        known.since if known is not None else now,
        notice.impact.value,
    )
    if known is None:
        return (*pending, entry)
    return tuple(entry if (p.provider, p.event_id) == key else p for p in pending)


def from_json(data: Any) -> tuple[PendingNotice, ...]:
    """The saved list; an entry that is not one is dropped (it only feeds `status`)."""
    if not isinstance(data, list):
        return ()
    return tuple(p for p in (_entry(d) for d in data) if p is not None)


def _entry(data: Any) -> PendingNotice | None:
    if not isinstance(data, dict):
        return None
    texts = [data.get(k) for k in ("kind", "provider", "event_id", "impact")]
    deadline, since = _number(data.get("deadline")), _number(data.get("since"))
    if not all(isinstance(t, str) for t in texts) or since is None:
        return None
    if deadline is None and data.get("deadline") is not None:
        return None
    kind, provider, event_id, impact = (str(t) for t in texts)
    return PendingNotice(kind, provider, event_id, deadline, since, impact)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None
