"""The columns of `xcecli hosts` (and `expected`, `to-return`): the default view and `-o wide`.

Like `kubectl get nodes`: the default fits a terminal and answers "what can each host take and
is it alive" (state, slots, jobs, agent version, last seen); `-o wide` adds where it comes from
and what it has (instance, provider, CPUs, memory, join time). A field a controller of an older
version does not send shows as '-'.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from xce_controller.cli.text import code, size, table, when
from xce_controller.core.model import HostState

Host = dict[str, Any]


def _name(h: Host) -> str:
    return h.get("name") or h.get("expected_name") or h.get("expected_address") or "-"


def _text(key: str) -> Callable[[Host], str]:
    return lambda h: str(h.get(key) or "-")


def notice(h: Host) -> str:
    """`preemption 08:22:00` (the time the platform acts), or '-'."""
    n = h.get("notice")
    if not n:
        return "-"
    return f"{n['kind']} {when(n['deadline'])}" if n.get("deadline") else str(n["kind"])


def _deadline(h: Host) -> str:
    waiting = h.get("state") in (HostState.EXPECTED, HostState.OVERDUE)
    return when(h.get("deadline")) if waiting else "-"


def _resource(key: str, show: Callable[[Any], str] = str) -> Callable[[Host], str]:
    def cell(h: Host) -> str:
        value = (h.get("resources") or {}).get(key)
        return "-" if value is None else show(value)

    return cell


def _slots(h: Host) -> str:
    slots = h.get("slots")
    return "-" if slots is None else str(slots)


# (header, cell, in the default view); -o wide shows every column.
COLUMNS: list[tuple[str, Callable[[Host], str], bool]] = [
    ("HOST", _name, True),
    ("STATE", _text("state"), True),
    ("INSTANCE", _text("instance_id"), True),
    ("PROVIDER", _text("provider"), False),
    ("TEMPLATE", _text("template"), True),
    ("PROV", lambda h: "yes" if h.get("provisioned") else "no", False),
    ("SLOTS", _slots, True),
    ("CPUS", _resource("cpus"), False),
    ("MEMORY", _resource("memory_bytes", size), False),
    ("JOBS", lambda h: str(h.get("jobs_running", 0)), True),
    ("VERSION", _text("agent_version"), True),
    ("JOINED", lambda h: when(h.get("joined_at")), False),
    ("LAST SEEN", lambda h: when(h.get("last_seen")), True),
    ("DEADLINE", _deadline, True),
    ("NOTICE", notice, True),
    ("REASON", lambda h: str(h.get("reason", "")) + code(h), True),
]


def host_table(hosts: list[Host], wide: bool = False) -> str:
    shown = [(header, cell) for header, cell, default in COLUMNS if wide or default]
    rows = [[cell(h) for _, cell in shown] for h in hosts]
    return table(rows, [header for header, _ in shown])
