"""One human line for systemd's STATUS= and the head of `xce-agent status`."""

from __future__ import annotations

import time

from xce_agent.core.membership import Standing
from xce_agent.state import AgentState


def status_line(state: AgentState) -> str:
    member = state.membership
    if member.decommissioned:
        return f"decommissioned: {member.detail}"
    roles = ",".join(state.roles) or "no role"
    parts = []
    for comp in state.components:
        pid = f" pid {comp.pid}" if comp.pid else ""
        parts.append(f"{comp.name} {comp.phase}{pid}")
    components = ", ".join(parts) or "no components"
    return f"{roles}: {components}; {contact_text(state)}"


def _clock(when: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(when))


def contact_text(state: AgentState) -> str:
    member = state.membership
    waiting = (
        f"; waiting out Retry-After until {_clock(member.retry_until)}"
        if (member.retry_until)
        else ""
    )
    if member.standing is Standing.CONNECTED:
        return f"controller connected as {member.host}"
    if member.standing is Standing.WAITING:
        return "waiting for controller"
    if member.standing is Standing.UNREACHABLE:
        since = _clock(member.since)
        return f"waiting for controller (no answer since {since}: {member.detail}{waiting})"
    if member.standing is Standing.REFUSED:
        return f"refused by the controller since {_clock(member.since)} ({member.detail}{waiting})"
    if member.standing is Standing.NOT_CONFIGURED:
        return "no controller configured"
    return f"controller {member.standing.value}"
