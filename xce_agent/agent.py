"""The node agent's wiring: config in, components supervised, state saved, systemd told.

SIGTERM leaves the components running, to be adopted by the next agent; `xce-agent stop` (the
control socket) stops every component and then the agent, a joined one after telling the
controller and draining the host (a planned stop, controller/planned_stop.py); SIGUSR2 stops
at once; SIGHUP reloads the config (agent_signals.py). See docs/operations.md.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace

from xce_agent import agent_start, agent_timers
from xce_agent import membership_actions as actions
from xce_agent.agent_saving import StateSaving
from xce_agent.agent_signals import AgentSignals
from xce_agent.components.adoption import adopt_previous
from xce_agent.components.prestart import PreStart
from xce_agent.config.agent import AgentConfig
from xce_agent.controller.credential import CredentialStore
from xce_agent.controller.join_guard import JoinGuard
from xce_agent.controller.lease_client import HttpLeaseCalls
from xce_agent.controller.planned_stop import PlannedStop
from xce_agent.controller.reports import Reports, host_name
from xce_agent.controller.side import LAST_REPORT_TIMEOUT, ControllerSide
from xce_agent.core import membership as ms
from xce_agent.core import pending_notices, planned_stop
from xce_agent.errors import UnexpectedEvent
from xce_agent.metrics.agent import AgentMetrics
from xce_agent.notices.relay import NoticeRelay
from xce_agent.notices.watching import CloudNotices
from xce_agent.operator.control import SOCKET_NAME, ControlServer
from xce_agent.operator.verbs import Operator
from xce_agent.singletons.runner import Singletons, fenced
from xce_agent.state import (
    AgentState,
    Lifecycle,
    StateStore,
    StateWriter,
    Tombstone,
)
from xce_agent.supervision import cgroups
from xce_agent.supervision import machine as m
from xce_agent.supervision.process import ProcessRunner
from xce_agent.supervision.reactor import Reactor
from xce_agent.supervision.supervisor import Supervisor
from xce_agent.system import single_agent, start_signals
from xce_agent.system.notify import Notifier, system_shutting_down
from xce_protocol.notices import NoticeState
from xce_protocol.reasons import Reason

log = logging.getLogger(__name__)

LINK_CHECK_PERIOD = 5.0  # how often the link's threads are checked for a stall


AlreadyRunning = single_agent.AlreadyRunning


class Agent(StateSaving):
    """The only writer of AgentState: supervision reports and link events come here."""

    def __init__(
        self,
        config: AgentConfig,
        notifier: Notifier,
        reactor: Reactor | None = None,
        runner: ProcessRunner | None = None,
        shutting_down: Callable[[], bool] = system_shutting_down,
        containment: cgroups.Detection | None = None,
        held: start_signals.Held | None = None,
    ) -> None:
        self.config = config
        self.notifier = notifier
        self.reactor = reactor or Reactor()
        self.store = StateStore(config.state_directory)
        self.store.ensure_directory()  # before anything is created in it (output/)
        self.writer: StateWriter | None = None
        self._shutting_down = shutting_down
        ctl = config.controller
        # The host credential from the last join, if it was issued to this very host; the
        # worker gets its own credential from it, never the join token.
        self.credentials = CredentialStore(config.state_directory)
        me = host_name(config)
        self.stored = self.credentials.load(me, config.instance.id, ctl.urls) if ctl else None
        self.handoff = agent_start.handoff_for(config, self.stored)
        self._detected = runner is None and containment is None
        runner, self.containment = agent_start.runner_for(config, self.handoff, runner, containment)
        self._runner = runner
        self.supervisor = Supervisor(
            [fenced(spec) for spec in config.components],
            self.reactor,
            runner,
            output_dir=config.state_directory / "output",
            on_change=self._component_changed,
            on_decommission_exit=self._decommission_exit,
            on_output=agent_timers.Later(self.reactor, 2.0, self._refresh_components),
        )
        # Before every start: no other copy anywhere, and the start written ahead.
        self.prestart = PreStart(self.supervisor, getattr(runner, "owner", ""), self._save_ahead)
        self.supervisor.guard = self.prestart
        self.state = AgentState(instance_id=config.instance.id, roles=config.roles)
        self.host = host_name(config)
        self.reports = Reports(config, lambda: self.state)
        self.controller = ControllerSide(
            ctl,
            self.host,
            config.instance.id,
            self.handoff,
            self.stored,
            self.credentials,
            self.reports,
            self.post,
        )
        self.operator = Operator(self)
        self.planned = PlannedStop(
            self.reactor, self.controller, config.instance.id, self.supervisor.stop_all
        )
        self.planned.on_change = self._planned_changed
        relay = NoticeRelay(
            self.supervisor.specs, self.supervisor.send_signal, config.state_directory
        )
        self.notices = CloudNotices(config.cloud, relay, lambda n: self.post(ms.Noticed(n)))
        self.signals = AgentSignals(self, held)
        self.metrics = AgentMetrics(config.metrics)
        self.metrics.watching_notices = config.cloud.provider != "none"
        self.singletons = Singletons(
            config.components,
            self.supervisor,
            self.reactor,
            HttpLeaseCalls(lambda: self.controller.lease_client, self.controller.credential),
        )
        self.supervisor.gate = self.singletons
        self.singletons.on_change = self._singletons_changed
        self.join_guard = JoinGuard(
            config, self.reactor, lambda: self.state.membership.detail, self.host
        )
        self.join_guard.on_change = self._update_metrics
        self._since = {}
        self._held: single_agent.Held | None = None
        self._control: ControlServer | None = None
        self._leaving: str | None = None  # "detach" or "stop" once the agent is on its way out
        # Until the previous agent's components were adopted, the saved records are theirs:
        # an agent refused or failing before that must not overwrite them with empty ones.
        self._resumed = False
        self._metrics_owned = False

    # --- lifecycle --------------------------------------------------------------------
    def run(self) -> int:
        self.store.ensure_directory()
        self._held = single_agent.acquire(self.config.state_directory)
        self.writer = StateWriter(self.store)
        try:
            previous = self.store.load()
            single_agent.refuse_live(self.config.state_directory, previous)
            # No other agent runs here: a textfile with values is a killed agent's, frozen.
            self._metrics_owned = True
            gone = previous is not None and previous.membership.decommissioned
            self.metrics.mark_down(self.config.instance.id, gone)
            self.prestart.remember(previous)
            removed = self.store.clean_temp_files()
            if removed:
                log.info("removed %d temporary state files left by an earlier agent", removed)
            self._contain(previous)
            self._record_self(previous)
            start_signals.pass_gate()
            self.signals.install()
            self._control = ControlServer(
                self.config.state_directory / SOCKET_NAME, self.reactor, self.operator.handle
            )
            self.metrics.start()
            self._resume(previous)
            self._resumed = True
            self._set_lifecycle(Lifecycle.RUNNING)
            self.notifier.notify("READY=1")
            agent_timers.start_watchdog(self.reactor, self.notifier)
            if self.config.controller is not None or self.metrics.file is not None:
                # else nothing to check: the idle agent sleeps untimed
                agent_timers.every(self.reactor, LINK_CHECK_PERIOD, self._check_link)
            self.reactor.run(until=self._done)
            return 0
        finally:
            self._finish()

    def _contain(self, previous: AgentState | None) -> None:
        self.containment = agent_start.contain(
            self.containment, self._detected, previous, self._runner, self.supervisor
        )

    def _record_self(self, previous: AgentState | None) -> None:
        record = agent_start.self_record(self.config)
        base = previous or self.state
        tree = self._runner.cgroups
        self.state = replace(
            base,
            agent=record,
            lifecycle=Lifecycle.STARTING,
            containment=self.containment.description,
            cgroup_root=str(tree.root) if tree else "",
            instance_id=self.config.instance.id,
            roles=self.config.roles,
            notices=(),  # the watcher reads every item again
            planned_stop=None,  # a killed agent's drain is over: this one has none
            singletons=self.singletons.status(),
        )
        self._save()

    def _resume(self, previous: AgentState | None) -> None:
        """Adopt live components a previous agent left (adoption.py), start the rest."""
        adopt_previous(self.supervisor, previous)
        try:
            self.handoff.open_directory()
        except OSError as exc:
            log.error("cannot set the state directory's access: %s", exc.strerror)
        actions.restore_role_env(self)
        boot = ms.Boot(
            self.config.instance.id,
            self.host,
            self.config.roles,
            self.config.controller is not None,
        )
        self.handle(boot)
        self.notices.start()
        self.join_guard.start()

    # --- what the signal handlers may ask (agent_signals.py SignalSide) -------------------
    def system_going_down(self) -> bool:
        return self._shutting_down()

    def begin_shutdown(self) -> None:
        self.notifier.notify("STOPPING=1")
        self._set_lifecycle(Lifecycle.STOPPING)  # what the final report says
        self.handle(ms.ShuttingDown())

    def detach(self, why: str) -> None:
        log.info("%s", why)
        self._leaving = "detach"
        self.reactor.stop()

    def request_stop(self, reason: str, drain: float | None = None) -> None:
        """Stop every component, then the agent; a joined agent drains first (`drain`
        seconds, None: controller.drain_on_stop; 0: not at all)."""
        if self._leaving != "stop":
            self._leaving = "stop"
            self.notifier.notify("STOPPING=1")
            self._set_lifecycle(Lifecycle.STOPPING)
        ctl = self.config.controller
        seconds = planned_stop.bound(drain, ctl.drain_on_stop if ctl else 0.0)
        self.planned.begin(self.state.membership, seconds, reason)

    def _done(self) -> bool:
        idle = self.supervisor.idle() and not self.singletons.releasing()
        return self._leaving == "stop" and idle and not self.planned.draining()

    def _finish(self) -> None:
        self.notices.stop()
        if self._leaving == "stop" and self.planned.told and self._resumed:
            self._set_lifecycle(Lifecycle.STOPPED)  # what the last report says
            self.controller.last_report(LAST_REPORT_TIMEOUT)
        self.controller.stop()
        self.notifier.notify("STOPPING=1")
        lifecycle = Lifecycle.STOPPED if self._leaving == "stop" else Lifecycle.DETACHED
        # Save while the handles are still known: the next agent adopts from this record.
        if self._resumed:
            self._set_lifecycle(lifecycle)
        self.singletons.close()
        self.join_guard.close()
        if self._control is not None:
            self._control.close()
        self.supervisor.close()
        self.handoff.close()
        self.metrics.stop()
        if self._metrics_owned:  # not a live agent's file, when refused because of it
            self.metrics.mark_down(self.config.instance.id, self.state.membership.decommissioned)
        if self.writer is not None:
            self.writer.close()
        self.reactor.restore_signals()
        if self._held is not None:
            self._held.release()
            self._held = None

    # --- periodic -------------------------------------------------------------------
    def _check_link(self) -> None:
        self.controller.check_threads()
        self.metrics.restore()  # the same period serves: one stat of the textfile
        self._check_state_file()

    def _check_state_file(self) -> None:
        """The state file is what this agent wrote last, or it is written again: an older copy
        put back (or an edit) would make the next agent start a second copy of a component
        whose live process the file no longer names."""
        why = self.store.changed_under()
        if why:
            log.warning("%s: %s under the agent: writing it again", self.store.path, why)
            self._refresh_components()

    # --- membership -------------------------------------------------------------------
    def post(self, event: ms.Event) -> None:
        """From the link's threads: the event is handled on the event loop's thread."""
        self.reactor.call_soon_threadsafe(lambda: self.handle(event))

    def handle(self, event: ms.Event) -> None:
        if isinstance(event, ms.NoticeDrained):
            self.planned.drained(event.event_id)  # a planned stop's drain may be over
        if isinstance(event, ms.ContactOk):  # a heartbeat the controller accepted
            self.metrics.heartbeat_accepted(time.time())
            self._update_metrics()
        if isinstance(event, ms.Noticed):
            active = event.notice.state is NoticeState.ACTIVE
            self.metrics.notice(event.notice.event_id, active)
            self._update_metrics()
            pending = pending_notices.update(self.state.notices, event.notice, time.time())
            self.state = replace(self.state, notices=pending)
            self._save()
        before = self.state.membership
        try:
            after, todo = ms.step(before, event, time.time())
        except UnexpectedEvent as exc:
            code = Reason.UNEXPECTED_EVENT.value
            log.error("membership: dropped %s", exc, extra={"reason_code": code})
            return
        if after != before:
            actions.log_standing(before, after)
            self.state = replace(self.state, membership=after)
            self._save()
        if after.decommissioned:
            self.singletons.bar(f"host decommissioned ({after.detail})")
            self.planned.end("the host was decommissioned")  # nothing left to drain for
        if after.standing is ms.Standing.CONNECTED:
            self.join_guard.accepted()  # accepted once: the join deadline no longer applies
        if isinstance(event, ms.ConfirmedActive) and todo:
            log.warning("controller says this host is active: starting its worker role again")
        for action in todo:
            actions.perform(self, action)
        self._workers_down_check()

    def _workers_down_check(self) -> None:
        member = self.state.membership
        down = all(self.supervisor.role_down(r) for r in ms.JOIN_FIRST_ROLES)
        if member.decommissioned and not member.reported and down:
            self.handle(ms.WorkersDown())

    def prepare_role(self, role: str) -> bool:
        """Hand a worker-role component its template before it starts; False if there is none."""
        return actions.prepare_role(self, role)

    # --- state ------------------------------------------------------------------------
    def _component_changed(self, name: str, cstate: m.ComponentState) -> None:
        self.singletons.component_changed(name, cstate)
        self._since[name] = time.time()
        self._refresh_components()
        self._workers_down_check()
        spec = self.supervisor.specs.get(name)
        worker = spec is not None and spec.role in ms.JOIN_FIRST_ROLES
        if cstate.phase is m.Phase.FATAL and worker:
            self.controller.report_now()

    def _singletons_changed(self) -> None:
        self.state = replace(self.state, singletons=self.singletons.status())
        self._save()  # and the metrics

    def _planned_changed(self) -> None:
        self.state = replace(self.state, planned_stop=self.planned.status)
        self._save()

    def _decommission_exit(self, name: str, code: int) -> None:
        log.warning("%s exited with code %d (rejoin refused): asking the controller", name, code)
        self.handle(ms.WorkerExit(name, code))

    # --- what the Operator may ask (operator/verbs.py AgentSide) ---------------------------
    def tombstone(self) -> Tombstone | None:
        return self.state.tombstone

    def connected(self) -> bool:
        return self.state.membership.standing is ms.Standing.CONNECTED

    def apply_reload(self, config: AgentConfig) -> None:
        self.config = replace(self.config, components=config.components, roles=config.roles)
        self.state = replace(self.state, roles=config.roles)
        self.refresh()

    def refresh(self) -> None:
        """Save the components' state now (after an operator's change)."""
        self._refresh_components()
