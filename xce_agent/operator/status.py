"""`xce-agent status` for a person: what runs, since when, and how the controller sees us.

A pending cloud notice is shown with when the platform acts (an absolute time) and since when
the agent knows of it. When the agent is not running the state file is stale: it says so, and
each component the file calls running is checked against its recorded identity (running
unsupervised, or gone).
"""

from __future__ import annotations

import os
import stat
import time
from collections.abc import Iterable, Mapping
from pathlib import Path

from xce_agent.controller.credential import HostCredential
from xce_agent.core.membership import standing_code
from xce_agent.core.pending_notices import PendingNotice
from xce_agent.core.planned_stop import Draining
from xce_agent.core.singleton_holds import SingletonHold, describe
from xce_agent.operator.status_line import status_line
from xce_agent.state import AgentState, ComponentRecord
from xce_agent.supervision import status_file as component_status
from xce_agent.supervision.identity import ProcessIdentity, mismatch
from xce_agent.supervision.machine import Phase
from xce_protocol.protocol import printable

TAIL_LINES = 5


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


def _uptime(started: float, now: float) -> str:
    if not started:
        return "-"
    seconds = max(0, int(now - started))
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m"
    if seconds < 172800:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds // 86400}d"


def _last_exit(last_exit: str | None, reason: str, phase: str, code: str = "") -> str:
    """The last exit, and the reason when it adds something (it often repeats the exit),
    with the reason's code."""
    last = last_exit or "-"
    tag = f" [{code}]" if code else ""
    if not reason or phase not in (Phase.FATAL, Phase.BACKOFF, Phase.HELD):
        return last + (tag if last_exit else "")
    if last_exit and reason.startswith(last_exit):
        return reason + tag
    return f"{last}; {reason}{tag}"


