"""What an operator may ask the running agent: start, stop, restart, reset, reload.

Answers come back over the control socket (control.py). A decommissioned host's worker is
never started again, whoever asks. The Operator asks the Agent only what `AgentSide` names:
the supervisor's and the singletons' public verbs, and `apply_reload` for the Agent's own
config and state, which the Agent alone writes. `reload` validates the file first and changes
nothing when it has a problem; otherwise added components are started, removed ones stopped to the
end, and changed ones restarted (only when what they run changed; one waiting out a backoff is
started at once). The journal gets the summary and a line per changed component and key.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

from xce_agent.config.agent import AgentConfig, load_config
from xce_agent.core import planned_stop
from xce_agent.core.membership import JOIN_FIRST_ROLES
from xce_agent.errors import ConfigError
from xce_agent.operator.control import Answer
from xce_agent.singletons.runner import Singletons, fenced
from xce_agent.state import Tombstone
from xce_agent.supervision.machine import Phase
from xce_agent.supervision.process import digest_of
from xce_agent.supervision.spec import ComponentSpec
from xce_agent.supervision.supervisor import Supervisor
from xce_protocol.reasons import Reason


class AgentSide(Protocol):
    """What the Operator may ask of the Agent."""

    @property
    def supervisor(self) -> Supervisor: ...

    @property
    def singletons(self) -> Singletons: ...

    @property
    def config(self) -> AgentConfig: ...

    def tombstone(self) -> Tombstone | None: ...

    def connected(self) -> bool:
        """The host is joined (a worker-role component may start)."""
        ...

    def request_stop(self, reason: str, drain: float | None = None) -> None:
        """Every component, then the agent; a joined agent drains first (planned_stop.py)."""
        ...

    def prepare_role(self, role: str) -> bool: ...

    def apply_reload(self, config: AgentConfig) -> None:
        """The reloaded config's components and roles become the Agent's own, saved."""
        ...

    def save_error(self) -> str:
        """Why the last save of the state failed; "" once one succeeded."""
        ...


log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ReloadPlan:
    added: tuple[ComponentSpec, ...] = ()
    removed: tuple[str, ...] = ()
    restarted: tuple[ComponentSpec, ...] = ()  # what they run changed
    updated: tuple[ComponentSpec, ...] = ()  # only how they are supervised changed

    def describe(self, idle: Iterable[str] = ()) -> str:
        """`idle`: changed components that do not run (stopped, exited, fatal): not restarted."""
        parts = [f"removed {name}" for name in self.removed]
        parts += [f"added {spec.name}" for spec in self.added]
        parts += [
            f"changed {spec.name} (not running: applies at its next start)"
            if spec.name in idle
            else f"restarted {spec.name}"
            for spec in self.restarted
        ]
        parts += [f"updated {spec.name}" for spec in self.updated]
        return ", ".join(parts)


def plan_reload(old: Iterable[ComponentSpec], new: Iterable[ComponentSpec]) -> ReloadPlan:
    """What a reload does, decided from the two configs alone."""
    before = {spec.name: spec for spec in old}
    after = {spec.name: spec for spec in new}
    changed = [spec for name, spec in after.items() if name in before and spec != before[name]]

    def runs_differently(spec: ComponentSpec) -> bool:
        was = before[spec.name]
        return digest_of(spec) != digest_of(was) or spec.limits != was.limits

    return ReloadPlan(
        added=tuple(spec for name, spec in after.items() if name not in before),
        removed=tuple(name for name in before if name not in after),
        restarted=tuple(spec for spec in changed if runs_differently(spec)),
        updated=tuple(spec for spec in changed if not runs_differently(spec)),
    )


def changed_keys(old: ComponentSpec, new: ComponentSpec) -> tuple[str, ...]:
    """The settings of a component that differ between two configs, by their config key
    (`command`, `restart`, `environment`, ...): what the reload's log line names."""
    keys = (f.name for f in dataclasses.fields(ComponentSpec) if f.name != "name")
    return tuple(key for key in keys if getattr(old, key) != getattr(new, key))


def reload_lines(
    plan: ReloadPlan,
    old: Iterable[ComponentSpec],
    ignored: Iterable[str],
    idle: Iterable[str] = (),
) -> list[str]:
    """One line per changed component or agent key, for the log (`idle` as in describe)."""
    idle = set(idle)
    before = {spec.name: spec for spec in old}
    lines = [f"reload: {name}: removed, stopping it" for name in plan.removed]
    lines += [f"reload: {spec.name}: added" for spec in plan.added]
    for spec in plan.restarted:
        keys = ", ".join(changed_keys(before[spec.name], spec))
        done = "applies at its next start" if spec.name in idle else "restarted now"
        lines.append(f"reload: {spec.name}: {keys} changed: {done}")
    for spec in plan.updated:
        keys = ", ".join(changed_keys(before[spec.name], spec))
        lines.append(f"reload: {spec.name}: {keys} changed: applied, its process kept")
    lines += [f"reload: {key} changed: restart the agent to apply" for key in ignored]
    return lines


