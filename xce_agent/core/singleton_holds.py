"""Where each singleton component's lease stands, as `xce-agent status` shows it.

The singletons (singletons.py) hand the agent one `SingletonHold` per singleton component
whenever a hold's phase, reason code or token changes; the agent saves them in its state, so
`status` (which reads the state file) says whether this host holds the lease, waits for
another holder, or lost it, with the fencing token.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

_LOST = ("lease_not_renewed", "lease_lost", "lease_not_held")


@dataclass(frozen=True)
class SingletonHold:
    component: str
    lease: str
    phase: str  # lease_holder.Phase: idle, seeking, holding, releasing
    token: int  # the fencing token of the latest grant this host received (0: none yet)
    detail: str = ""  # the last answer or failure
    code: str = ""  # its reason code

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def describe(hold: SingletonHold) -> str:
    """One line: the lease, where this host stands with it, and why."""
    token = f"token {hold.token}" if hold.token else "no grant yet"
    detail = f": {hold.detail}" if hold.detail else ""
    tag = f" [{hold.code}]" if hold.code else ""
    if hold.phase == "holding":
        what = f"held by this host, {token}"
    elif hold.phase == "seeking" and hold.code in _LOST:
        what = f"lost ({token}), asking again{detail}"
    elif hold.phase == "seeking":
        what = f"waiting for it ({token}){detail}"
    elif hold.phase == "releasing":
        what = f"giving it back ({token})"
    else:
        what = f"not asked for ({token}){detail}"
    return f"{hold.lease}: {what}{tag}"


def from_json(data: Any) -> tuple[SingletonHold, ...]:
    """The saved holds; an entry that is not one is dropped (they only feed `status`)."""
    if not isinstance(data, list):
        return ()
    return tuple(h for h in (_entry(d) for d in data) if h is not None)


def _entry(data: Any) -> SingletonHold | None:
    if not isinstance(data, dict):
        return None
    try:
        text = {k: data[k] for k in ("component", "lease", "phase")}
        if not all(isinstance(v, str) for v in text.values()):
            return None
        token = data.get("token", 0)
        if not isinstance(token, int) or isinstance(token, bool):
            return None
        return SingletonHold(
            text["component"],
            text["lease"],
            text["phase"],
            token,
            str(data.get("detail", "")),
            str(data.get("code", "")),
        )
    except KeyError:
        return None
