"""What the membership machine (membership.py) hears and what it asks of the agent.

Events come from the controller link (joined, contact ok or lost, refused, decommissioned,
the answer to a confirmation), from supervision (a worker's decommission exit code, the
worker role down) and from the provider's notices and systemd (a notice, a shutdown).
Actions are carried out by the agent's shell (membership_actions.py), in the order given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Union

from xce_protocol.notices import Notice
from xce_protocol.reasons import Reason

# --- events -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Boot:
    """The agent started with `state` as saved by the previous agent (or a fresh one)."""

    instance_id: str
    host: str
    roles: tuple[str, ...]
    controller: bool  # a controller is configured


@dataclass(frozen=True)
class Joined:
    host: str
    host_state: str
    template_doc: Mapping[str, Any] = field(default_factory=dict)  # what the worker reads


@dataclass(frozen=True)
class Resumed:
    """The controller took the stored host credential: the same host, no join (the template
    from the last join is still on disk)."""

    host: str
    host_state: str


@dataclass(frozen=True)
class ContactOk:
    detail: str = ""


@dataclass(frozen=True)
class ContactLost:
    detail: str
    retry_until: float | None = None


@dataclass(frozen=True)
class Refused:
    detail: str
    retry_until: float | None = None


@dataclass(frozen=True)
class Decommissioned:
    instance_id: str
    reason: str


@dataclass(frozen=True)
class WorkerExit:
    """A worker-role component exited with one of its decommission exit codes."""

    component: str
    code: int


@dataclass(frozen=True)
class ConfirmedActive:
    """After a WorkerExit the controller accepted a heartbeat: the host is still wanted."""


@dataclass(frozen=True)
class WorkersDown:
    """No worker-role component is running, starting or stopping."""


@dataclass(frozen=True)
class LinkStalled:
    detail: str


@dataclass(frozen=True)
class Noticed:
    """The provider watcher saw a notice appear, change or end."""

    notice: Notice


@dataclass(frozen=True)
class NoticeDrained:
    """A controller answer says this host is drained for the notice `event_id`."""

    event_id: str


@dataclass(frozen=True)
class NoticeHeld:
    """A controller answer says the host acts on the notice `event_id` of `kind`."""

    event_id: str
    kind: str


@dataclass(frozen=True)
class ShuttingDown:
    """systemd is taking the system down (SIGTERM while `is-system-running` is stopping)."""


@dataclass(frozen=True)
class ShutdownAnnounced:
    """The shutdown notice and the final report went out (or could not, within bounds)."""


Event = Union[
    Boot,
    Joined,
    Resumed,
    ContactOk,
    ContactLost,
    Refused,
    Decommissioned,
    WorkerExit,
    ConfirmedActive,
    WorkersDown,
    LinkStalled,
    Noticed,
    NoticeDrained,
    NoticeHeld,
    ShuttingDown,
    ShutdownAnnounced,
]

# --- actions ----------------------------------------------------------------------------


@dataclass(frozen=True)
class StartRole:
    role: str
    reason: str
    code: Reason = Reason.COMPONENT_STARTED


@dataclass(frozen=True)
class StopRole:
    role: str
    reason: str
    code: Reason = Reason.WORKER_STOPPED_DECOMMISSIONED  # the only reason membership stops


@dataclass(frozen=True)
class WriteTemplate:
    doc: Mapping[str, Any]


@dataclass(frozen=True)
class SaveNow:
    """Put the state on disk before the next action (the tombstone before the stop)."""


@dataclass(frozen=True)
class OpenLink:
    pass


@dataclass(frozen=True)
class FinalReport:
    """Tell the controller once that the worker is down, then let the link go."""


@dataclass(frozen=True)
class Confirm:
    """Ask the controller now whether this host is still wanted."""


@dataclass(frozen=True)
class RelayNotice:
    """Write the notice file and send each component its notice_signal."""

    notice: Notice


@dataclass(frozen=True)
class SendNotice:
    """Relay the notice to the controller (in order, retried)."""

    notice: Notice


@dataclass(frozen=True)
class ApproveEvent:
    """Tell the platform it need not wait for the event (Azure StartRequests)."""

    event_id: str


@dataclass(frozen=True)
class EndStaleNotice:
    """End the controller's notice if the provider no longer announces it."""

    event_id: str
    kind: str


@dataclass(frozen=True)
class AnnounceShutdown:
    """Send the controller a shutdown notice and the final report, then ShutdownAnnounced."""


@dataclass(frozen=True)
class StopForShutdown:
    """Stop every component: the system is going down."""


Action = Union[
    StartRole,
    StopRole,
    WriteTemplate,
    SaveNow,
    OpenLink,
    FinalReport,
    Confirm,
    RelayNotice,
    SendNotice,
    ApproveEvent,
    EndStaleNotice,
    AnnounceShutdown,
    StopForShutdown,
]
