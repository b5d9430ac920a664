"""One human line for systemd's STATUS= and the head of `xce-agent status`."""

from __future__ import annotations

import time

from xce_agent.state import AgentState


def status_line(state: AgentState) -> str:
    if state.tombstone is not None:
        return f"decommissioned: {state.tombstone.reason}"
    roles = ",".join(state.roles) or "no role"
    parts = []
    for comp in state.components:
        pid = f" pid {comp.pid}" if comp.pid else ""
        parts.append(f"{comp.name} {comp.phase}{pid}")
    components = ", ".join(parts) or "no components"
    return f"{roles}: {components}; {contact_text(state)}"


def contact_text(state: AgentState) -> str:
    contact = state.controller
    if contact.state == "connected":
        return f"controller connected as {contact.host}"
    if contact.state == "waiting":
        return "waiting for controller"
    if contact.state == "unreachable":
        since = time.strftime("%H:%M:%S", time.localtime(contact.since))
        return f"waiting for controller (no answer since {since}: {contact.detail})"
    if contact.state == "not configured":
        return "no controller configured"
    return f"controller {contact.state}"
