"""What a starting agent does with the components a previous agent left running.

A configured component whose recorded process is still that very process (pid, start time,
boot, command) is adopted; one no longer configured is stopped to the end; in a cgroup, so
is whatever runs in a component's cgroup without a recorded process (killed before its
start). Nothing is adopted by environment markers: a job of the worker carries them too.
"""

from __future__ import annotations

from xce_agent.state import AgentState
from xce_agent.supervision.identity import ProcessIdentity
from xce_agent.supervision.supervisor import Supervisor


def adopt_previous(sup: Supervisor, previous: AgentState | None) -> None:
    recorded = {c.name: c for c in (previous.components if previous else ())}
    for name, record in recorded.items():
        identity = ProcessIdentity.from_json(record.identity) if record.identity else None
        if name not in sup.specs:
            if identity is not None or sup.contained_alive(name):
                sup.retire(name, identity)
        elif identity is not None:
            sup.adopt(name, identity)
    tree = sup.containment()
    for name in tree.names() if tree else ():
        if name not in sup.specs and tree is not None:
            if tree.populated(name):
                sup.retire(name, None)
            else:
                tree.remove(name)
