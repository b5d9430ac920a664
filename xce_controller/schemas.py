"""Request and answer bodies of the REST API; FastAPI derives the OpenAPI document from them.

Written for pydantic 1.10 and 2 alike (pydantic_versions.py): JSON numbers are checked by
`json_numbers` validators, bounded strings and lists by `text` and `items`.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, Field

from xce_controller.pydantic_versions import Lenient, Strict, items, json_numbers, text

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]*$"


class ErrorBody(BaseModel):
    error: str = Field(description="stable kind: decommissioned, unmatched, duplicate, ...")
    code: Optional[str] = Field(None, description="reason code: refused_decommissioned, ...")
    message: str
    host: Optional[str] = None
    instance_id: Optional[str] = None
    reason: Optional[str] = None
    protocol: str = "1.0"


class JoinBody(Lenient):
    protocol: str = Field("1.0", max_length=16)
    host: str = text(min_length=1, max_length=253, pattern=NAME_PATTERN)
    instance_id: str = Field("", max_length=253)
    template: str = Field("", max_length=253)
    provider: str = Field("", max_length=253)
    addresses: list[str] = items(list, max_length=64)
    boot_id: str = Field("", max_length=64)
    roles: list[str] = items(list, max_length=16)
    resources: dict[str, Any] = Field(default_factory=dict)
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


class ComponentReport(Lenient):
    name: str = Field(max_length=128)
    state: str = Field(max_length=32)
    pid: Optional[int] = None
    restarts: int = 0
    last_exit: Optional[str] = Field(None, max_length=512)

    check_numbers = json_numbers("pid", "restarts", integer=True)


class HeartbeatBody(Lenient):
    protocol: str = Field("1.0", max_length=16)
    instance_id: str = Field("", max_length=253)
    boot_id: str = Field("", max_length=64)
    agent_state: str = Field("running", max_length=64)
    components: list[ComponentReport] = items(list, max_length=64)


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


class NoticeBody(Lenient):
    protocol: str = Field("1.0", max_length=16)
    instance_id: str = Field("", max_length=253)
    kind: Literal["preemption", "termination", "maintenance", "rebalance", "shutdown"]
    provider: str = Field("", max_length=64)
    event_id: str = Field("", max_length=200)
    deadline: Optional[float] = Field(None, gt=0, lt=1e11)
    state: Literal["active", "ended"] = "active"
    impact: Literal["reboot", "pause"] = "reboot"
    raw: str = Field("", max_length=8192)

    check_numbers = json_numbers("deadline", integer=False)


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


class ExpectBody(Strict):
    # Printable ASCII without spaces: an explicit class, because \S means different things to
    # Python (which checks it) and to JSON Schema's ECMA regexes (which clients read).
    instance_id: str = text(min_length=1, max_length=253, pattern=r"^[\x21-\x7e]+$")
    template: str = Field(min_length=1, max_length=253)
    expected_name: str = Field("", max_length=253)
    expected_address: str = Field("", max_length=64)
    deadline_in: Optional[float] = Field(None, gt=0, le=10 * 365 * 86400)
    provider: str = Field("", max_length=253)
    join_token: str = Field("", max_length=512)

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
    host: str = Field("", max_length=253)

    check_numbers = json_numbers("slots", integer=True)


class JobReportBody(Lenient):
    exit_code: int = Field(0, ge=-255, le=255)

    check_numbers = json_numbers("exit_code", integer=True)


class TemplateUse(TemplateBody):
    hosts: int = Field(description="live hosts (expected or joined) using the template")


class InfoAnswer(BaseModel):
    protocol: str
    heartbeat_interval: float
    host_loss_grace: float
    unmatched_joins: str
    templates: list[str]
