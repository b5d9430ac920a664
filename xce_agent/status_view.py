"""`xce-agent status` for a person: what runs, since when, and how the controller sees us."""

from __future__ import annotations

import time

from xce_agent.state import AgentState
from xce_agent.status_line import status_line


def _ago(then: float, now: float) -> str:
    if not then:
        return "-"
    seconds = max(0, int(now - then))
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(then))
    if seconds < 120:
        return f"{stamp} ({seconds}s ago)"
    if seconds < 7200:
        return f"{stamp} ({seconds // 60}m ago)"
    return f"{stamp} ({seconds // 3600}h ago)"


def _last_exit(last_exit: str | None, reason: str, phase: str) -> str:
    """The last exit, and the reason when it adds something (it often repeats the exit)."""
    last = last_exit or "-"
    if not reason or phase not in ("fatal", "backoff", "held"):
        return last
    if last_exit and reason.startswith(last_exit):
        return reason
    return f"{last}; {reason}"


def render_status(state: AgentState, now: float) -> str:
    lines = [status_line(state), ""]
    lines.append(f"lifecycle:   {state.lifecycle.value}")
    lines.append(f"instance:    {state.instance_id or '-'}")
    lines.append(f"roles:       {', '.join(state.roles) or '-'}")
    if state.agent:
        lines.append(
            f"agent pid:   {state.agent.pid}, up since {_ago(state.agent.started_at, now)}"
        )
    member = state.membership
    detail = f" ({member.detail})" if member.detail else ""
    lines.append(f"controller:  {member.standing.value} since {_ago(member.since, now)}{detail}")
    if member.retry_until and member.retry_until > now:
        lines.append(f"retry-after: waiting until {_ago(member.retry_until, now)}")
    if member.link_warning:
        lines.append(f"link:        {member.link_warning}")
    if state.tombstone:
        tomb = state.tombstone
        lines.append(
            f"tombstone:   instance {tomb.instance_id}: {tomb.reason} at {_ago(tomb.at, now)}"
        )
    lines.append("")
    header = f"{'COMPONENT':<18} {'ROLE':<10} {'STATE':<9} {'PID':>7} {'RESTARTS':>8}  LAST EXIT"
    lines.append(header)
    for comp in state.components:
        pid = str(comp.pid) if comp.pid else "-"
        last = _last_exit(comp.last_exit, comp.reason, comp.phase)
        lines.append(
            f"{comp.name:<18} {comp.role:<10} {comp.phase:<9} {pid:>7} {comp.restarts:>8}  {last}"
        )
    return "\n".join(lines)
