"""What the state file says about each component: phase, identity, uptime, retry, tail."""

from __future__ import annotations

from collections.abc import Mapping

from xce_agent.state import ComponentRecord
from xce_agent.supervision import machine as m
from xce_agent.supervision.supervisor import Supervisor

RETIRING_NOTE = "no longer configured: stopping, then removed"


def component_records(
    sup: Supervisor, since: Mapping[str, float], now: float, mono: float
) -> tuple[ComponentRecord, ...]:
    """One record per component; `now` is wall-clock time, `mono` the monotonic clock."""
    identities = sup.identities()
    records = []
    for name, spec in sup.specs.items():
        cstate = sup.state(name)
        identity = identities.get(name)
        retry = None
        if cstate.phase is m.Phase.BACKOFF and cstate.deadline is not None:
            retry = now + max(0.0, cstate.deadline - mono)
        records.append(
            ComponentRecord(
                name=name,
                role=spec.role,
                phase=cstate.phase.value,
                pid=cstate.pid,
                identity=identity.to_json() if identity else None,
                restarts=cstate.restarts,
                last_exit=cstate.last_exit.describe() if cstate.last_exit else None,
                reason=cstate.reason,
                code=cstate.code,
                since=since.get(name, now),
                started=identity.started_epoch() if identity else 0.0,
                next_retry=retry,
                tail=sup.tail(name),
                note=RETIRING_NOTE if name in sup.retiring else sup.notes.get(name, ""),
                limits=sup.limits_note(name),
            )
        )
    return tuple(records)
