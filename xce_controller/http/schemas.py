"""Request and answer bodies of the REST API; FastAPI derives the OpenAPI document from them.

Written for pydantic 1.10 and 2 alike (pydantic_versions.py): JSON numbers are checked by
`json_numbers` validators, bounded strings, lists and mappings by `text`, `items` and
`mapping`, other checks by `checked`.
"""

from __future__ import annotations

import math
import re
from typing import TYPE_CHECKING, Any, Literal, Optional, Union

from pydantic import BaseModel, Field, StrictFloat, StrictInt, constr

from xce_controller.core import leases
from xce_controller.http.pydantic_versions import (
    Lenient,
    Strict,
    checked,
    items,
    json_numbers,
    json_times,
    mapping,
    text,
)
from xce_protocol import names
from xce_protocol.protocol import MAJOR, MAX_COMPONENTS, MAX_LAST_EXIT, PROTOCOL

if TYPE_CHECKING:  # what the type checker reads; pydantic reads the constrained types
    Time = str
    Short = str
    ResourceText = str
else:
    # Protocol 1.2: every time in an answer is RFC 3339 in UTC (xce_protocol/times.py).
    Time = constr(max_length=40)
    Short = constr(max_length=64)
    ResourceText = constr(strict=True, max_length=256)

# What a host says about itself is bounded: a few dozen scalar entries, short keys and texts.
RESOURCE_KEY = r"^[A-Za-z0-9_.-]{1,64}$"
RESOURCES_MAX = 32
ResourceValue = Union[StrictInt, StrictFloat, ResourceText]


def _resources(value: dict[str, Any]) -> dict[str, Any]:
    if len(value) > RESOURCES_MAX:
        raise ValueError(f"at most {RESOURCES_MAX} resources")
    for key, item in value.items():
        if not re.fullmatch(RESOURCE_KEY, key):
            raise ValueError(f"resource name {key[:40]!r}: letters, digits, _ . - (1 to 64)")
        if isinstance(item, float) and not math.isfinite(item):
            raise ValueError(f"resource {key}: expected a finite number")
    return value


def _same_major(version: str) -> str:
    """The version-skew policy (docs/upgrades.md): an agent of this major version, any minor;
    one of another major would misread the answers, so it is told at once."""
    if version.split(".", maxsplit=1)[0] != MAJOR:
        raise ValueError(
            f"agent speaks protocol {version[:16]!r}, this controller {PROTOCOL} "
            f"(agents of protocol {MAJOR}.x only)"
        )
    return version


class ErrorBody(BaseModel):
    error: str = Field(description="stable kind: decommissioned, unmatched, duplicate, ...")
    code: Optional[str] = Field(None, description="reason code: refused_decommissioned, ...")
    message: str
    host: Optional[str] = None
    instance_id: Optional[str] = None
    reason: Optional[str] = None
    incarnation: Optional[int] = Field(None, description="stale_incarnation: the current one")
    token: Optional[int] = Field(None, description="lease_held: the holder's fencing token")
    expires_in: Optional[float] = Field(None, description="lease_held: seconds the hold lasts")
    protocol: str = PROTOCOL


class JoinBody(Lenient):
    protocol: str = Field("1.1", max_length=16, description="the sender's protocol version")
    host: str = text(min_length=1, max_length=names.HOST_NAME_MAX, pattern=names.HOST_NAME)
    instance_id: str = text("", max_length=names.INSTANCE_ID_MAX, pattern=names.INSTANCE_ID_OR_NONE)
    template: str = text("", max_length=names.TEMPLATE_MAX, pattern=names.TEMPLATE_OR_NONE)
    provider: str = Field("", max_length=253)
    addresses: list[Short] = items(list, max_length=64)
    boot_id: str = Field("", max_length=64)
    roles: list[Short] = items(list, max_length=16)
    resources: dict[str, ResourceValue] = mapping(
        max_length=RESOURCES_MAX, key_pattern=RESOURCE_KEY
    )
    agent_version: str = Field("", max_length=64)

    check_resources = checked(_resources, "resources")
    check_protocol = checked(_same_major, "protocol")


class TemplateBody(BaseModel):
    name: str
    type: str
    model: str
    slots: int
    resources: dict[str, Any]
    host_groups: list[str]
    dispatch_windows: list[str]
    roles: list[str]


class NoticeState(BaseModel):
    """What the agent needs of its host's notice: which one, and whether it is drained."""

    kind: str
    event_id: str
    deadline: Optional[Time]
    drained: bool


