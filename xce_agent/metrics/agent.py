"""The agent's metrics as one object the agent feeds: its state after each change and each
heartbeat the controller accepted, its singletons' holds, its join deadline. Writes the
textfile and serves the port, as configured."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import replace

from xce_agent.config.metrics import MetricsConfig
from xce_agent.metrics.file import MetricsFile, Sample, Tally, sample
from xce_agent.metrics.leases import SingletonSample
from xce_agent.metrics.port import MetricsPort
from xce_agent.state import AgentState
from xce_agent.supervision.machine import ExitInfo

log = logging.getLogger(__name__)


class AgentMetrics:
    def __init__(self, config: MetricsConfig) -> None:
        self.file = MetricsFile(config.textfile) if config.textfile else None
        self.port: MetricsPort | None = None
        if config.listen is not None:
            try:
                self.port = MetricsPort(*config.listen)
            except OSError as exc:  # metrics never keep the agent from running
                host, port = config.listen
                log.error("metrics port %s:%d not served: %s", host, port, exc.strerror)
        self.tally = Tally()
        self.last: Sample | None = None
        self.watching_notices = False  # set by the agent when a provider watcher runs
        self._notices: set[str] = set()  # provider events announced and not ended

    @property
    def enabled(self) -> bool:
        return self.file is not None or self.port is not None

    def start(self) -> None:
        if self.port is not None:
            self.port.start()

    def stop(self) -> None:
        if self.port is not None:
            self.port.stop()

    def notice(self, event_id: str, active: bool) -> None:
        if active:
            self._notices.add(event_id)
        else:
            self._notices.discard(event_id)

    def mark_down(self, instance_id: str, decommissioned: bool) -> None:
        """The textfile says the agent is down: at stop, and at start (a killed one's file)."""
        if self.file is not None:
            self.file.mark_down(instance_id, decommissioned)

    def restore(self) -> None:
        """Periodically, from the agent: put back a textfile deleted under it."""
        if self.file is not None:
            self.file.restore()

    def heartbeat_accepted(self, now: float) -> None:
        self.tally = replace(self.tally, last_heartbeat=now)

    def update(
        self,
        state: AgentState,
        exits: Mapping[str, ExitInfo | None],
        contact: bool,
        decommissioned: bool,
        singletons: tuple[SingletonSample, ...] = (),
        join: tuple[float | None, bool | None] = (None, None),
    ) -> None:
        if not self.enabled:
            return
        phases = {c.name: c.phase for c in state.components}
        self.tally = self.tally.observe(contact, phases)
        pending = bool(self._notices) if self.watching_notices else None
        self.last = sample(
            state, self.tally, exits, contact, decommissioned, pending, singletons, join
        )
        if self.file is not None:
            self.file.update(self.last)
        if self.port is not None:
            self.port.publish(self.last)