def _in(then: float, now: float) -> str:
    """`2026-12-01 10:22:00 (in 1m58s)`: an absolute time, and how far off it is."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(then))
    seconds = int(then - now)
    if seconds < 0:
        return f"{stamp} ({_uptime(now + seconds, now)} ago)"
    return f"{stamp} (in {_uptime(now - seconds, now)})"


def _notice_line(notice: PendingNotice, now: float) -> str:
    """`notice:      preemption (aws aws-spot): platform acts at ..., seen since ...`."""
    kind = notice.kind + (f" ({notice.impact})" if notice.kind == "maintenance" else "")
    when = (
        "the platform names no time"
        if notice.deadline is None
        else f"platform acts at {_in(notice.deadline, now)}"
    )
    event = printable(f"{notice.provider} {notice.event_id}")[:80]
    return f"notice:      {kind} [{event}]: {when}, seen since {_ago(notice.since, now)}"


def _planned_stop_line(drain: Draining, now: float, live: bool) -> str:
    """`planned stop: draining since ..., bound 60s: the worker stops by ... at the latest`."""
    stale = "" if live else " (as last saved: the agent is not running)"
    return (
        f"planned stop: draining since {_ago(drain.since, now)}, bound {drain.bound:g}s: "
        f"the worker stops by {_in(drain.deadline, now)} at the latest{stale}"
    )


def _phase(comp: ComponentRecord, live: bool) -> str:
    if live or comp.phase not in ("running", "stopping", "starting"):
        return comp.phase
    identity = ProcessIdentity.from_json(comp.identity) if comp.identity else None
    if identity is not None and not mismatch(identity):
        return "unsupervised"
    return "gone"


def read_component_status(
    directory: Path, names: Iterable[str]
) -> dict[str, tuple[float, tuple[str, ...]]]:
    """Each component's status lines (supervision/status_file.py) and when they were written;
    a missing, unreadable or odd file (not a regular file, a symbolic link) is left out."""
    found: dict[str, tuple[float, tuple[str, ...]]] = {}
    for name in names:
        path = directory / component_status.file_name(name)
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            info = os.fstat(fd)
            if stat.S_ISREG(info.st_mode):
                found[name] = (
                    info.st_mtime,
                    component_status.parse(os.read(fd, component_status.LIMIT)),
                )
        except OSError:
            pass
        finally:
            os.close(fd)
    return found


def _component(
    comp: ComponentRecord,
    now: float,
    live: bool,
    holds: Mapping[str, SingletonHold],
    own: Mapping[str, tuple[float, tuple[str, ...]]],
) -> list[str]:
    lines: list[str] = []
    phase = _phase(comp, live)
    pid = str(comp.pid) if comp.pid else "-"
    up = _uptime(comp.started, now) if phase in ("running", "unsupervised") else "-"
    last = _last_exit(comp.last_exit, comp.reason, comp.phase, comp.code)
    lines.append(
        f"{comp.name:<18} {comp.role:<10} {phase:<12} {pid:>7} {up:>7} {comp.restarts:>8}  {last}"
    )
    if comp.next_retry and comp.phase == "backoff":
        stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(comp.next_retry))
        lines.append(f"  next retry at {stamp}")
    if comp.note:
        lines.append(f"  note: {comp.note}")
    if comp.limits:
        lines.append(f"  limits: {comp.limits}")
    if comp.name in holds:
        stale = "" if live else " (as last saved: the agent is not running)"
        lines.append(printable(f"  lease: {describe(holds[comp.name])}{stale}"))
    if own and comp.name in own:
        written, said = own[comp.name]
        lines.append(f"  its status, written {_ago(written, now)}:")
        lines.extend(f"    {line}" for line in said)
    for line in comp.tail[-TAIL_LINES:]:
        lines.append(f"  | {line}")
    return lines


def render_status(
    state: AgentState,
    now: float,
    live: bool = True,
    cred: HostCredential | None = None,
    own: Mapping[str, tuple[float, tuple[str, ...]]] | None = None,
) -> str:
    lines = [status_line(state), ""]
    if not live:
        lines[0] = "STALE: the agent is not running; this is its last saved state"
    lines.append(f"lifecycle:   {state.lifecycle.value}{'' if live else ' (stale)'}")
    lines.append(f"instance:    {state.instance_id or '-'}")
    lines.append(f"roles:       {', '.join(state.roles) or '-'}")
    if state.agent:
        running = "up since" if live else "not running; started"
        lines.append(
            f"agent pid:   {state.agent.pid}, {running} {_ago(state.agent.started_at, now)}"
        )
    lines.append(f"saved:       {_ago(state.updated_at, now)}")
    if state.containment:
        lines.append(f"containment: {state.containment}")
    member = state.membership
    detail = f" ({member.detail})" if member.detail else ""
    code = standing_code(member.standing)
    tag = f" [{code}]" if code else ""
    lines.append(
        f"controller:  {member.standing.value} since {_ago(member.since, now)}{detail}{tag}"
    )
    if cred is not None:  # which credential the agent holds (never the secret itself)
        lines.append(
            f"credential:  host credential of incarnation {cred.incarnation} for "
            f"{cred.host}/{cred.instance_id or '-'}"
        )
    if member.retry_until and member.retry_until > now:
        lines.append(f"retry-after: waiting until {_ago(member.retry_until, now)}")
    if member.link_warning:
        lines.append(f"link:        {member.link_warning}")
    lines.extend(_notice_line(n, now) for n in state.notices)
    if state.planned_stop is not None:
        lines.append(_planned_stop_line(state.planned_stop, now, live))
    if state.tombstone:
        tomb = state.tombstone
        lines.append(
            f"tombstone:   instance {tomb.instance_id}: {tomb.reason} at {_ago(tomb.at, now)}"
        )
    lines.append("")
    header = (
        f"{'COMPONENT':<18} {'ROLE':<10} {'STATE':<12} {'PID':>7} {'UPTIME':>7} "
        f"{'RESTARTS':>8}  LAST EXIT"
    )
    lines.append(header)
    holds = {h.component: h for h in state.singletons}
    for comp in state.components:
        lines.extend(_component(comp, now, live, holds, own or {}))
    return "\n".join(lines)
