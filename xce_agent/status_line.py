"""One human line for systemd's STATUS= and the head of `xce-agent status`."""

from __future__ import annotations

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
    contact = state.controller.state
    if state.controller.host:
        contact = f"{contact} as {state.controller.host}"
    return f"{roles}: {components}; controller {contact}"
