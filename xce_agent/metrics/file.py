"""The agent's Prometheus metrics in the text exposition format, for node_exporter's textfile
collector (Debian: /var/lib/prometheus/node-exporter/*.prom) and the optional port.

Written by hand rather than with prometheus_client: the agent's runtime dependencies stay
what every host already has. `Tally.observe` folds the agent's state into counters that the
state does not keep (give-ups, contact changes) and `render` is a pure function of a sample;
`MetricsFile` replaces the file atomically, and only when its content changed, so a scrape
never reads half a file and an idle agent does not write. Times are timestamps (the last
accepted heartbeat), so the file need not change every second for an age to be right: the
alert rules compute `time() - xce_agent_last_heartbeat_timestamp_seconds`.

When the agent stops (any way but kill -9) the file is replaced by a short "down" text:
`xce_agent_up 0`, the instance and whether it was decommissioned, no frozen values. A new
agent does the same at start, for the file a killed one left. While it runs, the agent
touches the file at least every TOUCH_AFTER seconds, so node_exporter's
node_textfile_mtime_seconds tells a dead agent from an idle one.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from xce_agent.metrics import leases as metrics_leases
from xce_agent.metrics.leases import SingletonSample
from xce_agent.state import AgentState
from xce_agent.supervision.machine import ExitInfo
from xce_protocol.atomic_file import write_atomic

log = logging.getLogger(__name__)

UP_PHASES = ("running",)
TOUCH_AFTER = 60.0  # seconds: the textfile's mtime is never older while the agent runs
FATAL_PHASE = "fatal"


@dataclass(frozen=True)
class ComponentSample:
    name: str
    role: str
    up: bool
    restarts: int
    last_exit_code: int | None  # a signal is 128 + its number, as a shell reports it
    give_ups: int
    phase: str = ""
    code: str = ""  # the reason code of its last change


@dataclass(frozen=True)
class Sample:
    instance_id: str
    components: tuple[ComponentSample, ...]
    contact: bool  # the last contact with the controller was answered
    contact_changes: int
    last_heartbeat: float | None  # wall clock of the last heartbeat the controller accepted
    decommissioned: bool
    notice_pending: bool | None = None  # None: no notice watcher in this agent
    singletons: tuple[SingletonSample, ...] = ()
    join_deadline: float | None = None  # wall clock, while a join deadline is pending
    join_gave_up: bool | None = None  # None: no join deadline configured


@dataclass(frozen=True)
class Tally:
    """What the metrics count across states: give-ups per component, contact changes."""

    phases: tuple[tuple[str, str], ...] = ()
    give_ups: tuple[tuple[str, int], ...] = ()
    contact: bool | None = None
    contact_changes: int = 0
    last_heartbeat: float | None = None

    def observe(self, contact: bool, phases: Mapping[str, str]) -> Tally:
        before = dict(self.phases)
        gave = dict(self.give_ups)
        for name, phase in phases.items():
            if phase == FATAL_PHASE and before.get(name) != FATAL_PHASE:
                gave[name] = gave.get(name, 0) + 1
        changes = self.contact_changes
        if self.contact is not None and contact != self.contact:
            changes += 1
        return replace(
            self,
            phases=tuple(sorted(phases.items())),
            give_ups=tuple(sorted(gave.items())),
            contact=contact,
            contact_changes=changes,
        )


def exit_code(info: ExitInfo | None) -> int | None:
    if info is None:
        return None
    if info.signal is not None:
        return 128 + info.signal
    if info.error:
        return 127  # could not be started, as a shell says for a missing command
    return info.code


def sample(
    state: AgentState,
    tally: Tally,
    exits: Mapping[str, ExitInfo | None],
    contact: bool,
    decommissioned: bool,
    notice_pending: bool | None = None,
    singletons: tuple[SingletonSample, ...] = (),
    join: tuple[float | None, bool | None] = (None, None),
) -> Sample:
    gave = dict(tally.give_ups)
    comps = tuple(
        ComponentSample(
            c.name,
            c.role,
            c.phase in UP_PHASES,
            c.restarts,
            exit_code(exits.get(c.name)),
            gave.get(c.name, 0),
            c.phase,
            c.code,
        )
        for c in state.components
    )
    return Sample(
        state.instance_id,
        comps,
        contact,
        tally.contact_changes,
        tally.last_heartbeat,
        decommissioned,
        notice_pending,
        singletons,
        *join,
    )


def _labels(**labels: str) -> str:
    def esc(v: str) -> str:
        return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')

    return "{" + ",".join(f'{k}="{esc(v)}"' for k, v in sorted(labels.items())) + "}"


def _num(value: float) -> str:
    if math.isnan(value) or math.isinf(value):
        return "NaN"
    return repr(float(value)) if not float(value).is_integer() else str(int(value))


class _Text:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def family(self, name: str, kind: str, help_text: str, rows: list[tuple[str, float]]) -> None:
        if kind == "counter":
            name += "_total"  # the text format names a counter's family with its suffix
        self.lines += [f"# HELP {name} {help_text}", f"# TYPE {name} {kind}"]
        self.lines += [f"{name}{labels} {_num(v)}" for labels, v in rows]


def render(s: Sample, now: float | None = None) -> str:
    """The exposition text; with `now`, also the age of the last heartbeat (served only)."""
    t = _Text()
    comp = [(c, _labels(component=c.name, role=c.role)) for c in s.components]
    _identity(t, s.instance_id, up=True)
    t.family(
        "xce_agent_component_up",
        "gauge",
        "1 while the component runs.",
        [(lbl, int(c.up)) for c, lbl in comp],
    )
    t.family(
        "xce_agent_component_state",
        "gauge",
        "1 for the component's phase and the reason code of its last change.",
        [(_labels(component=c.name, role=c.role, phase=c.phase, code=c.code), 1) for c, _ in comp],
    )
    t.family(
        "xce_agent_component_restarts",
        "counter",
        "Restarts of the component.",
        [(lbl, c.restarts) for c, lbl in comp],
    )
    t.family(
        "xce_agent_component_last_exit_code",
        "gauge",
        "Exit code of the component's last exit (128+N for signal N).",
        [(lbl, c.last_exit_code) for c, lbl in comp if c.last_exit_code is not None],
    )
    t.family(
        "xce_agent_component_give_ups",
        "counter",
        "Times the agent gave up restarting the component (crash loop, cannot start).",
        [(lbl, c.give_ups) for c, lbl in comp],
    )
    t.family(
        "xce_agent_controller_contact",
        "gauge",
        "1 when the last contact with the controller was answered.",
        [("", int(s.contact))],
    )
    t.family(
        "xce_agent_controller_contact_changes",
        "counter",
        "Changes between answered and unanswered controller contact.",
        [("", s.contact_changes)],
    )
    if s.last_heartbeat is not None:
        t.family(
            "xce_agent_last_heartbeat_timestamp_seconds",
            "gauge",
            "When the controller last accepted a heartbeat (Unix time).",
            [("", s.last_heartbeat)],
        )
        if now is not None:
            t.family(
                "xce_agent_heartbeat_age_seconds",
                "gauge",
                "Seconds since the controller last accepted a heartbeat.",
                [("", max(0.0, now - s.last_heartbeat))],
            )
    _decommissioned(t, s.decommissioned)
    if s.notice_pending is not None:
        t.family(
            "xce_agent_notice_pending",
            "gauge",
            "1 while the cloud provider has announced an interruption of this instance.",
            [("", int(s.notice_pending))],
        )
    metrics_leases.render(s.singletons, t.family, _labels)
    _join(t, s)
    return "\n".join(t.lines) + "\n"


def render_down(instance_id: str, decommissioned: bool) -> str:
    """What the textfile says once the agent stopped: that it is down, and nothing frozen."""
    t = _Text()
    _identity(t, instance_id, up=False)
    _decommissioned(t, decommissioned)
    return "\n".join(t.lines) + "\n"


def _identity(t: _Text, instance_id: str, up: bool) -> None:
    t.family(
        "xce_agent_up",
        "gauge",
        "1 while the agent runs; 0 written when it stops (the other values are then gone).",
        [("", int(up))],
    )
    t.family(
        "xce_agent_info",
        "gauge",
        "The agent's instance.",
        [(_labels(instance_id=instance_id), 1)],
    )


def _decommissioned(t: _Text, decommissioned: bool) -> None:
    t.family(
        "xce_agent_decommissioned",
        "gauge",
        "1 once this instance was decommissioned (its worker never runs again).",
        [("", int(decommissioned))],
    )


def _join(t: _Text, s: Sample) -> None:
    if s.join_gave_up is None:
        return
    if s.join_deadline is not None:
        t.family(
            "xce_agent_join_deadline_timestamp_seconds",
            "gauge",
            "When the agent gives up joining unless accepted first (Unix time).",
            [("", s.join_deadline)],
        )
    t.family(
        "xce_agent_join_gave_up",
        "gauge",
        "1 once the agent was not accepted by its join deadline and ran on_join_timeout.",
        [("", int(s.join_gave_up))],
    )


class MetricsFile:
    """Writes the textfile atomically when its content changes; a failure is logged once
    per cause and never stops the agent."""

    def __init__(self, path: Path, write: Callable[[Path, str], None] | None = None) -> None:
        self.path = path
        self._write = write or (lambda p, text: write_atomic(p, text, mode=0o644))
        self._last = ""
        self._problem = ""
        self.writes = 0

    def update(self, s: Sample) -> None:
        text = render(s)
        if text == self._last and self.path.exists():
            return
        self._put(text)

    def mark_down(self, instance_id: str, decommissioned: bool) -> None:
        """Replace the file by the down text (at stop, and at start over a killed agent's)."""
        self._put(render_down(instance_id, decommissioned))

    def restore(self, now: float | None = None) -> None:
        """Write the last text again if the file was deleted (a cleanup, an operator): while
        nothing changes (the controller unreachable for hours) a scraper would otherwise see
        no metrics at all, and an alert on them could not fire. Touch it when its mtime is
        older than TOUCH_AFTER: the mtime is the agent's sign of life."""
        if not self._last:
            return
        try:
            mtime = os.stat(self.path).st_mtime
        except FileNotFoundError:
            self._put(self._last)
            return
        except OSError:
            return
        if (time.time() if now is None else now) - mtime > TOUCH_AFTER:
            try:
                os.utime(self.path)
            except OSError as exc:
                self._note(f"{self.path}: {exc.strerror or exc}")

    def _put(self, text: str) -> None:
        try:
            self._write(self.path, text)
        except OSError as exc:
            self._note(f"{self.path}: {exc.strerror or exc}")
            return
        self._last, self._problem = text, ""
        self.writes += 1

    def _note(self, problem: str) -> None:
        if problem != self._problem:
            log.warning("metrics file not written: %s", problem)
            self._problem = problem