class JoinAnswer(BaseModel):
    protocol: str
    status: Literal["accepted"]
    host: str
    key: str
    instance_id: str
    provisioned: bool
    state: str
    template: TemplateBody
    heartbeat_interval: float
    host_loss_grace: float
    version: int
    notice: Optional[NoticeState] = None
    credential: str = Field(
        description="the host credential of this incarnation: the bearer of every later "
        "call for this host (heartbeat, watch, job reports, a rejoin); shown only here"
    )
    worker_credential: str = Field(
        description="the worker's credential of this join: its watch and job reports only; "
        "kept across credential renewals, replaced by the next join"
    )
    incarnation: int = Field(description="accepted joins and renewals of this record")


class ComponentReport(Lenient):
    name: str = Field(max_length=128)
    role: str = Field("", max_length=32, description="worker: a FATAL one closes the host")
    state: str = Field(max_length=32)
    pid: Optional[int] = None
    restarts: int = 0
    last_exit: Optional[str] = Field(None, max_length=MAX_LAST_EXIT)

    check_numbers = json_numbers("pid", "restarts", integer=True)


class HeartbeatBody(Lenient):
    protocol: str = Field("1.1", max_length=16, description="the sender's protocol version")
    instance_id: str = text("", max_length=names.INSTANCE_ID_MAX, pattern=names.INSTANCE_ID_OR_NONE)
    boot_id: str = Field("", max_length=64)
    agent_state: str = Field("running", max_length=64)
    components: list[ComponentReport] = items(list, max_length=MAX_COMPONENTS)
    renew: bool = Field(
        False, description="the agent (re)started: issue the credential of a new incarnation"
    )
    agent_version: str = Field(
        "", max_length=64, description="protocol 1.2: the agent's version (kept at a renewal)"
    )

    check_protocol = checked(_same_major, "protocol")


class NoticeDetail(BaseModel):
    kind: str
    provider: str
    event_id: str
    deadline: Optional[Time]
    impact: str
    received_at: Time
    raw: str
    act_at: Optional[Time]
    acted: bool
    reopen_at: Optional[Time]
    reopen: bool


class HostAnswer(BaseModel):
    protocol: str
    host: str
    instance_id: str
    state: str
    reason: str
    version: int
    heartbeat_interval: float
    host_loss_grace: float
    notice: Optional[NoticeState] = None
    credential: Optional[str] = Field(
        None,
        description="renew: the new host credential; the old one is stale once this "
        "one was presented",
    )
    incarnation: Optional[int] = None


class NoticeBody(Lenient):
    protocol: str = Field("1.1", max_length=16, description="the sender's protocol version")
    instance_id: str = text("", max_length=names.INSTANCE_ID_MAX, pattern=names.INSTANCE_ID_OR_NONE)
    kind: Literal["preemption", "termination", "maintenance", "rebalance", "shutdown", "stop"] = (
        Field(
            description="stop (protocol 1.3): the agent is stopped on purpose (a planned stop): "
            "the host is closed, its jobs may run until deadline, it is not lost while the "
            "notice holds and reopens when its agent runs again"
        )
    )
    provider: str = Field("", max_length=64)
    event_id: str = Field("", max_length=200)
    deadline: Optional[Union[float, str]] = Field(
        None, description="RFC 3339, or seconds since the epoch as agents of 1.1 and 1.2 send"
    )
    state: Literal["active", "ended"] = "active"
    impact: Literal["reboot", "pause"] = "reboot"
    raw: str = Field("", max_length=8192)

    check_times = json_times("deadline")

    check_protocol = checked(_same_major, "protocol")


class JobBody(BaseModel):
    id: int
    command: list[str]
    slots: int
    state: str
    submitted_at: Time
    host: str
    assigned: str
    started_at: Optional[Time]
    finished_at: Optional[Time]
    exit_code: Optional[int]
    requeues: int
    note: str
    assigned_host: str = Field("", description="name of the host it is placed on")


class WatchAnswer(HostAnswer):
    jobs: list[JobBody]


class ChangeBody(BaseModel):
    at: Time
    state: str
    by: str
    why: str
    code: str = Field("", description="reason code (docs/observability.md)")


class DrainBody(BaseModel):
    started_at: Time
    timeout: Optional[float]
    policy: str
    by: str
    why: str
    deadline: Optional[Time]


class HostDetail(BaseModel):
    key: str
    name: str
    state: str
    reason: str
    code: str = Field("", description="reason code of the current state")
    template: str
    instance_id: str
    provider: str
    provisioned: bool
    expected_name: str
    expected_address: str
    expected_at: Optional[Time]
    deadline: Optional[Time]
    joined_at: Optional[Time]
    last_seen: Optional[Time]
    addresses: list[str]
    roles: list[str]
    slots: Optional[int] = Field(None, description="the slots of its template (its capacity)")
    resources: dict[str, Any] = Field(
        default_factory=dict, description="what the agent said it has: cpus, memory_bytes, ..."
    )
    agent_version: str = Field("", description="the agent's version at its last join or restart")
    drain: Optional[DrainBody]
    jobs_running: int
    history: list[ChangeBody]
    report: Optional[dict[str, Any]] = None
    notice: Optional[NoticeDetail] = None
    incarnation: int = Field(0, description="accepted joins of this record")
    refusals: int = Field(0, description="recorded refused attempts (stale credential, ...)")
    last_refusal: str = ""


