"""What the supervisor's owner plugs into it: who decides when a singleton may run, what
must hold around each start, and the callbacks for state changes and decommission exits."""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from xce_agent.supervision.component_state import ComponentState
from xce_agent.supervision.identity import ProcessIdentity

ChangeCallback = Callable[[str, ComponentState], None]
DecommissionCallback = Callable[[str, int], None]


def ignore_change(name: str, state: ComponentState) -> None:
    return None


def ignore_decommission(name: str, code: int) -> None:
    return None


class Gate(Protocol):
    """Who decides when a singleton component may run (xce_agent/singletons/runner.py)."""

    def __contains__(self, name: str) -> bool: ...
    def holds(self, name: str) -> bool: ...
    def want(self, name: str, reason: str) -> None: ...
    def unwant(self, name: str, reason: str) -> None: ...


class StartGuard(Protocol):
    """What must hold before and right after each start (xce_agent/components/prestart.py):
    each returns "" to go on, else why the start is deferred."""

    def before_start(self, name: str) -> str: ...
    def started(self, name: str, identity: ProcessIdentity) -> str: ...
