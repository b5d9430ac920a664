"""What the membership machine's actions do (core/membership.py decides, this performs).

Runs on the event loop, for the agent (agent.py), which hands itself in as an `ActionSide`:
a worker role started with the controller's template, the link opened, notices relayed and
sent, the standing logged. Nothing here changes the agent's state but through `handle`.
"""

from __future__ import annotations

import logging
from typing import Protocol

from xce_agent.config.agent import AgentConfig
from xce_agent.controller.handoff import Handoff
from xce_agent.controller.side import ControllerSide
from xce_agent.core import membership as ms
from xce_agent.notices.watching import CloudNotices
from xce_agent.state import StateWriter
from xce_agent.supervision.supervisor import Supervisor
from xce_protocol.protocol import printable

# The agent's logger: these lines were always the agent's, and logs are searched by it.
log = logging.getLogger("xce_agent.agent")


class ActionSide(Protocol):
    """What performing an action needs of the agent."""

    config: AgentConfig
    host: str
    supervisor: Supervisor
    handoff: Handoff
    writer: StateWriter | None
    controller: ControllerSide
    notices: CloudNotices

    def handle(self, event: ms.Event) -> None: ...

    def request_stop(self, reason: str, drain: float | None = None) -> None: ...


def prepare_role(side: ActionSide, role: str) -> bool:
    """Hand a worker-role component its template before it starts; False if there is none."""
    if role in ms.JOIN_FIRST_ROLES and side.config.controller is not None:
        cred = side.controller.credential()
        if cred is not None:
            side.handoff.set_credential(cred.worker_secret or None)
        env = side.handoff.env(side.host, side.config.instance.id)
        if env is None:
            log.error("no template from the controller: not starting %s", role)
            return False
        side.supervisor.set_role_env(role, env, side.handoff.fds())
    return True


def restore_role_env(side: ActionSide) -> None:
    """At start: an adopted worker restarts with the template it had (if there is one)."""
    if side.config.controller is None:
        return
    env = side.handoff.env(side.host, side.config.instance.id)
    for role in ms.JOIN_FIRST_ROLES:
        if env is not None:
            side.supervisor.set_role_env(role, env, side.handoff.fds())


def perform(side: ActionSide, action: ms.Action) -> None:
    if isinstance(action, ms.StartRole):
        if prepare_role(side, action.role):
            side.supervisor.start_role(action.role, action.reason, action.code)
    elif isinstance(action, ms.StopRole):
        side.supervisor.stop_role(action.role, action.reason, action.code)
    elif isinstance(action, ms.WriteTemplate):
        try:
            side.handoff.write_template(action.doc)
        except OSError as exc:  # the worker start that follows says it has no template
            log.error("cannot write %s: %s", side.handoff.template_path, exc.strerror)
    elif isinstance(action, ms.SaveNow):
        if side.writer is not None:
            side.writer.flush()  # e.g. the tombstone is on disk before the worker stops
    elif isinstance(action, ms.OpenLink):
        side.controller.open_link().start()
    elif isinstance(action, ms.FinalReport):
        side.controller.open_link().final_report()
    elif isinstance(action, ms.Confirm):
        side.controller.confirm()
    else:
        _perform_notice(side, action)


def _perform_notice(side: ActionSide, action: ms.Action) -> None:
    if isinstance(action, ms.RelayNotice):
        side.notices.tell_components(action.notice)
    elif isinstance(action, ms.SendNotice):
        side.controller.send_notice(action.notice)
    elif isinstance(action, ms.ApproveEvent):
        side.notices.approve(action.event_id)
    elif isinstance(action, ms.EndStaleNotice):
        ended = side.notices.stale_end(action.event_id, action.kind)
        if ended is not None:
            shown = printable(ended.event_id)[:80]
            log.info("the controller acts on notice %s, which is over: ending it", shown)
            side.handle(ms.Noticed(ended))  # told like an end the watcher saw
    elif isinstance(action, ms.AnnounceShutdown):
        side.controller.announce_shutdown()
    elif isinstance(action, ms.StopForShutdown):
        side.request_stop("system shutdown", drain=0.0)  # announced: no drain to wait for


def log_standing(before: ms.MembershipState, after: ms.MembershipState) -> None:
    if after.link_warning != before.link_warning:
        log.error("controller %s", after.link_warning)
    if after.standing is before.standing:
        return
    quiet = (ms.Standing.UNREACHABLE, ms.Standing.REFUSED)
    level = logging.WARNING if after.standing in quiet else logging.INFO
    detail = f" ({after.detail})" if after.detail else ""
    code = {"reason_code": ms.standing_code(after.standing)}
    log.log(level, "controller contact: %s%s", after.standing.value, detail, extra=code)