class ExpectAnswer(HostDetail):
    join_token: Optional[str] = Field(
        None, description="the minted per-instance join token (mint_join_token); shown once"
    )


class ExpectBody(Strict):
    # Explicit classes (names.py), not \S: Python (which checks) and JSON Schema's ECMA
    # regexes (which clients read) must mean the same.
    instance_id: str = text(
        min_length=1, max_length=names.INSTANCE_ID_MAX, pattern=names.INSTANCE_ID
    )
    template: str = text(min_length=1, max_length=names.TEMPLATE_MAX, pattern=names.TEMPLATE)
    expected_name: str = text("", max_length=names.HOST_NAME_MAX, pattern=names.HOST_NAME_OR_NONE)
    expected_address: str = Field("", max_length=64)
    deadline_in: Optional[float] = Field(None, gt=0, le=10 * 365 * 86400)
    provider: str = Field("", max_length=253)
    join_token: str = text(  # what an agent can send (names.BEARER_TOKEN), or none
        "",
        max_length=512,
        pattern=r"^(|[\x21-\x7e]+)$",
        description="a per-instance join token: printable ASCII, no spaces",
    )
    mint_join_token: bool = Field(
        False, description="mint a per-instance join token; the answer shows it once"
    )

    check_numbers = json_numbers("deadline_in", integer=False)


class ControlBody(Strict):
    reason: str = Field("", max_length=512)


class DecommissionBody(Strict):
    drain_timeout: Optional[float] = Field(None, ge=0, le=30 * 86400)
    policy: Optional[Literal["requeue", "kill", "wait"]] = None
    reason: str = Field("", max_length=512)

    check_numbers = json_numbers("drain_timeout", integer=False)


class SubmitBody(Strict):
    command: list[str] = items(min_length=1, max_length=256)
    slots: int = Field(1, ge=1, le=4096)
    host: str = text("", max_length=names.HOST_NAME_MAX, pattern=names.HOST_NAME_OR_NONE)

    check_numbers = json_numbers("slots", integer=True)


class JobReportBody(Lenient):
    exit_code: int = Field(0, ge=-255, le=255)

    check_numbers = json_numbers("exit_code", integer=True)


class TemplateUse(TemplateBody):
    hosts: int = Field(description="live hosts (expected or joined) using the template")


class HealthAnswer(BaseModel):
    protocol: str
    status: str  # ok, or stopping or isolated (a replica cut off from its database) (503)
    storage: str  # ok, or unavailable (writes fail at the moment)


class InfoAnswer(BaseModel):
    protocol: str
    heartbeat_interval: float
    host_loss_grace: float
    unmatched_joins: str
    templates: list[str]


class LeaseBody(Strict):
    host: str = text(min_length=1, max_length=names.HOST_NAME_MAX, pattern=names.HOST_NAME)
    session: str = text(
        min_length=1,
        max_length=64,
        pattern=leases.SESSION,
        description="the agent run asking: a restarted agent is a new holder",
    )
    ttl: float = Field(
        ...,
        ge=leases.TTL_MIN,
        le=leases.TTL_MAX,
        description="seconds the lease lasts from this request unless renewed",
    )

    check_numbers = json_numbers("ttl", integer=False)


class LeaseAnswer(BaseModel):
    protocol: str
    lease: str
    state: Literal["held", "expired", "free"]
    host: str = Field(description="the holder; empty unless held")
    session: str
    token: int = Field(description="fencing token of the latest grant: grows with every grant")
    ttl: float
    # Required and nullable, on pydantic 1 as on 2 (`...`): every answer carries them.
    expires_in: Optional[float] = Field(..., description="seconds until the hold ends, if held")
    expires_at: Optional[Time] = Field(..., description="the same as a wall-clock time")
    granted_at: Optional[Time] = Field(...)
    last_holder: str = Field(description="the host of the latest grant")


class GaveUpBody(Lenient):
    host: str = text(min_length=1, max_length=names.HOST_NAME_MAX, pattern=names.HOST_NAME)
    instance_id: str = text("", max_length=names.INSTANCE_ID_MAX, pattern=names.INSTANCE_ID_OR_NONE)
    reason: str = Field("", max_length=512, description="the last refusal or failure it saw")
    action: str = Field("", max_length=64, description="what the instance does now: poweroff")


class GaveUpAnswer(BaseModel):
    protocol: str
    host: str = Field(description="the name the agent gave")
    instance_id: str
    state: str = Field(description="the record's state now: overdue")
    reason: str
