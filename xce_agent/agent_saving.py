"""Saving the agent's state: the one way AgentState reaches state.json, and what follows it.

Every change the agent makes to its state is saved through `_save` (queued to the writer's
thread) or, before a component starts, `_save_ahead` (on disk before the start: prestart.py);
systemd's STATUS line and the metrics are brought up to date with each save. A base class of
`Agent` (agent.py), which owns and sets every attribute declared here.
"""

from __future__ import annotations

import time
from dataclasses import replace

from xce_agent.components.prestart import PreStart
from xce_agent.components.records import component_records
from xce_agent.config.agent import AgentConfig
from xce_agent.controller.join_guard import JoinGuard
from xce_agent.core import membership as ms
from xce_agent.metrics.agent import AgentMetrics
from xce_agent.operator.status_line import status_line
from xce_agent.singletons.runner import Singletons
from xce_agent.state import AgentState, Lifecycle, StartIntent, StateWriter
from xce_agent.supervision.reactor import Reactor
from xce_agent.supervision.supervisor import Supervisor
from xce_agent.system.notify import Notifier


class StateSaving:
    config: AgentConfig
    state: AgentState
    writer: StateWriter | None
    reactor: Reactor
    notifier: Notifier
    supervisor: Supervisor
    prestart: PreStart
    metrics: AgentMetrics
    singletons: Singletons
    join_guard: JoinGuard
    _since: dict[str, float]  # when each component's phase last changed (wall clock)
    _last_status = ""  # the STATUS line systemd was told last

    def _refresh_components(self) -> None:
        now, mono = time.time(), self.reactor.clock.monotonic()
        records = component_records(self.supervisor, self._since, now, mono)
        self.state = replace(self.state, components=records)
        self._save()

    def _set_lifecycle(self, lifecycle: Lifecycle) -> None:
        self.state = replace(self.state, lifecycle=lifecycle)
        self._refresh_components()

    def save_error(self) -> str:
        return self.writer.last_error if self.writer is not None else ""

    def _save_ahead(self, intents: tuple[StartIntent, ...]) -> str:
        """Save now and wait until it is on disk: "" once it is, else why not."""
        now, mono = time.time(), self.reactor.clock.monotonic()
        records = component_records(self.supervisor, self._since, now, mono)
        self.state = replace(self.state, components=records, starting=intents, updated_at=now)
        why = self.writer.save_now(self.state) if self.writer is not None else ""
        self._update_metrics()
        return why

    def _save(self) -> None:
        starting = self.prestart.intents_now()
        self.state = replace(self.state, updated_at=time.time(), starting=starting)
        if self.writer is not None:
            self.writer.submit(self.state)
        self._update_metrics()
        line = status_line(self.state)
        if line != self._last_status:
            self._last_status = line
            self.notifier.notify(f"STATUS={line}")

    # --- metrics ----------------------------------------------------------------------
    def _update_metrics(self) -> None:
        member = self.state.membership
        self.metrics.update(
            self.state,
            {s.name: self.supervisor.state(s.name).last_exit for s in self.config.components},
            contact=member.standing is ms.Standing.CONNECTED,
            decommissioned=member.decommissioned,
            singletons=self.singletons.samples(),
            join=self.join_guard.metrics(),
        )
