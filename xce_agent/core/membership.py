"""The host's membership in the cluster as a pure state machine.

`step(state, event, now)` returns the next `MembershipState` and the actions the agent must
carry out. Events come from the controller link (joined, contact ok or lost, refused,
decommissioned, the answer to a confirmation) and from supervision (a worker's "my rejoin was
refused" exit code, the worker role being down). `now` is wall-clock seconds and is only
recorded (since when, decommissioned at), never compared: the machine has no timers.

Cloud notices pass through here too: a notice the provider watcher saw is relayed to the
worker role and (while a member) to the controller; a host the controller says is drained for
a notice lets the platform go ahead; an OS shutdown is announced to the controller before the
components are stopped.

The decommission guarantee lives here: once `standing` is DECOMMISSIONED for this instance,
no event starts the worker role again, and the state is saved before the worker is stopped.
Only a new instance id (a new instance booted from the same disk) clears it.

The events and actions are defined in membership_messages.py and named here too, so the
machine's users say `membership.Joined` as before.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, replace

from xce_agent.core.membership_messages import (
    Action,
    AnnounceShutdown,
    ApproveEvent,
    Boot,
    Confirm,
    ConfirmedActive,
    ContactLost,
    ContactOk,
    Decommissioned,
    EndStaleNotice,
    Event,
    FinalReport,
    Joined,
    LinkStalled,
    Noticed,
    NoticeDrained,
    NoticeHeld,
    OpenLink,
    Refused,
    RelayNotice,
    Resumed,
    SaveNow,
    SendNotice,
    ShutdownAnnounced,
    ShuttingDown,
    StartRole,
    StopForShutdown,
    StopRole,
    WorkerExit,
    WorkersDown,
    WriteTemplate,
)
from xce_agent.errors import UnexpectedEvent
from xce_protocol.reasons import Reason

__all__ = [
    "FROM_THE_CONTROLLER",
    "JOIN_FIRST_ROLES",
    "STANDING_CODES",
    "Action",
    "AnnounceShutdown",
    "ApproveEvent",
    "Boot",
    "Confirm",
    "ConfirmedActive",
    "ContactLost",
    "ContactOk",
    "Decommissioned",
    "EndStaleNotice",
    "Event",
    "FinalReport",
    "Joined",
    "LinkStalled",
    "MembershipState",
    "NoticeDrained",
    "NoticeHeld",
    "Noticed",
    "OpenLink",
    "Refused",
    "RelayNotice",
    "Resumed",
    "SaveNow",
    "SendNotice",
    "ShutdownAnnounced",
    "ShuttingDown",
    "Standing",
    "StartRole",
    "Step",
    "StopForShutdown",
    "StopRole",
    "WorkerExit",
    "WorkersDown",
    "WriteTemplate",
    "allowed",
    "standing_code",
    "step",
]

# Roles whose components need the template from the join answer before they start, and which
# a decommission stops for good.
JOIN_FIRST_ROLES = ("worker",)


class Standing(str, enum.Enum):
    """Where the host stands with the controller."""

    NOT_CONFIGURED = "not configured"  # no controller in the config: roles just run
    WAITING = "waiting"  # no answer yet since the agent started
    CONNECTED = "connected"  # joined; the last contact was answered
    UNREACHABLE = "unreachable"  # the last contact failed (timeout, 5xx, garbage, ...)
    REFUSED = "refused"  # a definite refusal that is not a decommission (401, 403, 409)
    DECOMMISSIONED = "decommissioned"  # this instance was decommissioned: the tombstone


@dataclass(frozen=True)
class MembershipState:
    standing: Standing = Standing.NOT_CONFIGURED
    since: float = 0.0  # wall-clock time the standing last changed (for a decommission: when)
    host: str = ""
    detail: str = ""  # why; for DECOMMISSIONED the controller's reason
    instance_id: str = ""  # the instance this standing is about
    retry_until: float | None = None  # the link waits out a Retry-After until then
    reported: bool = False  # decommissioned: the final report (worker down) was sent
    link_warning: str = ""  # the last time the link's watchdog had to replace a thread

    @property
    def decommissioned(self) -> bool:
        return self.standing is Standing.DECOMMISSIONED


Step = tuple[MembershipState, tuple[Action, ...]]


# The controller's answers (and what the link makes of them) come only to an agent that has a
# controller: in NOT_CONFIGURED every other event is allowed, and these are refused.
FROM_THE_CONTROLLER: tuple[type, ...] = (Joined, Resumed, ContactOk, ContactLost, Refused)
FROM_THE_CONTROLLER += (Decommissioned, ConfirmedActive)


def allowed(state: MembershipState, event: Event) -> bool:
    if state.standing is Standing.NOT_CONFIGURED:
        return not isinstance(event, FROM_THE_CONTROLLER)
    return True


def step(state: MembershipState, event: Event, now: float) -> Step:
    """Apply one event at wall-clock time `now`; UnexpectedEvent when `allowed` refuses it.
    A decommissioned host takes every event and acts on none that would start its worker."""
    if not allowed(state, event):
        raise UnexpectedEvent(f"{type(event).__name__} while {state.standing.value}")
    if isinstance(event, Boot):
        return _boot(state, event, now)
    if isinstance(event, LinkStalled):
        return replace(state, link_warning=event.detail), ()
    if isinstance(event, (Noticed, NoticeDrained, NoticeHeld, ShuttingDown, ShutdownAnnounced)):
        return state, _notice_actions(state, event)
    if state.decommissioned:
        return _decommissioned(state, event)
    if isinstance(event, Joined):
        detail = f"joined as {event.host} ({event.host_state})"
        joined = _stand(state, Standing.CONNECTED, now, detail)
        actions = (WriteTemplate(event.template_doc),)
        starts = tuple(StartRole(r, "joined the controller") for r in JOIN_FIRST_ROLES)
        return replace(joined, host=event.host), actions + starts
    if isinstance(event, Resumed):
        detail = f"resumed as {event.host} ({event.host_state})"
        resumed = _stand(state, Standing.CONNECTED, now, detail)
        starts = tuple(StartRole(r, "resumed with the stored credential") for r in JOIN_FIRST_ROLES)
        return replace(resumed, host=event.host), starts
    if isinstance(event, ContactOk):
        return _stand(state, Standing.CONNECTED, now, event.detail and f"host {event.detail}"), ()
    if isinstance(event, ContactLost):
        return _stand(state, Standing.UNREACHABLE, now, event.detail, event.retry_until), ()
    if isinstance(event, Refused):
        return _stand(state, Standing.REFUSED, now, event.detail, event.retry_until), ()
    if isinstance(event, Decommissioned):
        return _decommission(state, event, now)
    if isinstance(event, WorkerExit):
        return state, (Confirm(),)
    if isinstance(event, ConfirmedActive):
        reason = "controller confirmed the host is active"
        connected = _stand(state, Standing.CONNECTED, now, reason)
        confirmed = Reason.CONTROLLER_CONFIRMED_ACTIVE
        return connected, tuple(StartRole(r, reason, confirmed) for r in JOIN_FIRST_ROLES)
    if isinstance(event, WorkersDown):
        return state, ()  # while a member: supervision restarts them as configured
    raise UnexpectedEvent(f"{type(event).__name__}: no rule for it")


def _notice_actions(
    state: MembershipState,
    event: Noticed | NoticeDrained | NoticeHeld | ShuttingDown | ShutdownAnnounced,
) -> tuple[Action, ...]:
    """A decommissioned host has nothing to tell the controller, nor a worker to warn."""
    member = state.standing is not Standing.NOT_CONFIGURED and not state.decommissioned
    if isinstance(event, Noticed):
        if state.decommissioned:
            return ()
        return (RelayNotice(event.notice),) + ((SendNotice(event.notice),) if member else ())
    if isinstance(event, NoticeDrained):
        return (ApproveEvent(event.event_id),) if member else ()
    if isinstance(event, NoticeHeld):
        return (EndStaleNotice(event.event_id, event.kind),) if member else ()
    if isinstance(event, ShuttingDown):
        # The controller hears it first, so it requeues this host's jobs at once rather
        # than a host-loss grace after the instance is gone.
        return (AnnounceShutdown(),) if member else (StopForShutdown(),)
    return (StopForShutdown(),)


def _stand(
    state: MembershipState,
    standing: Standing,
    now: float,
    detail: str,
    retry_until: float | None = None,
) -> MembershipState:
    since = state.since if standing is state.standing else now
    return replace(state, standing=standing, since=since, detail=detail, retry_until=retry_until)


def _boot(state: MembershipState, event: Boot, now: float) -> Step:
    if state.decommissioned and state.instance_id == event.instance_id:
        reason = f"decommissioned: {state.detail}"
        return state, tuple(StopRole(r, reason) for r in JOIN_FIRST_ROLES)
    cleared = ""
    if state.decommissioned:
        # Same disk image, new instance: the old instance's decommission is not ours.
        cleared = f"tombstone of instance {state.instance_id} cleared: this is {event.instance_id}"
    standing = Standing.WAITING if event.controller else Standing.NOT_CONFIGURED
    detail = cleared or ("waiting for controller" if event.controller else "")
    fresh = MembershipState(standing, now, event.host, detail, event.instance_id)
    waits = JOIN_FIRST_ROLES if event.controller else ()
    starts: tuple[Action, ...] = tuple(
        StartRole(role, "agent started") for role in event.roles if role not in waits
    )
    return fresh, starts + ((OpenLink(),) if event.controller else ())


def _decommission(state: MembershipState, event: Decommissioned, now: float) -> Step:
    if event.instance_id != state.instance_id:
        return state, ()  # the link checks this too; a refusal for another instance is not ours
    gone = replace(
        state,
        standing=Standing.DECOMMISSIONED,
        since=now,
        detail=event.reason,
        retry_until=None,
        reported=False,
    )
    stops = tuple(StopRole(r, f"decommissioned: {event.reason}") for r in JOIN_FIRST_ROLES)
    return gone, (SaveNow(), *stops)


def _decommissioned(state: MembershipState, event: Event) -> Step:
    """Nothing the controller or the worker says starts the worker role again."""
    if isinstance(event, WorkersDown) and not state.reported:
        return replace(state, reported=True), (SaveNow(), FinalReport())
    return state, ()


STANDING_CODES = {
    Standing.CONNECTED: Reason.CONTROLLER_CONNECTED,
    Standing.UNREACHABLE: Reason.CONTROLLER_UNREACHABLE,
    Standing.REFUSED: Reason.CONTROLLER_REFUSED,
    Standing.DECOMMISSIONED: Reason.REFUSED_DECOMMISSIONED,
}


def standing_code(standing: Standing) -> str:
    """The reason code of a standing ("" for waiting and not configured)."""
    code = STANDING_CODES.get(standing)
    return code.value if code is not None else ""
