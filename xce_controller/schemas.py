"""Request and answer bodies of the REST API; FastAPI derives the OpenAPI document from them."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal, Optional, Union

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field

from xce_controller import leases
from xce_protocol import names


def _json_number(value: Any) -> Any:
    """JSON Schema's number and integer: no booleans, no numeric strings (pydantic's lax mode
    would coerce both), but 3.0 is an integer."""
    if isinstance(value, (bool, str)):
        raise ValueError("expected a number")
    return value


JsonInt = Annotated[int, BeforeValidator(_json_number)]
JsonFloat = Annotated[float, BeforeValidator(_json_number)]

Name = Field(min_length=1, max_length=names.HOST_NAME_MAX, pattern=names.HOST_NAME)
Short = Annotated[str, Field(max_length=64)]
# What a host says about itself is bounded: a few dozen scalar entries, short keys and texts.
RESOURCE_KEY = r"^[A-Za-z0-9_.-]{1,64}$"
ResourceValue = Union[JsonInt, JsonFloat, Annotated[str, Field(max_length=256)]]


def _resource_keys(value: dict[str, Any]) -> dict[str, Any]:
    for key in value:
        if not re.fullmatch(RESOURCE_KEY, key):
            raise ValueError(f"resource name {key[:40]!r}: letters, digits, _ . - (1 to 64)")
    return value


Resources = Annotated[
    dict[str, ResourceValue],
    Field(max_length=32, json_schema_extra={"propertyNames": {"pattern": RESOURCE_KEY}}),
    AfterValidator(_resource_keys),
]


class Lenient(BaseModel):
    """Agents may send fields a newer protocol adds: unknown fields are ignored."""

    model_config = ConfigDict(extra="ignore")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


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
    protocol: str = "1.1"


class JoinBody(Lenient):
    protocol: str = Field("1.1", max_length=16)
    host: str = Name
    instance_id: str = Field(
        "", max_length=names.INSTANCE_ID_MAX, pattern=names.INSTANCE_ID_OR_NONE
    )
    template: str = Field("", max_length=names.TEMPLATE_MAX, pattern=names.TEMPLATE_OR_NONE)
    provider: str = Field("", max_length=253)
    addresses: list[Short] = Field(default_factory=list, max_length=64)
    boot_id: str = Field("", max_length=64)
    roles: list[Short] = Field(default_factory=list, max_length=16)
    resources: Resources = Field(default_factory=dict)
    agent_version: str = Field("", max_length=64)


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
    deadline: Optional[float]
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
    pid: Optional[JsonInt] = None
    restarts: JsonInt = 0
    last_exit: Optional[str] = Field(None, max_length=512)


class HeartbeatBody(Lenient):
    protocol: str = Field("1.1", max_length=16)
    instance_id: str = Field(
        "", max_length=names.INSTANCE_ID_MAX, pattern=names.INSTANCE_ID_OR_NONE
    )
    boot_id: str = Field("", max_length=64)
    agent_state: str = Field("running", max_length=64)
    components: list[ComponentReport] = Field(default_factory=list, max_length=64)
    renew: bool = Field(
        False, description="the agent (re)started: issue the credential of a new incarnation"
    )


class NoticeDetail(BaseModel):
    kind: str
    provider: str
    event_id: str
    deadline: Optional[float]
    impact: str
    received_at: float
    raw: str
    act_at: Optional[float]
    acted: bool
    reopen_at: Optional[float]
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
    protocol: str = Field("1.1", max_length=16)
    instance_id: str = Field(
        "", max_length=names.INSTANCE_ID_MAX, pattern=names.INSTANCE_ID_OR_NONE
    )
    kind: Literal["preemption", "termination", "maintenance", "rebalance", "shutdown"]
    provider: str = Field("", max_length=64)
    event_id: str = Field("", max_length=200)
    deadline: Optional[Annotated[float, Field(gt=0, lt=1e11), BeforeValidator(_json_number)]] = None
    state: Literal["active", "ended"] = "active"
    impact: Literal["reboot", "pause"] = "reboot"
    raw: str = Field("", max_length=8192)


class JobBody(BaseModel):
    id: int
    command: list[str]
    slots: int
    state: str
    submitted_at: float
    host: str
    assigned: str
    started_at: Optional[float]
    finished_at: Optional[float]
    exit_code: Optional[int]
    requeues: int
    note: str
    assigned_host: str = Field("", description="name of the host it is placed on")


class WatchAnswer(HostAnswer):
    jobs: list[JobBody]


class ChangeBody(BaseModel):
    at: float
    state: str
    by: str
    why: str
    code: str = Field("", description="reason code (docs/observability.md)")


class DrainBody(BaseModel):
    started_at: float
    timeout: Optional[float]
    policy: str
    by: str
    why: str
    deadline: Optional[float]


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
    expected_at: Optional[float]
    deadline: Optional[float]
    joined_at: Optional[float]
    last_seen: Optional[float]
    addresses: list[str]
    roles: list[str]
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
    instance_id: str = Field(
        min_length=1, max_length=names.INSTANCE_ID_MAX, pattern=names.INSTANCE_ID
    )
    template: str = Field(min_length=1, max_length=names.TEMPLATE_MAX, pattern=names.TEMPLATE)
    expected_name: str = Field("", max_length=names.HOST_NAME_MAX, pattern=names.HOST_NAME_OR_NONE)
    expected_address: str = Field("", max_length=64)
    deadline_in: Optional[
        Annotated[float, Field(gt=0, le=10 * 365 * 86400), BeforeValidator(_json_number)]
    ] = None
    provider: str = Field("", max_length=253)
    join_token: str = Field("", max_length=512, description="a per-instance join token")
    mint_join_token: bool = Field(
        False, description="mint a per-instance join token; the answer shows it once"
    )


class ControlBody(Strict):
    reason: str = Field("", max_length=512)


class DecommissionBody(Strict):
    drain_timeout: Optional[
        Annotated[float, Field(ge=0, le=30 * 86400), BeforeValidator(_json_number)]
    ] = None
    policy: Optional[Literal["requeue", "kill", "wait"]] = None
    reason: str = Field("", max_length=512)


class SubmitBody(Strict):
    command: list[str] = Field(min_length=1, max_length=256)
    slots: Annotated[int, Field(ge=1, le=4096), BeforeValidator(_json_number)] = 1
    host: str = Field("", max_length=names.HOST_NAME_MAX, pattern=names.HOST_NAME_OR_NONE)


class JobReportBody(Lenient):
    exit_code: Annotated[int, Field(ge=-255, le=255), BeforeValidator(_json_number)] = 0


class TemplateUse(TemplateBody):
    hosts: int = Field(description="live hosts (expected or joined) using the template")


class InfoAnswer(BaseModel):
    protocol: str
    heartbeat_interval: float
    host_loss_grace: float
    unmatched_joins: str
    templates: list[str]


class LeaseBody(Strict):
    host: str = Name
    session: str = Field(
        min_length=1,
        max_length=64,
        pattern=leases.SESSION,
        description="the agent run asking: a restarted agent is a new holder",
    )
    ttl: Annotated[
        float, Field(ge=leases.TTL_MIN, le=leases.TTL_MAX), BeforeValidator(_json_number)
    ] = Field(description="seconds the lease lasts from this request unless renewed")


class LeaseAnswer(BaseModel):
    protocol: str
    lease: str
    state: Literal["held", "expired", "free"]
    host: str = Field(description="the holder; empty unless held")
    session: str
    token: int = Field(description="fencing token of the latest grant: grows with every grant")
    ttl: float
    expires_in: Optional[float] = Field(description="seconds until the hold ends, if held")
    expires_at: Optional[float] = Field(description="the same as a wall-clock time")
    granted_at: Optional[float]
    last_holder: str = Field(description="the host of the latest grant")


class GaveUpBody(Lenient):
    host: str = Name
    instance_id: str = Field(
        "", max_length=names.INSTANCE_ID_MAX, pattern=names.INSTANCE_ID_OR_NONE
    )
    reason: str = Field("", max_length=512, description="the last refusal or failure it saw")
    action: str = Field("", max_length=64, description="what the instance does now: poweroff")


class GaveUpAnswer(BaseModel):
    protocol: str
    host: str = Field(description="the name the agent gave")
    instance_id: str
    state: str = Field(description="the record's state now: overdue")
    reason: str
