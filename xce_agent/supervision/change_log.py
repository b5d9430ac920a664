"""How a component's change of phase is logged: one line (`worker: starting -> running pid
12`), a warning when it became FATAL, and the fields the journal indexes (component, role,
reason code)."""

from __future__ import annotations

import logging

from xce_agent.supervision.component_state import ComponentState, Phase

log = logging.getLogger("xce_agent.supervision.supervisor")  # the journal's name for these


def log_change(name: str, role: str, before: ComponentState, after: ComponentState) -> None:
    detail = after.reason or (after.last_exit.describe() if after.last_exit else "")
    pid = f" pid {after.pid}" if after.pid else ""
    suffix = f" ({detail})" if detail else ""
    fields = {"component": name, "role": role, "reason_code": after.code}
    level = logging.WARNING if after.phase is Phase.FATAL else logging.INFO
    log.log(
        level,
        "%s: %s -> %s%s%s",
        name,
        before.phase.value,
        after.phase.value,
        pid,
        suffix,
        extra=fields,
    )