def singletons_changed(old: Iterable[ComponentSpec], new: Iterable[ComponentSpec]) -> list[str]:
    """Components whose singleton settings a reload would change, add or remove: the lease
    holders are fixed for an agent run."""
    before = {spec.name: spec.singleton for spec in old}
    after = {spec.name: spec.singleton for spec in new}
    names = {n for n, s in before.items() if s} | {n for n, s in after.items() if s}
    return sorted(n for n in names if before.get(n) != after.get(n))


class Operator:
    def __init__(self, agent: AgentSide) -> None:
        self.agent = agent

    def handle(self, command: str, name: str) -> Answer:
        if command == "reload":
            return self.reload()
        if command == "saving":
            why = self.agent.save_error()
            return Answer(not why, f"{Reason.STATE_UNWRITABLE.value}: {why}" if why else "saved")
        if command == "stop-all":
            try:
                drain = planned_stop.parse_request(name)
            except ValueError as exc:
                return Answer(False, str(exc))
            self.agent.request_stop("xce-agent stop", drain)
            return Answer(True, "stopping every component, then the agent")
        sup = self.agent.supervisor
        if name not in sup.specs or name in sup.retiring:
            known = ", ".join(n for n in sup.specs if n not in sup.retiring) or "none"
            return Answer(False, f"no component {name!r} (configured: {known})")
        if command == "stop":
            sup.stop(name, "xce-agent stop " + name)
            return Answer(True, f"stopping {name}")
        refusal = self._refuse_start(sup.specs[name])
        if refusal:
            return Answer(False, refusal)
        if command == "reset" and sup.state(name).phase is not Phase.FATAL:
            return Answer(False, f"{name} is {sup.state(name).phase.value}, not fatal")
        if command == "restart":
            sup.restart(name, "xce-agent restart " + name)
        else:
            sup.start(name, f"xce-agent {command} {name}")
        waiting = self.agent.singletons.waiting(name)
        if waiting:
            return Answer(True, f"{name}: {waiting}", pending=True)
        done = {"start": f"starting {name}", "restart": f"restarting {name}"}
        return Answer(True, done.get(command, f"{name}: fatal state cleared, starting"))

    def _refuse_start(self, spec: ComponentSpec) -> str:
        tomb = self.agent.tombstone()
        if tomb is not None and (spec.role in JOIN_FIRST_ROLES or spec.singleton is not None):
            # A singleton too: no lease is granted to a decommissioned host.
            return f"{spec.name}: this host was decommissioned ({tomb.reason}); it never starts"
        return ""

    def reload(self) -> Answer:
        agent = self.agent
        try:
            new = load_config(agent.config.path)
        except ConfigError as exc:
            return Answer(False, "config not reloaded:\n" + "\n".join(exc.problems))
        moved = singletons_changed(agent.config.components, new.components)
        if moved:
            return Answer(
                False,
                f"config not reloaded: singleton components changed ({', '.join(moved)}): "
                "restart the agent to apply (a new agent run is a new lease holder)",
            )
        sup = agent.supervisor
        old = agent.config.components
        plan = plan_reload(old, new.components)
        waiting = (Phase.RUNNING, Phase.STARTING, Phase.STOPPING, Phase.BACKOFF)
        idle = [s.name for s in plan.restarted if sup.state(s.name).phase not in waiting]
        for name in plan.removed:
            sup.remove(name, "removed from the config")
        for spec in plan.added:
            sup.add(fenced(spec))
            self._start_added(spec)
        for spec in plan.restarted:
            if self._refuse_start(spec):  # its decommission stop may still be under way
                sup.update(fenced(spec))
            else:
                sup.replace(fenced(spec), "config reloaded: its command or settings changed")
        for spec in plan.updated:
            sup.update(fenced(spec))
        ignored = [
            key
            for key in ("controller", "instance", "state_directory", "log_level")
            if getattr(new, key) != getattr(agent.config, key)
        ]
        agent.apply_reload(new)
        message = "config reloaded: " + (plan.describe(idle) or "no component changed")
        if ignored:
            message += f"; {', '.join(ignored)} changed: restart the agent to apply"
        log.info("%s", message)  # whichever way it came (socket, SIGHUP): the journal says what
        for line in reload_lines(plan, old, ignored, idle):
            log.info("%s", line)
        return Answer(True, message)

    def _start_added(self, spec: ComponentSpec) -> None:
        agent = self.agent
        if self._refuse_start(spec):
            return
        if spec.role in JOIN_FIRST_ROLES and agent.config.controller is not None:
            if not agent.connected():
                return  # started once joined, like the others of its role
            if not agent.prepare_role(spec.role):
                return
        agent.supervisor.start(spec.name, "added by a reload")
